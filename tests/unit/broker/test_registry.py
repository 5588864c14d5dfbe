"""broker/registry.py: the jobs and queues of one node as the lifecycle and
the commands see them: lookup by id, ctimes that keep the order of jobs made
in one ms, shared expire times, the holder lists, the AOF's records taken
once. On a Node (a Registry with its commands) in virtual time."""

from __future__ import annotations

import random

from broker import lifecycle
from broker.commands import COMMANDS
from broker.config import Config
from broker.node import Node
from server.sim.clock import VirtualClock


def new_node(clock: VirtualClock) -> Node:
    return Node(Config(), clock, random.Random(1), commands=COMMANDS, strict=True)


def test_jobs_are_found_by_id_until_deleted():
    clock = VirtualClock()
    node = new_node(clock)
    jobs = [lifecycle.new_job(node, b"q", b"x", 1, 60, 0, 5, clock.now) for _ in range(3)]
    for job in jobs:
        lifecycle.add(node, job, clock.now)
    assert node.job_count == 3
    assert all(node.get_job(j.id) is j and node.is_registered(j) for j in jobs)
    assert sorted(j.id for j in node.iter_jobs()) == sorted(j.id for j in jobs)
    lifecycle.delete(node, jobs[0])
    assert node.get_job(jobs[0].id) is None and not node.is_registered(jobs[0])
    assert node.job_count == 2


def test_ctimes_keep_the_order_of_jobs_made_in_one_ms():
    node = new_node(VirtualClock())
    t = 1_700_000_000_000
    a, b = node.new_ctime(t), node.new_ctime(t)
    c = node.new_ctime(t + 1)
    assert a < b < c and a // 1_000_000 == t and c == (t + 1) * 1_000_000


def test_shared_time_is_now_plus_seconds_whatever_it_remembers():
    # (The pure build hands back one int object for equal inputs: memory per
    # job; the compiled one a C integer.)
    node = new_node(VirtualClock())
    now = 1_700_000_000_123
    for _ in range(2):                  # TTL then RETRY, as ADDJOB asks, twice
        assert node.shared_time(now, 86_400) == now + 86_400_000
        assert node.shared_time(now, 300) == now + 300_000
    assert node.shared_time(now, 60) == now + 60_000       # a third: the oldest goes
    assert node.shared_time(now + 1, 300) == now + 1 + 300_000
    assert node.shared_time(now, 86_400) == now + 86_400_000


def test_holder_lists_are_the_nodes_own():
    a, b = new_node(VirtualClock()), new_node(VirtualClock())
    ids = ("f" * 40, "e" * 40)
    mine = a.holders.of(ids)
    assert mine == ("e" * 40, "f" * 40) and a.holders.of(ids) is mine
    assert b.holders.of(ids) == mine and b.holders.of(ids) is not mine


def test_records_are_taken_once():
    clock = VirtualClock()
    node = new_node(clock)
    node.persist = True
    job = lifecycle.new_job(node, b"q", b"x", 1, 60, 0, 5, clock.now)
    lifecycle.add(node, job, clock.now)
    assert node.take_records() == [job]
    assert node.take_records() == []
