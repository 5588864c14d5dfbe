"""Held jobs (ADDJOB ... HOLD, an extension) on a real 3-node cluster: every
copy is held and invisible, ENQUEUE on a node that did not create the job
releases it cluster-wide, and once released the job survives the loss of the
nodes that released and created it as a job added unheld does; a restart with
the AOF keeps a held job held.

The module shares one cluster (with an AOF, appendfsync always); ``cl`` hands
it out healthy and empty.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import NODE_WAIT_MS, module_factory
from tests.integration.cluster_kit import (
    Cluster, addjob, cmd, elapsed_ms, healed, qlen, show, wait,
)

pytestmark = pytest.mark.xdist_group("cluster_held")


@pytest.fixture(scope="module")
def hfactory(tmp_path_factory):
    yield from module_factory(tmp_path_factory, "held3")


@pytest.fixture(scope="module")
def cluster3(hfactory) -> Cluster:
    return Cluster(hfactory, 3, appendonly="yes", appendfsync="always")


@pytest.fixture
def cl(request, hfactory, cluster3) -> Cluster:
    yield from healed(request, hfactory, cluster3)


def states(cl: Cluster, jid: bytes) -> list:
    return [show(n, jid)["state"] if n.is_alive() else None for n in cl]


def invisible_everywhere(cl: Cluster, queue: str) -> None:
    for n in cl:
        assert qlen(n, queue) == 0
        assert cmd(n, "QPEEK", queue, 10) == []
        assert cmd(n, "GETJOB", "NOHANG", "FROM", queue) is None


def test_released_on_a_replica_survives_the_releaser_and_the_creator(cl):
    jid = addjob(cl[0], "hq", "payload", 5000, "REPLICATE", 3, "RETRY", 2, "HOLD")
    # Replicated held: every node holds a copy, none queues it.
    assert states(cl, jid) == ["held"] * 3
    assert all(show(n, jid)["next-requeue-within"] is None for n in cl)
    assert all(cmd(n, "JSCAN", 0, "BUSYLOOP", "STATE", "held")[1] == [jid] for n in cl)
    invisible_everywhere(cl, "hq")
    # Released on a node that did not create it: queued there, and the other
    # holders learn it (active, with a requeue timer from the release).
    assert cmd(cl[1], "ENQUEUE", jid) == 1
    assert show(cl[1], jid)["state"] == "queued"
    wait(lambda: states(cl, jid) == ["active", "queued", "active"],
         message=lambda: f"states {states(cl, jid)}")
    for i in (0, 2):
        s = show(cl[i], jid)
        assert 0 < s["next-requeue-within"] <= 2000 + 250
        assert (s["nacks"], s["additional-deliveries"]) == (0, 0)
    # The creator dies; the releaser delivers it (no delivery counted before)
    # and dies too, with the worker, before any ack.
    cl[0].kill()
    got = cmd(cl[1], "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "hq")
    assert got == [[b"hq", jid, b"payload", b"nacks", 0, b"additional-deliveries", 0]]
    cl[1].kill()
    t0 = time.monotonic()
    # The last holder re-queues it after RETRY, as for a job added unheld.
    got = cmd(cl[2], "GETJOB", "TIMEOUT", NODE_WAIT_MS, "WITHCOUNTERS", "FROM", "hq")
    print(f"re-queued by the last holder {elapsed_ms(t0):.0f} ms after the releaser died")
    assert got == [[b"hq", jid, b"payload", b"nacks", 0, b"additional-deliveries", 1]]
    assert cmd(cl[2], "ACKJOB", jid) == 1
    cl[0].start()
    cl[1].start()
    wait(lambda: cl.gone_everywhere(jid))


def test_a_restart_keeps_held_jobs_held(cl):
    held = addjob(cl[0], "hr", "held", 5000, "REPLICATE", 3, "RETRY", 1, "HOLD")
    # A witness: delivered, never acked, re-queued by RETRY after the restart.
    witness = addjob(cl[0], "hr-witness", "w", 5000, "REPLICATE", 3, "RETRY", 1)
    assert cmd(cl[0], "GETJOB", "NOHANG", "FROM", "hr-witness")[0][1] == witness
    for n in cl:
        n.kill()
    for n in cl:
        n.start()
    cl.wait_healthy()
    assert states(cl, held) == ["held"] * 3
    # Once the witness came back (its timers ran), the held job still waits.
    wait(lambda: sum(qlen(n, "hr-witness") for n in cl) == 1)
    assert states(cl, held) == ["held"] * 3
    invisible_everywhere(cl, "hr")
    # Released on the last node after the restart: delivered, no delivery counted.
    assert cmd(cl[2], "ENQUEUE", held) == 1
    got = cmd(cl[2], "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "hr")
    assert got == [[b"hr", held, b"held", b"nacks", 0, b"additional-deliveries", 0]]
    wait(lambda: states(cl, held) == ["active"] * 3)
    assert cmd(cl[2], "ACKJOB", held) == 1
    wait(lambda: cl.gone_everywhere(held))


def test_acked_while_held_is_collected_everywhere(cl):
    jid = addjob(cl[0], "ha", "b", 5000, "REPLICATE", 3, "HOLD")
    assert cmd(cl[2], "ACKJOB", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))
    jid = addjob(cl[1], "ha", "b", 5000, "REPLICATE", 3, "HOLD")
    assert cmd(cl[0], "FASTACK", jid) == 1
    wait(lambda: cl.gone_everywhere(jid))
