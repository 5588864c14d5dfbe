"""Cluster delivery with real processes (issue 4): requeue after crashes, single
requeue cluster-wide, ack propagation and garbage collection (also through nodes
that never had the job and while holders are down), FASTACK, federation (100 jobs
consumed from one node, latency of a blocked consumer), WITHCOUNTERS, PAUSE
bcast, paused-out queues and federation, a LEAVING node draining.

One five-node cluster is shared by the module; ``cl`` hands it out healthy and
empty (dead nodes restarted, stopped ones continued, DEBUG FLUSHALL).
"""

from __future__ import annotations

import random
import statistics
import threading
import time

import pytest
import redis

from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, module_factory
from tests.integration.cluster_kit import (
    Cluster, addjob, client, cmd, cont, elapsed_ms, healed, nodes_table, qlen, show, stop,
    wait,
)

pytestmark = pytest.mark.xdist_group("cluster_delivery")


@pytest.fixture(scope="module")
def dfactory(tmp_path_factory):
    yield from module_factory(tmp_path_factory, "delivery5")


@pytest.fixture(scope="module")
def cluster5(dfactory) -> Cluster:
    return Cluster(dfactory, 5)


@pytest.fixture
def cl(request, dfactory, cluster5) -> Cluster:
    yield from healed(request, dfactory, cluster5)


def total_queued(cl: Cluster, queue: str) -> int:
    return sum(qlen(n, queue) for n in cl if n.is_alive())


def holders_other_than(cl: Cluster, jid: bytes, producer: int) -> list[int]:
    holders = cl.holders(jid)
    assert producer in holders and len(holders) >= 3, holders
    return [i for i in holders if i != producer]


def counters(reply_job: list) -> tuple[int, int]:
    q, jid, body, k1, nacks, k2, adeliv = reply_job
    assert (k1, k2) == (b"nacks", b"additional-deliveries")
    return nacks, adeliv


class Getter(threading.Thread):
    """A GETJOB blocked in the background on a node; records when it answered."""

    def __init__(self, node, *args):
        super().__init__(daemon=True)
        self.conn = node.client()
        self.args = args
        self.reply = self.error = None
        self.t_reply = None
        self.start()

    def run(self):
        try:
            self.reply = self.conn.execute_command("GETJOB", *self.args)
        except Exception as exc:  # noqa: BLE001 - checked by the test
            self.error = exc
        self.t_reply = time.monotonic()

    def result(self, timeout=WAIT_TIMEOUT):
        self.join(timeout)
        assert not self.is_alive(), "GETJOB did not return"
        assert self.error is None, self.error
        return self.reply


def wait_blocked(n, queue: str, count: int = 1) -> None:
    def blocked():
        st = cmd(n, "QSTAT", queue)
        return st is not None and dict(zip(st[::2], st[1::2]))[b"blocked"] == count
    wait(blocked)


# ---------------------------------------------------------------- requeue

