"""Counters are a property of the job, not of the copy (issue 16 part 3): a job
re-queued by another holder comes back to the consumer's node with that
requeue counted, and every holder's SHOW agrees once the cluster is quiet.
Three real nodes, as a Disque user sees them."""

from __future__ import annotations

import pytest

from tests.harness import NODE_WAIT_MS, module_factory
from tests.integration.cluster_kit import Cluster, addjob, cmd, qlen, show, wait

pytestmark = pytest.mark.xdist_group("counters_cluster")


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    factory = module_factory(tmp_path_factory, "counters3")
    f = next(factory)
    try:
        yield Cluster(f, 3)
    finally:
        next(factory, None)


def counters(n, jid):
    s = show(n, jid)
    return None if s is None else (s["nacks"], s["additional-deliveries"])


def test_a_job_requeued_on_another_node_reaches_the_consumer_with_its_counters(cl):
    # Holders re-queue in node-id order: the consumer's node is the largest
    # id, so another holder re-queues the job.
    a = max(cl, key=lambda n: cmd(n, "CLUSTER", "MYID"))
    jid = addjob(a, "q", "myjob", 5000, "REPLICATE", 3, "RETRY", 1)
    (got,) = cmd(a, "GETJOB", "FROM", "q")
    assert got[1] == jid
    wait(lambda: sum(qlen(n, "q") for n in cl) == 1, message="nobody re-queued it")
    assert qlen(a, "q") == 0                        # queued on another node
    # Federation brings it (a NEEDJOBS broadcast may need its 2 s, 4 s retries).
    (got,) = cmd(a, "GETJOB", "TIMEOUT", NODE_WAIT_MS, "WITHCOUNTERS", "FROM", "q")
    assert got[1] == jid and got[3] == b"nacks" and got[5] == b"additional-deliveries"
    assert got[4] == 0 and got[6] >= 1, got         # Disque: additional-deliveries >= 1
    # Once quiet, every holder shows the counters of the job.
    wait(lambda: len({counters(n, jid) for n in cl} - {None}) == 1,
         message=lambda: {n.port: counters(n, jid) for n in cl})
    assert counters(a, jid) == (0, got[6])
    cmd(a, "ACKJOB", jid)


def test_a_nack_on_one_node_is_seen_by_every_holder(cl):
    a, b = cl[0], cl[1]
    jid = addjob(a, "q2", "job", 5000, "REPLICATE", 3, "RETRY", 60)
    (got,) = cmd(a, "GETJOB", "FROM", "q2")
    assert cmd(a, "NACK", jid) == 1
    wait(lambda: all(counters(n, jid) == (1, 0) for n in cl),
         message=lambda: {n.port: counters(n, jid) for n in cl})
    cmd(b, "ACKJOB", jid)
