"""Issue 5 with the cluster: every node of a 5-node cluster killed with -9 and
restarted with its append-only file; a REPLICATE 3 job comes back (active, as
SPEC section 7 says) and is delivered again after its retry time, once."""

from __future__ import annotations

from tests.integration.cluster_kit import Cluster, addjob, cmd, show, wait


def test_mass_restart_delivers_a_replicated_job_again(node_factory):
    c = Cluster(node_factory, 5, appendonly="yes", appendfsync="always")
    jid = addjob(c[0], "mass", "payload", 5000, "REPLICATE", 3, "RETRY", 2)
    holders = c.holders(jid)
    assert len(holders) >= 3
    # Delivered once and never acked: the worker died with the cluster.
    got = cmd(c[0], "GETJOB", "NOHANG", "FROM", "mass")
    assert got[0][1] == jid
    for n in c:
        n.kill()
    for n in c:
        n.start()
    c.wait_healthy()
    # Loaded copies are active, not queued: the retry timers bring the job back.
    for i in holders:
        assert show(c[i], jid)["state"] in ("active", "queued")

    def delivered():
        for n in c:
            reply = cmd(n, "GETJOB", "NOHANG", "FROM", "mass")
            if reply:
                return n, reply[0]
        return None

    node, job = wait(delivered, message="job not delivered after the restart")
    assert job[1] == jid and job[2] == b"payload"
    assert cmd(node, "ACKJOB", jid) == 1
    wait(lambda: c.gone_everywhere(jid))
    # And no copy is left queued anywhere once the ack is collected.
    assert all(cmd(n, "QLEN", "mass") == 0 for n in c)