def test_job_delivered_after_crashing_all_holders_but_one(cl):
    jid = addjob(cl[0], "crashq", "survives", 5000, "REPLICATE", 3, "RETRY", 1)
    assert qlen(cl[0], "crashq") == 1            # queued where it was added
    others = holders_other_than(cl, jid, 0)
    victim, survivor = others[0], others[1]
    consumer = next(i for i in range(5) if i not in cl.holders(jid))
    # Crash N-1 holders, the one where it is queued included.
    cl[0].kill()
    cl[victim].kill()
    t0 = time.monotonic()
    # A consumer on a node that never had it: the survivor re-queues it after
    # RETRY, federation brings it over.
    got = cmd(cl[consumer], "GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "crashq")
    print(f"delivered {elapsed_ms(t0):.0f} ms after the crash (RETRY 1 s)")
    assert got == [[b"crashq", jid, b"survives"]]
    assert show(cl[survivor], jid) is not None
    assert cmd(cl[consumer], "ACKJOB", jid) == 1
    # The ack is collected once the crashed holders are back (empty: they
    # confirm they do not know it).
    assert show(cl[consumer], jid)["state"] == "acked"
    cl[0].start()
    cl[victim].start()
    wait(lambda: cl.gone_everywhere(jid))


def test_unacked_job_requeued_once_with_counters(cl):
    jid = addjob(cl[0], "rq1", "again", 5000, "REPLICATE", 3, "RETRY", 1)
    first = cmd(cl[0], "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "rq1")
    assert first[0][1] == jid and counters(first[0]) == (0, 0)
    assert total_queued(cl, "rq1") == 0
    # Not acked: every holder's retry timer fires about 1 s later; usually a
    # single node re-queues it (WILLQUEUE / QUEUED), never more than one stays.
    wait(lambda: total_queued(cl, "rq1") >= 1)
    t_first = time.monotonic()
    seen = []
    # Watched for at least 0.6 s (the other holders' timers fire meanwhile),
    # then until it settles: a loaded machine may see a second copy for a
    # moment before its QUEUED message removes it.
    wait(lambda: seen.append(total_queued(cl, "rq1")) or
         (time.monotonic() - t_first > 0.6 and seen[-2:] == [1, 1]),
         message=lambda: f"queued copies seen: {seen[-10:]}")
    print("queued copies cluster-wide after the requeue:", seen[:3], "...", seen[-3:])
    assert seen[-1] == 1 and seen[-2] == 1, seen
    where = [i for i, n in enumerate(cl) if qlen(n, "rq1") == 1]
    assert len(where) == 1
    print("re-queued on", "the node that delivered it" if where[0] == 0 else "a replica")
    got = cmd(cl[where[0]], "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "rq1")
    assert got[0][:3] == [b"rq1", jid, b"again"]
    assert counters(got[0]) == (0, 1), f"requeued on node {where[0]}"
    assert total_queued(cl, "rq1") == 0
    assert cmd(cl[where[0]], "ACKJOB", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))


def test_withcounters_after_nack(cl):
    jid = addjob(cl[1], "nq", "nacked", 5000, "REPLICATE", 3, "RETRY", 60)
    got = cmd(cl[1], "GETJOB", "WITHCOUNTERS", "FROM", "nq")
    assert got[0][1] == jid and counters(got[0]) == (0, 0)
    assert cmd(cl[1], "NACK", jid) == 1
    assert cmd(cl[1], "NACK", jid) == 0          # already queued
    assert total_queued(cl, "nq") == 1
    got = cmd(cl[1], "GETJOB", "WITHCOUNTERS", "FROM", "nq")
    assert counters(got[0]) == (1, 0)
    assert cmd(cl[1], "NACK", jid) == 1
    got = cmd(cl[1], "GETJOB", "WITHCOUNTERS", "FROM", "nq")
    assert counters(got[0]) == (2, 0)
    s = show(cl[1], jid)
    assert (s["nacks"], s["additional-deliveries"]) == (2, 0)
    # The other holders only postponed their requeue: nothing queued anywhere.
    assert total_queued(cl, "nq") == 0


# ------------------------------------------------------------------- acks

def test_ack_collects_on_every_holder(cl):
    jid = addjob(cl[0], "aq", "a", 5000, "REPLICATE", 3)
    assert cmd(cl[0], "GETJOB", "FROM", "aq")[0][1] == jid
    assert cmd(cl[0], "ACKJOB", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))
    # Acked on a holder that is not where it was queued.
    jid = addjob(cl[0], "aq", "b", 5000, "REPLICATE", 3)
    replica = holders_other_than(cl, jid, 0)[0]
    assert cmd(cl[replica], "ACKJOB", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))
    assert total_queued(cl, "aq") == 0


def test_ack_to_a_node_that_never_had_the_job(cl):
    jid = addjob(cl[2], "aq2", "x", 5000, "REPLICATE", 3)
    outsider = next(i for i in range(5) if i not in cl.holders(jid))
    assert cmd(cl[outsider], "ACKJOB", jid) == 0     # unknown here
    wait(lambda: cl.gone_everywhere(jid))
    assert total_queued(cl, "aq2") == 0


def test_ack_while_a_holder_is_down(cl):
    jid = addjob(cl[0], "aq3", "x", 5000, "REPLICATE", 3)
    down, other = holders_other_than(cl, jid, 0)[:2]
    cl[down].kill()
    assert cmd(cl[0], "ACKJOB", jid) == 1
    # The live holders know it is acked but can't collect it without the
    # missing holder's confirmation.
    wait(lambda: show(cl[other], jid) is not None and show(cl[other], jid)["state"] == "acked")
    assert show(cl[0], jid)["state"] == "acked"
    cl[down].start()
    wait(lambda: cl.gone_everywhere(jid))


def test_ack_to_a_non_holder_while_every_holder_is_down(cl):
    jid = addjob(cl[0], "aq4", "x", 5000, "REPLICATE", 3)
    holders = cl.holders(jid)
    outsider = next(i for i in range(5) if i not in holders)
    hids = [cl.ids[i] for i in holders]
    for i in holders:
        stop(cl[i])               # down for their peers, copies kept in memory
    try:
        wait(lambda: all(nodes_table(cl[outsider])[h]["flags"] & {"pfail", "fail"}
                         for h in hids))
        assert cmd(cl[outsider], "ACKJOB", jid) == 0
    finally:
        for i in holders:
            cont(cl[i])
    # When they come back the ack reaches them and the job is collected.
    wait(lambda: cl.gone_everywhere(jid))


