"""The cluster with real processes (issue 3): joining by MEET and gossip, HELLO and
CLUSTER NODES, failure detection with kill -9, nodes.conf, FORGET, synchronous
replication and NOREPL, external replication, LEAVING.

One five-node cluster, joined by a MEET chain, is shared by the module; every
test starts from a healthy, empty cluster (``cl`` heals what the last one broke).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
import redis

from tests.conftest import _FACTORIES
from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, module_factory
from tests.integration.cluster_kit import (
    NODE_TIMEOUT_MS, Cluster, addjob, client, cluster_info, cmd, hello, myid, nodes_table, qlen,
    raw_text, show, wait,
)

pytestmark = pytest.mark.xdist_group("cluster_membership")

NOREPL_NODES = "NOREPL Not enough reachable nodes for the requested replication level"
NOREPL_TIMEOUT = "NOREPL Timeout reached before replicating to the requested number of nodes"


@pytest.fixture(scope="module")
def mfactory(tmp_path_factory):
    yield from module_factory(tmp_path_factory, "cluster5")


@pytest.fixture(scope="module")
def chain5(mfactory) -> Cluster:
    # Each node meets only the previous one: gossip must spread the rest.
    return Cluster(mfactory, 5, chain=True)


@pytest.fixture
def cl(request, mfactory, chain5) -> Cluster:
    request.node.stash.setdefault(_FACTORIES, []).append(mfactory)
    chain5.heal()
    return chain5


def error_text(exc_info) -> str:
    return str(exc_info.value)


# ------------------------------------------------------------------ joining

def test_meet_chain_spreads_every_node_with_hello_priorities(cl):
    ids = cl.ids
    assert len(set(ids)) == 5
    assert all(re.fullmatch(r"[0-9a-f]{40}", i) for i in ids)
    ports = {ids[i]: n.port for i, n in enumerate(cl)}
    for i, n in enumerate(cl):
        me, entries = hello(n)
        assert me == ids[i]
        assert set(entries) == set(ids)
        for nid, (ip, port, prio) in entries.items():
            assert (ip, port, prio) == ("127.0.0.1", ports[nid], 1), (nid, entries)
        info = cluster_info(n)
        assert info["cluster_state"] == "ok"
        assert info["cluster_known_nodes"] == "5"
        assert info["cluster_reachable_nodes"] == "4"
        assert info["cluster_size"] == "5"
        assert int(info["cluster_stats_messages_sent"]) > 0
        assert int(info["cluster_stats_messages_received"]) > 0
    # HELLO's port and priority are bulk strings, myself first (RESP2 too).
    reply = cl[2].client(protocol=2).execute_command("HELLO")
    assert reply[0] == 1 and reply[1] == ids[2].encode()
    assert reply[2] == [ids[2].encode(), b"127.0.0.1", str(cl[2].port).encode(), b"1"]


def test_cluster_nodes_format(cl):
    text = raw_text(cl[3], "CLUSTER", "NODES")
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 5
    line_re = re.compile(r"([0-9a-f]{40}) 127\.0\.0\.1:(\d+) ([a-z,]+) (\d+) (\d+) "
                         r"(connected|disconnected)")
    seen = {}
    for line in lines:
        m = line_re.fullmatch(line)
        assert m, line
        seen[m[1]] = (int(m[2]), m[3], m[6])
    # Myself first, flagged "myself"; the others "noflags", connected.
    assert lines[0].startswith(cl.ids[3] + " ")
    for i, nid in enumerate(cl.ids):
        port, flags, link = seen[nid]
        assert port == cl[i].port
        assert flags == ("myself" if i == 3 else "noflags")
        assert link == "connected"
    # The others have answered pings (pong_recv set); nothing pending.
    table = nodes_table(cl[3])
    assert all(row["pong_recv"] > 0 for nid, row in table.items() if nid != cl.ids[3])


# -------------------------------------------------------- failure detection

def test_kill9_fail_needs_a_majority_and_clears_on_rejoin(cl):
    ids = cl.ids
    for i in (2, 3, 4):
        conf = (cl[i].dir / "nodes.conf").read_text()
        assert all(nid in conf for nid in ids)
        cl[i].kill()

    def flags_on(i: int, d: int) -> set:
        return nodes_table(cl[i])[ids[d]]["flags"]

    def state(row: dict) -> str:
        for flag in ("fail", "pfail"):
            if flag in row["flags"]:
                return flag
        return row["link"]

    # Three of five down: the two survivors flag them PFAIL (HELLO priority
    # 5 while only the link is down, then 10) but can't make it FAIL alone.
    # The link-down state lasts a node timeout, which a loaded machine may
    # poll past: each HELLO is checked against the state CLUSTER NODES shows
    # around it, whichever states the polls see.
    priority = {"connected": 1, "disconnected": 5, "pfail": 10}

    def all_pfail():
        pfail = []
        for i in (0, 1):
            before = nodes_table(cl[i])
            _, entries = hello(cl[i])
            after = nodes_table(cl[i])
            for d in (2, 3, 4):
                now = state(after[ids[d]])
                assert now != "fail", raw_text(cl[i], "CLUSTER", "NODES")
                if state(before[ids[d]]) == now:      # no change in between
                    assert entries[ids[d]][2] == priority[now], (now, entries[ids[d]])
                pfail.append(now == "pfail")
        return all(pfail)
    wait(all_pfail, message=lambda: raw_text(cl[0], "CLUSTER", "NODES"))
    assert sorted(e[2] for e in hello(cl[1])[1].values()) == [1, 1, 10, 10, 10]
    window_end = time.monotonic() + 2 * NODE_TIMEOUT_MS / 1000
    while time.monotonic() < window_end:     # two failure-report rounds
        for i in (0, 1):
            assert all("fail" not in flags_on(i, d) for d in (2, 3, 4)), raw_text(
                cl[i], "CLUSTER", "NODES")
        time.sleep(0.05)

    # One comes back (same port and dir, no MEET): three of five agree that the
    # other two are down, a majority, so they become FAIL (priority 100).
    cl[2].start()
    assert myid(cl[2]) == ids[2]
    dead = [3, 4]

    def flagged_fail():
        return all("fail" in flags_on(i, d) and not flags_on(i, 2) & {"pfail", "fail"}
                   for i in (0, 1, 2) for d in dead)
    wait(flagged_fail, message=lambda: raw_text(cl[0], "CLUSTER", "NODES"))
    for i in (0, 1, 2):
        _, entries = hello(cl[i])
        assert {nid: e[2] for nid, e in entries.items()} == {
            ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 100, ids[4]: 100}
        info = cluster_info(cl[i])
        assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"]) == ("5", "2")

    # The other two come back the same way: same ids, FAIL cleared everywhere.
    for i in dead:
        cl[i].start()
        assert myid(cl[i]) == ids[i]
    cl.wait_healthy()
    for n in cl:
        _, entries = hello(n)
        assert {nid: e[2] for nid, e in entries.items()} == {nid: 1 for nid in ids}


def test_forget_blacklists_the_node(cl):
    a, gone = cl[0], cl.ids[4]
    assert cmd(a, "CLUSTER", "FORGET", gone) == b"OK"
    assert gone not in nodes_table(a)
    assert cluster_info(a)["cluster_known_nodes"] == "4"
    with pytest.raises(redis.ResponseError) as e:
        cmd(a, "CLUSTER", "FORGET", cl.ids[0])
    assert "forget myself" in error_text(e)
    with pytest.raises(redis.ResponseError) as e:
        cmd(a, "CLUSTER", "FORGET", "f" * 40)
    assert "Unknown node" in error_text(e)

    # Every other node still knows it and gossips it to us (and it still pings
    # us): it must stay out. Watch a good number of bus messages go by.
    start = int(cluster_info(a)["cluster_stats_messages_received"])

    def many_messages_and_still_forgotten():
        assert gone not in nodes_table(a), "forgotten node re-added before 60 s"
        return int(cluster_info(a)["cluster_stats_messages_received"]) - start >= 30

    wait(many_messages_and_still_forgotten)
    assert gone not in nodes_table(a)
    assert gone not in hello(a)[1]

    # RESET SOFT forgets everybody and clears the blacklist; one MEET brings
    # the whole cluster back, the forgotten node included.
    assert cmd(a, "CLUSTER", "RESET", "SOFT") == b"OK"
    assert list(nodes_table(a)) == [cl.ids[0]]
    assert myid(a) == cl.ids[0]
    assert cmd(a, "CLUSTER", "MEET", cl[1].host, cl[1].port) == b"OK"
    cl.wait_healthy()


# ------------------------------------------------------ sync replication

@pytest.mark.parametrize("repl", [3, 5])
def test_sync_addjob_replicates(cl, repl):
    producer = cl[1]
    jid = addjob(producer, "rq", "payload", 5000, "REPLICATE", repl)
    mine = show(producer, jid)
    assert mine["repl"] == repl and mine["state"] == "queued"
    assert cl.ids[1] in mine["nodes-delivered"]
    # Once replicated, SHOW lists no confirmations (as Disque).
    assert mine["nodes-confirmed"] == set()
    holders = cl.holders(jid)
    # At least repl copies exist when ADDJOB answers, all of them on nodes the
    # producer lists (the 50 ms widening may have added one more).
    assert len(holders) >= repl
    assert {cl.ids[i] for i in holders} <= mine["nodes-delivered"]
    for i in holders:
        s = show(cl[i], jid)
        assert (s["queue"], s["body"], s["repl"]) == (b"rq", b"payload", repl)
        assert {cl.ids[i], cl.ids[1]} <= s["nodes-delivered"] <= mine["nodes-delivered"]
        # Queued on the producer only; the copies wait for its retry.
        assert s["state"] == ("queued" if i == 1 else "active")
        assert qlen(cl[i], "rq") == (1 if i == 1 else 0)
    if repl == 5:
        assert holders == [0, 1, 2, 3, 4]


def test_default_replicate_and_too_many(cl):
    jid = addjob(cl[0], "dq", "x", 5000)
    assert show(cl[0], jid)["repl"] == 3
    assert len(cl.holders(jid)) >= 3
    with pytest.raises(redis.ResponseError) as e:
        cmd(cl[0], "ADDJOB", "dq", "x", 5000, "REPLICATE", 6)
    assert error_text(e) == NOREPL_NODES


def test_norepl_when_nodes_are_down(cl):
    producer = cl[0]
    # Not yet PFAIL: the producer still counts them and sends REPLJOB, which
    # nobody answers -> the timeout variant.  Its node timeout is raised for
    # that part, so that a slow machine does not let it flag them first.
    assert cmd(producer, "CONFIG", "SET", "cluster-node-timeout", 600_000) == b"OK"
    try:
        cl[3].kill()
        cl[4].kill()
        t0 = time.monotonic()
        with pytest.raises(redis.ResponseError) as e:
            cmd(producer, "ADDJOB", "nq", "x", 300, "REPLICATE", 5)
        took = time.monotonic() - t0
        assert error_text(e) == NOREPL_TIMEOUT
        assert took >= 0.25, took
    finally:
        assert cmd(producer, "CONFIG", "SET", "cluster-node-timeout", NODE_TIMEOUT_MS) == b"OK"
    # The copies it made are deleted, best effort; none was queued anywhere.
    wait(lambda: all(qlen(cl[i], "nq") == 0 and cmd(cl[i], "JSCAN", 0, "BUSYLOOP")[1] == []
                     for i in (0, 1, 2)))

    # Once they are flagged down the producer refuses at once.
    wait(lambda: cluster_info(producer)["cluster_reachable_nodes"] == "2")
    with pytest.raises(redis.ResponseError) as e:
        cmd(producer, "ADDJOB", "nq", "x", 5000, "REPLICATE", 4)
    assert error_text(e) == NOREPL_NODES
    # Three live nodes are still enough for three copies.
    jid = addjob(producer, "nq", "x", 5000, "REPLICATE", 3)
    assert cl.holders(jid) == [0, 1, 2]


def test_replication_completes_when_killed_node_returns(cl):
    producer = cl[0]
    cl[3].kill()
    cl[4].kill()
    result: dict = {}

    def produce():
        try:
            c = producer.client()
            result["t0"] = time.monotonic()
            result["id"] = c.execute_command("ADDJOB", "bq", "back", NODE_WAIT_MS, "REPLICATE", 5)
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc
        result["t1"] = time.monotonic()

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    # It waits: only three of the five copies can be made.
    wait(lambda: "t0" in result)
    th.join(0.3)            # not answered within a window: holds however slow
    assert th.is_alive(), result
    # Meanwhile SHOW lists the nodes that confirmed their copy (as Disque).
    _, waiting = cmd(producer, "JSCAN", "BUSYLOOP", "STATE", "wait-repl")
    assert len(waiting) == 1, waiting
    wait(lambda: show(producer, waiting[0])["nodes-confirmed"] == set(cl.ids[:3]))
    cl[3].start()
    cl[4].start()
    th.join(WAIT_TIMEOUT)
    assert not th.is_alive()
    assert "error" not in result, result
    jid = result["id"]
    assert cl.holders(jid) == [0, 1, 2, 3, 4]
    s = show(producer, jid)
    assert s["nodes-delivered"] == set(cl.ids) and s["state"] == "queued"


def test_async_addjob_answers_at_once_and_keeps_replicating(cl):
    cl[4].kill()
    # An id at all shows it answered at once: with node 4 down a sync ADDJOB
    # could not make its five copies and would end in NOREPL after 10 s.
    jid = addjob(cl[0], "aq", "async", 10000, "REPLICATE", 5, "ASYNC")
    assert show(cl[0], jid)["state"] == "queued"
    wait(lambda: cl.holders(jid) == [0, 1, 2, 3])
    cl[4].start()                 # the copy it still misses is made when it is back
    wait(lambda: cl.holders(jid) == [0, 1, 2, 3, 4])


def test_external_replication_under_tiny_maxmemory(cl):
    tight = cl[2]
    old = client(tight).config_get("maxmemory")["maxmemory"]
    used = int(client(tight).info("memory")["used_memory"])
    # used is ~80% of maxmemory: above 75%, below 95%.
    assert cmd(tight, "CONFIG", "SET", "maxmemory", used * 100 // 80) == b"OK"
    try:
        jid = addjob(tight, "xq", "external", 5000, "REPLICATE", 2)
        assert show(tight, jid) is None                 # no local copy
        holders = cl.holders(jid)
        assert len(holders) >= 2 and 2 not in holders
        # One holder is told to queue it.
        wait(lambda: sum(qlen(n, "xq") for n in cl) == 1)
        queued_on = [i for i in holders if show(cl[i], jid)["state"] == "queued"]
        assert len(queued_on) == 1
        s = show(cl[queued_on[0]], jid)
        assert cl.ids[2] not in s["nodes-delivered"]
        got = cmd(cl[queued_on[0]], "GETJOB", "NOHANG", "FROM", "xq")
        assert got == [[b"xq", jid, b"external"]]

        # It refuses REPLJOB too: five copies can't be made, four can.
        with pytest.raises(redis.ResponseError) as e:
            cmd(cl[0], "ADDJOB", "xq", "y", 500, "REPLICATE", 5)
        assert error_text(e) == NOREPL_TIMEOUT
        jid = addjob(cl[0], "xq", "y", 5000, "REPLICATE", 4)
        assert 2 not in cl.holders(jid)
        assert len(cl.holders(jid)) == 4
    finally:
        cmd(tight, "CONFIG", "SET", "maxmemory", old)


# -------------------------------------------------------------- leaving

def test_leaving_is_advertised_and_honoured(cl):
    leaver, lid = cl[4], cl.ids[4]
    queued = addjob(leaver, "lq", "before", 5000, "REPLICATE", 2)
    assert cmd(leaver, "CLUSTER", "LEAVING") == b"no"
    assert cmd(leaver, "CLUSTER", "LEAVING", "yes") == b"OK"
    assert cmd(leaver, "CLUSTER", "LEAVING") == b"yes"

    # Advertised: priority 100 and the "leaving" flag on every node.
    def everyone_sees_leaving():
        return all(hello(n)[1][lid][2] == 100 and "leaving" in nodes_table(n)[lid]["flags"]
                   for n in cl)
    wait(everyone_sees_leaving)
    for i in range(4):
        assert cluster_info(cl[i])["cluster_reachable_nodes"] == "3"

    # Honoured: what is queued is still served, then GETJOB that would block
    # gets -LEAVING (NOHANG still answers nil).
    assert cmd(leaver, "GETJOB", "TIMEOUT", 100, "FROM", "lq") == [[b"lq", queued, b"before"]]
    with pytest.raises(redis.ResponseError) as e:
        cmd(leaver, "GETJOB", "TIMEOUT", 100, "FROM", "lq")
    assert error_text(e).startswith("LEAVING")
    assert cmd(leaver, "GETJOB", "NOHANG", "FROM", "lq") is None

    # ADDJOB on the leaving node keeps no local copy.
    jid = addjob(leaver, "lq", "after", 5000, "REPLICATE", 3)
    assert show(leaver, jid) is None
    holders = cl.holders(jid)
    assert len(holders) >= 3 and 4 not in holders
    wait(lambda: sum(qlen(cl[i], "lq") for i in range(4)) == 1)
    # The others never replicate to it.
    with pytest.raises(redis.ResponseError) as e:
        cmd(cl[0], "ADDJOB", "lq", "x", 5000, "REPLICATE", 5)
    assert error_text(e) == NOREPL_NODES
    for _ in range(5):
        assert 4 not in cl.holders(addjob(cl[0], "lq", "x", 5000, "REPLICATE", 4))

    assert cmd(leaver, "CLUSTER", "LEAVING", "no") == b"OK"
    wait(lambda: all(hello(n)[1][lid][2] == 1 for n in cl))
