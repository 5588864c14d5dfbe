"""A synchronous ADDJOB ended before its copies are confirmed answers the
waiting client with an error, never the id (issue 16 part 1, as Disque): the
job expired (TTL), was deleted (DELJOB, FASTACK, DEBUG FLUSHALL, CLUSTER RESET)
or the node started to leave. Real nodes: the second holder is frozen
(SIGSTOP), so its GOTJOB never comes."""

from __future__ import annotations

import contextlib
import time

import pytest
import redis

from tests.harness import NODE_WAIT_MS, encode_command, module_factory
from tests.integration.cluster_kit import (
    JOB_ID_RE, Cluster, client, cmd, cont, healed, qlen, show, stop, wait,
)

pytestmark = pytest.mark.xdist_group("pending_addjob")

REMOVED = (b"-NOREPL job removed (expired?) before the requested replication level "
           b"was achieved\r\n")
LEAVING = (b"-NOREPL Not enough reachable nodes for the requested replication level, "
           b"since I'm unable to hold a copy of the message for the following reason: "
           b"I'm leaving the cluster\r\n")


@pytest.fixture(scope="module")
def pfactory(tmp_path_factory):
    yield from module_factory(tmp_path_factory, "pending2")


@pytest.fixture(scope="module")
def pair(pfactory) -> Cluster:
    return Cluster(pfactory, 2)


@pytest.fixture
def cl(request, pfactory, pair):
    yield from healed(request, pfactory, pair)


@contextlib.contextmanager
def pending_addjob(cl, *opts):
    """A sync ADDJOB REPLICATE 2 on node 0 with node 1 frozen: yields (raw
    connection waiting for the reply, job id)."""
    a, b = cl[0], cl[1]
    stop(b)
    with a.raw() as r:
        r.send(encode_command("ADDJOB", "q", "body", 0, "REPLICATE", 2, *opts))

        def find():
            cursor, ids = cmd(a, "JSCAN", "BUSYLOOP", "STATE", "wait-repl")
            return ids[0] if ids else None

        jid = wait(find, message="the ADDJOB never showed up as wait-repl")
        assert r.read_available(0.2) == b""        # still waiting for its copy (a window)
        yield r, jid


@pytest.mark.parametrize("end", ["DELJOB", "FASTACK", "DEBUG FLUSHALL", "CLUSTER LEAVING"])
def test_a_deleted_or_abandoned_pending_addjob_answers_norepl(cl, end):
    a = cl[0]
    with pending_addjob(cl) as (r, jid):
        if end in ("DELJOB", "FASTACK"):
            assert cmd(a, end, jid) == 1
        elif end == "DEBUG FLUSHALL":
            assert cmd(a, "DEBUG", "FLUSHALL") == b"OK"
        else:
            assert cmd(a, "CLUSTER", "LEAVING", "yes") == b"OK"
        reply = r.read_reply()
        assert reply == (LEAVING if end == "CLUSTER LEAVING" else REMOVED)
        assert cmd(a, "SHOW", jid) is None          # no copy left here


def test_a_pending_addjob_whose_ttl_expires_answers_norepl(cl):
    t0 = time.monotonic()
    with pending_addjob(cl, "TTL", 1) as (r, jid):
        assert r.read_reply() == REMOVED
        assert time.monotonic() - t0 >= 0.9         # its TTL, counted from before ADDJOB
        assert cmd(cl[0], "SHOW", jid) is None


def test_cluster_reset_ends_a_pending_addjob(node_factory):
    a, b = node_factory.cluster(2, cluster_node_timeout=1500)
    stop(b)
    try:
        with a.raw() as r:
            r.send(encode_command("ADDJOB", "q", "body", 0, "REPLICATE", 2))
            wait(lambda: cmd(a, "JSCAN", "BUSYLOOP", "STATE", "wait-repl")[1])
            assert cmd(a, "CLUSTER", "RESET", "SOFT") == b"OK"
            assert r.read_reply() == REMOVED
    finally:
        cont(b)


# ------------------------------------------ pipelines of synchronous ADDJOBs
# The ADDJOBs right behind a sync ADDJOB waiting for its copies run at once
# (their copies are made in parallel); every reply still leaves in order, and
# any other command waits until all of them are answered (server/resp.py).

def test_a_pipeline_of_sync_addjobs_is_answered_in_order(cl):
    a = cl[0]
    r = client(a)
    pipe = r.pipeline(transaction=False)
    expected = []
    for i in range(300):
        if i % 50 == 7:
            pipe.execute_command("ADDJOB", "q", f"job-{i}", 5000, "REPLICATE", 0)
            expected.append("error")
        elif i % 50 == 8:
            pipe.execute_command("ADDJOB", "q", f"job-{i}", 5000, "REPLICATE", 2, "ASYNC")
            expected.append(f"job-{i}")
        else:
            pipe.execute_command("ADDJOB", "q", f"job-{i}", 5000, "REPLICATE", 2)
            expected.append(f"job-{i}")
    pipe.execute_command("QLEN", "q")       # runs after every ADDJOB is answered
    replies = pipe.execute(raise_on_error=False)
    assert len(replies) == 301
    for want, got in zip(expected, replies):
        if want == "error":
            assert isinstance(got, redis.ResponseError) and "REPLICATE" in str(got)
        else:
            assert JOB_ID_RE.match(got), got
            assert show(a, got)["body"] == want.encode()
    added = sum(1 for w in expected if w != "error")
    assert replies[-1] == added
    assert len({x for x in replies[:-1] if not isinstance(x, Exception)}) == added


def test_replies_behind_a_waiting_addjob_wait_for_it(cl):
    """Node 1 frozen: the first ADDJOB (REPLICATE 2) waits for its copy; the
    REPLICATE 1 ADDJOB behind it is done at once (its job is queued) but its
    reply, and PING's, leave only after the first one's."""
    a, b = cl[0], cl[1]
    stop(b)
    try:
        with a.raw() as conn:
            conn.send(encode_command("ADDJOB", "q", "first", NODE_WAIT_MS, "REPLICATE", 2)
                      + encode_command("ADDJOB", "q", "second", 0, "REPLICATE", 1)
                      + encode_command("PING"))
            wait(lambda: qlen(a, "q") == 1, message="the second ADDJOB did not run at once")
            assert conn.read_available(0.3) == b""      # nothing overtakes the first reply
            cont(b)
            first, second, pong = conn.read_replies(3)
            assert JOB_ID_RE.match(first[1:-2]) and JOB_ID_RE.match(second[1:-2])
            assert show(a, first[1:-2])["body"] == b"first"
            assert show(a, second[1:-2])["body"] == b"second"
            assert pong == b"+PONG\r\n"
    finally:
        cont(b)