def test_ack_to_a_non_holder_while_every_holder_is_killed(node_factory):
    # Holders with an AOF (fsync always) come back from kill -9 with their copy.
    c4 = Cluster(node_factory, 4, appendonly="yes", appendfsync="always")
    jid = addjob(c4[0], "aq5", "x", 5000, "REPLICATE", 3)
    holders = c4.holders(jid)
    outsider = next(i for i in range(4) if i not in holders)
    for i in holders:
        c4[i].kill()
    assert cmd(c4[outsider], "ACKJOB", jid) == 0     # a dummy ack, nobody to tell
    # Back with their copy, while the outsider is frozen: the job is there, live.
    stop(c4[outsider])
    try:
        for i in holders:
            c4[i].start()
        for i in holders:
            assert show(c4[i], jid)["state"] in ("active", "queued")
    finally:
        cont(c4[outsider])
    wait(lambda: c4.gone_everywhere(jid))


def test_fastack_owner_non_owner_holder_and_outsider(cl):
    jid = addjob(cl[0], "fq", "x", 5000, "REPLICATE", 3)
    assert cmd(cl[0], "FASTACK", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))

    jid = addjob(cl[0], "fq", "y", 5000, "REPLICATE", 3)
    replica = holders_other_than(cl, jid, 0)[0]
    assert cmd(cl[replica], "FASTACK", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))

    jid = addjob(cl[0], "fq", "z", 5000, "REPLICATE", 3)
    outsider = next(i for i in range(5) if i not in cl.holders(jid))
    assert cmd(cl[outsider], "FASTACK", jid) == 0
    wait(lambda: cl.gone_everywhere(jid))
    assert total_queued(cl, "fq") == 0


# ------------------------------------------------------------- federation

def test_consume_100_jobs_produced_on_random_nodes(cl):
    rnd = random.Random(4)
    produced = {addjob(cl[rnd.randrange(5)], "hq", f"job-{i}", 5000) for i in range(100)}
    assert len(produced) == 100
    got: list[bytes] = []
    c = client(cl[0])
    t0 = time.monotonic()
    deadline = t0 + WAIT_TIMEOUT          # a guard: each GETJOB waits for what comes
    while len(got) < 100 and time.monotonic() < deadline:
        reply = c.execute_command("GETJOB", "TIMEOUT", 2000, "COUNT", 25, "FROM", "hq")
        for q, jid, body in reply or []:
            got.append(jid)
        if reply:
            assert c.execute_command("ACKJOB", *[j[1] for j in reply]) == len(reply)
    print(f"consumed {len(got)} jobs from node 0 in {elapsed_ms(t0):.0f} ms")
    assert len(got) == len(set(got)), "a job was delivered twice"
    assert set(got) == produced
    wait(lambda: total_queued(cl, "hq") == 0)


def test_blocked_consumer_gets_a_job_produced_elsewhere_quickly(cl):
    latencies = []
    for r in range(6):
        consumer, producer = r % 5, (r + 1 + r % 3) % 5
        queue = f"lat{r}"
        g = Getter(cl[consumer], "TIMEOUT", NODE_WAIT_MS, "FROM", queue)
        wait_blocked(cl[consumer], queue)
        t0 = time.monotonic()
        jid = addjob(cl[producer], queue, "hot", 5000)
        reply = g.result()
        assert reply == [[queue.encode(), jid, b"hot"]]
        latencies.append((g.t_reply - t0) * 1000)
        assert cmd(cl[consumer], "ACKJOB", jid) == 1
    print("blocked consumer latency (ms): " + ", ".join(f"{x:.1f}" for x in latencies)
          + f"; median {statistics.median(latencies):.1f} (SPEC target 100 ms)")
    # Quick means pushed at once to the node that asked, not fetched by its
    # next NEEDJOBS broadcast (2 s later, then 4 s...); the median, as one
    # round on a loaded machine may be slow for reasons of its own.
    assert statistics.median(latencies) < 1000, latencies


# ----------------------------------------------------------------- pause

def test_pause_bcast_reaches_every_node(cl):
    assert cmd(cl[0], "PAUSE", "pq", "in", "bcast") == b"in"
    wait(lambda: all(cmd(n, "PAUSE", "pq", "state") == b"in" for n in cl))
    with pytest.raises(redis.ResponseError) as e:
        cmd(cl[3], "ADDJOB", "pq", "x", 5000)
    assert str(e.value).startswith("PAUSED")
    assert cmd(cl[2], "PAUSE", "pq", "all", "bcast") == b"all"
    wait(lambda: all(cmd(n, "PAUSE", "pq", "state") == b"all" for n in cl))
    assert cmd(cl[4], "PAUSE", "pq", "none", "bcast") == b"none"
    wait(lambda: all(cmd(n, "PAUSE", "pq", "state") == b"none" for n in cl))
    addjob(cl[3], "pq", "x", 5000)


