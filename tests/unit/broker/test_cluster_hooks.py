"""broker/cluster_hooks.py: the cluster layer as the broker calls it. A bare
Node holds the null object, which answers as a lone node does (a node
composed with its cluster and no peer); the broker imports nothing of
cluster/, whose Cluster is the one implementation."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from broker.client import Client
from broker.cluster_hooks import NO_BUS, NOREPL_NODES, ClusterHooks
from broker.commands import COMMANDS
from broker.config import Config
from broker.dispatch import CommandError
from broker.job import Job, random_node_id
from broker.node import Node
from broker.queue import Queue
from cluster.cluster import Cluster
from protocol.resp import Error, Status
from server.sim.clock import VirtualClock
from server.sim.inprocess import InProcessNode

ROOT = Path(__file__).resolve().parents[2]


def bare_node(seed: int = 5) -> Node:
    clock = VirtualClock()
    return Node(Config(), clock, random.Random(seed), commands=COMMANDS, strict=True)


def test_a_bare_node_holds_the_null_object_and_a_composed_one_its_cluster():
    assert type(bare_node().cluster) is ClusterHooks
    n = InProcessNode()
    assert isinstance(n.node.cluster, Cluster) and n.node.cluster is n.cluster


def test_the_null_object_answers_as_a_lone_node():
    hooks = ClusterHooks()
    job = Job(b"D-00000000-%024d-05a1" % 1, b"q", b"x", 0, 1, 10_000, 0, 0, 5)
    client = Client()
    assert not hooks.enabled and not hooks.leaving() and hooks.reachable_count() == 1
    assert hooks.replicate_new_job(client, job, 0, False, False) is NOREPL_NODES
    assert hooks.known_add(client, job.id) == Status(job.id.decode())
    assert hooks.send_willqueue(job) == 0           # no holder ahead of us
    assert hooks.next_deadline() is None
    assert hooks.hello_entries("a" * 40, "10.0.0.1", 7711) == [
        [b"a" * 40, b"10.0.0.1", b"7711", b"1"]]
    for call in (lambda: hooks.meet("10.0.0.2", 17711, 0), lambda: hooks.forget("b" * 40, 0),
                 lambda: hooks.reset(True, 0), lambda: hooks.set_leaving(True, 0),
                 hooks.save_config, hooks.nodes_lines, hooks.cluster_info):
        with pytest.raises(CommandError) as e:
            call()
        assert e.value.reply == NO_BUS
    # What a lone node's cluster does with them: nothing to tell anyone.
    hooks.job_queued(job)
    hooks.job_deleted(job)
    hooks.try_job_gc(job, 0)
    hooks.need_jobs(Queue(b"q", 0), 0)
    hooks.tick(0)


# A seeded stream of the job commands: a bare node (the null object) and a
# composed node with no peer (Cluster) answer each the same, byte for byte
# (the same seed draws the same node id, then the same job ids, on both).
STREAM = [
    ["ADDJOB", "q", "a", 0], ["ADDJOB", "q", "b", 0, "REPLICATE", 2],
    ["ADDJOB", "q", "c", 0, "RETRY", 0], ["ADDJOB", "q", "d", 0, "ASYNC"],
    ["QLEN", "q"], ["GETJOB", "NOHANG", "COUNT", 2, "FROM", "q"],
    ["ACKJOB", "D-00000000-%024d-05a1" % 7], ["FASTACK", "D-00000000-%024d-05a1" % 8],
    ["PAUSE", "q", "in", "bcast"], ["ADDJOB", "q", "e", 0], ["PAUSE", "q", "none", "bcast"],
    ["GETJOB", "NOHANG", "FROM", "q", "other"], ["QSTAT", "q"],
]


def _replies(call, ids_of) -> list:
    out = []
    for argv in STREAM:
        out.append(call(*argv))
        if argv[0] == "GETJOB":
            for _queue, jid, _body in out[-1] or ():
                out.append(call("WORKING", jid))
                out.append(call("NACK", jid))
                out.append(call("ACKJOB", jid))
        ids_of(out)
    return out


def test_a_bare_node_and_a_lone_composed_node_answer_alike():
    rng = random.Random(3)
    bare = Node(Config(), VirtualClock(), rng, node_id=random_node_id(rng), commands=COMMANDS,
                strict=True)
    client = bare.new_client()

    def call_bare(*args):
        return bare.handle_command(client, [a if isinstance(a, bytes) else str(a).encode()
                                            for a in args])

    lone = InProcessNode(clock=VirtualClock(), rng=random.Random(3))
    assert bare.myself_id == lone.node.myself_id
    got = _replies(call_bare, lambda out: None)
    want = _replies(lone.call, lambda out: None)
    assert got == want
    assert Error(NOREPL_NODES) in got                # REPLICATE 2 on one node
    assert bare.job_count == lone.node.job_count


def test_the_commands_that_need_a_bus_say_there_is_none():
    node = bare_node()
    client = node.new_client()
    for sub in (b"NODES", b"MYID", b"INFO", b"SAVECONFIG", b"LEAVING"):
        assert node.handle_command(client, [b"CLUSTER", sub]) == Error(NO_BUS)
    # Refused before the arguments are read, as Disque does without a bus.
    assert node.handle_command(client, [b"CLUSTER", b"MEET", b"x", b"y"]) == Error(NO_BUS)
    info = node.handle_command(client, [b"INFO", b"cluster"])
    assert "cluster_enabled:0" in info
    client.proto = 3
    hello = node.handle_command(client, [b"HELLO", b"3"])
    assert hello[b"mode"] == b"standalone"
    assert node.handle_command(client, [b"HELLO"]) == [
        1, node.myself_id.encode(), [node.myself_id.encode(), b"127.0.0.1", b"7711", b"1"]]
    lone = InProcessNode()
    assert "cluster_enabled:1" in lone.call("INFO", "cluster")
    assert lone.call("CLUSTER", "MYID") == lone.node.myself_id.encode()


def test_reset_hard_gives_the_node_its_new_id_for_the_next_jobs():
    n = InProcessNode()
    old = n.node.myself_id
    assert n.call("CLUSTER", "RESET", "HARD") == "OK"
    new = n.node.myself_id
    assert new != old and new == n.cluster.m.node_id
    jid = n.call("ADDJOB", "q", "x", 0)
    assert jid[2:10] == new[:8]


def test_the_broker_imports_nothing_of_the_cluster_layer():
    """broker/ (the core and the commands) reaches the cluster through
    broker/cluster_hooks.py only."""
    found = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
            found += [(path.relative_to(ROOT).as_posix(), m) for m in names
                      if m == "cluster" or m.startswith("cluster.")]
    assert found == []

