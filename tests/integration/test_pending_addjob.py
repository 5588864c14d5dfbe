"""A synchronous ADDJOB ended before its copies are confirmed answers the
waiting client with an error, never the id (issue 16 part 1, as Disque): the
job expired (TTL), was deleted (DELJOB, FASTACK, DEBUG FLUSHALL, CLUSTER RESET)
or the node started to leave. Real nodes: the second holder is frozen
(SIGSTOP), so its GOTJOB never comes."""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.harness import encode_command, module_factory
from tests.integration.cluster_kit import Cluster, cmd, cont, healed, stop, wait

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
    with a.raw(timeout=30) as r:
        r.send(encode_command("ADDJOB", "q", "body", 0, "REPLICATE", 2, *opts))

        def find():
            cursor, ids = cmd(a, "JSCAN", "BUSYLOOP", "STATE", "wait-repl")
            return ids[0] if ids else None

        jid = wait(find, message="the ADDJOB never showed up as wait-repl")
        assert r.read_available(0.2) == b""        # still waiting for its copy
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
        reply = r.read_reply(timeout=10)
        assert reply == (LEAVING if end == "CLUSTER LEAVING" else REMOVED)
        assert cmd(a, "SHOW", jid) is None          # no copy left here


def test_a_pending_addjob_whose_ttl_expires_answers_norepl(cl):
    t0 = time.monotonic()
    with pending_addjob(cl, "TTL", 1) as (r, jid):
        assert r.read_reply(timeout=10) == REMOVED
        assert time.monotonic() - t0 < 5
        assert cmd(cl[0], "SHOW", jid) is None


def test_cluster_reset_ends_a_pending_addjob(node_factory):
    a, b = node_factory.cluster(2, cluster_node_timeout=1500)
    stop(b)
    try:
        with a.raw(timeout=30) as r:
            r.send(encode_command("ADDJOB", "q", "body", 0, "REPLICATE", 2))
            wait(lambda: cmd(a, "JSCAN", "BUSYLOOP", "STATE", "wait-repl")[1])
            assert cmd(a, "CLUSTER", "RESET", "SOFT") == b"OK"
            assert r.read_reply(timeout=10) == REMOVED
    finally:
        cont(b)