def test_paused_queues_and_federation(cl):
    jid = addjob(cl[1], "po", "held", 5000, "REPLICATE", 1)
    assert cmd(cl[1], "PAUSE", "po", "out") == b"out"
    # Paused out: nothing leaves node 1, even for a consumer elsewhere.
    assert cmd(cl[0], "GETJOB", "TIMEOUT", 1500, "FROM", "po") is None
    assert qlen(cl[1], "po") == 1 and show(cl[1], jid)["state"] == "queued"
    assert cmd(cl[1], "PAUSE", "po", "none") == b"none"
    assert cmd(cl[0], "GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "po") == [[b"po", jid, b"held"]]

    # Paused in (locally, on every other node): no REPLJOB is accepted.
    for i in (1, 2, 3, 4):
        assert cmd(cl[i], "PAUSE", "pi", "in") == b"in"
    with pytest.raises(redis.ResponseError) as e:
        cmd(cl[0], "ADDJOB", "pi", "x", 300, "REPLICATE", 2)
    assert str(e.value).startswith("NOREPL Timeout")
    assert cmd(cl[2], "PAUSE", "pi", "none") == b"none"
    jid = addjob(cl[0], "pi", "x", 5000, "REPLICATE", 2)
    assert cl.holders(jid) == [0, 2]


# ---------------------------------------------------------------- leaving

def test_leaving_node_drains_its_jobs(cl):
    leaver = cl[4]
    produced = {addjob(leaver, "dq", f"d{i}", 5000) for i in range(6)}
    assert qlen(leaver, "dq") == 6
    assert cmd(leaver, "CLUSTER", "LEAVING", "yes") == b"OK"
    got = []
    c = client(cl[0])
    deadline = time.monotonic() + WAIT_TIMEOUT     # a guard, as above
    while len(got) < 6 and time.monotonic() < deadline:
        reply = c.execute_command("GETJOB", "TIMEOUT", 2000, "COUNT", 6, "FROM", "dq")
        for q, jid, body in reply or []:
            got.append(jid)
    assert sorted(got) == sorted(produced)
    assert c.execute_command("ACKJOB", *got) == 6
    # Nothing queued and, once the acks are collected, no job left on it.
    wait(lambda: qlen(leaver, "dq") == 0
         and client(leaver).info("jobs")["registered_jobs"] == 0)
    assert all(cl.gone_everywhere(j) for j in produced)


def test_a_job_queued_where_no_consumer_is_reaches_one_fed_by_another_node(cl):
    """(issue 25) Node 0's consumer gets jobs from node 2 (its recent source)
    without pause; a job queued on node 1, which has no consumer, still
    reaches it: node 0 also asks every node now and then, as Disque does.
    Asking only its sources, it never did while node 2 kept sending."""
    feeding = threading.Event()
    feeding.set()

    def feed():                         # node 2: jobs, no consumer
        c = client(cl[2])
        while feeding.is_set():
            c.execute_command("ADDJOB", "fedq", "from-2", 5000, "REPLICATE", 1)
            time.sleep(0.1)

    got: list[bytes] = []

    def consume():                      # node 0: takes and acks whatever comes
        c = client(cl[0])
        while feeding.is_set():
            for _q, jid, body in c.execute_command("GETJOB", "TIMEOUT", 200, "FROM",
                                                   "fedq") or []:
                got.append(body)
                c.execute_command("ACKJOB", jid)

    threads = [threading.Thread(target=t, daemon=True) for t in (feed, consume)]
    for t in threads:
        t.start()
    try:
        wait(lambda: got.count(b"from-2") >= 20)    # node 2 is node 0's source
        # Queued on node 1 while paused out: not pushed to node 0 (which asked
        # it for jobs at first), only a NEEDJOBS from now on can fetch it.
        assert cmd(cl[1], "PAUSE", "fedq", "out") == b"out"
        jid = addjob(cl[1], "fedq", "from-1", 5000, "REPLICATE", 1)
        assert cmd(cl[1], "PAUSE", "fedq", "none") == b"none"
        t0 = time.monotonic()
        wait(lambda: b"from-1" in got, message="the job on node 1 never left it")
        print(f"job on a node with no consumer delivered after {elapsed_ms(t0):.0f} ms")
        wait(lambda: cl.gone_everywhere(jid))
    finally:
        feeding.clear()
        for t in threads:
            t.join(5)
