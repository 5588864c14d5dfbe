"""deploy/docker/disquette-ctl, the image's health check, Kubernetes probes and
hooks, run for real against real nodes: ready, alive, drain (preStop) and
rejoin (postStart)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.deploy.deploy_kit import CTL, ctl
from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, RawConn, free_port


def leaving(n) -> bytes:
    with RawConn(n.host, n.port) as r:
        return r.call("CLUSTER", "LEAVING")


def registered_jobs(n) -> int:
    return int(n.client().info("jobs")["registered_jobs"])


def test_ready_and_alive(node):
    assert ctl("ready", port=node.port).returncode == 0
    assert ctl("alive", port=node.port).returncode == 0
    nobody = free_port()
    assert ctl("ready", port=nobody).returncode == 1
    assert ctl("alive", port=nobody).returncode == 1


def test_probes_with_a_password(node_factory):
    n = node_factory(requirepass="pw")
    # Not ready without the password (the node refuses it), but alive.
    assert ctl("ready", port=n.port).returncode == 1
    assert ctl("alive", port=n.port).returncode == 0
    assert ctl("ready", port=n.port, env={"DISQUETTE_REQUIREPASS": "pw"}).returncode == 0
    assert ctl("ready", port=n.port, env={"DISQUETTE_REQUIREPASS": "bad"}).returncode == 1


def test_alive_fails_on_a_hung_node(node):
    # A frozen node (SIGSTOP: the kernel still accepts connections, nothing
    # answers) stays hung until continued, however slow the machine: the
    # probe gives up (after 5 s) and says so, instead of hanging until the
    # kubelet kills it.
    os.kill(node.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert ctl("alive", port=node.port).returncode == 1
        assert time.monotonic() - started < WAIT_TIMEOUT / 2
    finally:
        os.kill(node.pid, signal.SIGCONT)
    assert ctl("alive", port=node.port).returncode == 0


def test_drain_waits_until_consumers_elsewhere_took_the_jobs(node_factory, wait_until):
    a, b = node_factory.cluster(2)
    job = a.client().execute_command("ADDJOB", "q", "body", 0, "REPLICATE", 1, "RETRY", 30)
    assert registered_jobs(a) == 1 and registered_jobs(b) == 0
    drain = subprocess.Popen(["sh", str(CTL), "drain", "60"], env={
        "PATH": os.environ["PATH"], "DISQUETTE_PORT": str(a.port)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: leaving(a) == b"+yes\r\n")
        assert drain.poll() is None, "drain returned while the node still held a job"
        # A consumer on the other node gets the job (federation) and acks it:
        # the ack GC deletes every copy, the leaving node's too.
        # Under load (a loaded CI machine) federation may need a retry of its
        # NEEDJOBS broadcast (2 s, then 4 s...): give it time.
        got = b.client().execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "q")
        assert got[0][1] == job
        assert b.client().execute_command("ACKJOB", job) == 1
        out, err = drain.communicate(timeout=WAIT_TIMEOUT)
    finally:
        if drain.poll() is None:
            drain.kill()
    assert drain.returncode == 0, out + err
    assert "drained" in out
    assert registered_jobs(a) == 0
    # The others see it leaving (HELLO priority 100).
    hello = b.client().execute_command("HELLO")
    a_id = a.client().execute_command("CLUSTER", "MYID")
    assert [e[3] for e in hello[2:] if e[0] == a_id] == [b"100"]


def test_drain_gives_up_after_its_timeout_and_rejoin_clears_leaving(node, wait_until):
    node.client().execute_command("ADDJOB", "q", "body", 0)
    res = ctl("drain", "1", port=node.port)
    assert res.returncode == 1
    assert "still holds 1 jobs after 1s" in res.stderr
    assert leaving(node) == b"+yes\r\n"
    # LEAVING is kept in nodes.conf: a restarted node is still leaving until
    # the postStart hook (rejoin) clears it.
    node.restart()
    assert leaving(node) == b"+yes\r\n"
    res = ctl("rejoin", "10", port=node.port)
    assert res.returncode == 0, res.stdout + res.stderr
    assert leaving(node) == b"+no\r\n"


def test_rejoin_gives_up_when_the_node_never_answers():
    started = time.monotonic()
    res = ctl("rejoin", "2", port=free_port())
    assert res.returncode == 1 and "not ready after 2s" in res.stderr
    assert time.monotonic() - started < WAIT_TIMEOUT / 2      # gives up on its own


def test_usage_errors(node):
    for args in ([], ["drain", "soon"], ["ready", "now"], ["restart"]):
        res = ctl(*args, port=node.port)
        assert res.returncode == 2 and "usage: disquette-ctl" in res.stderr, args
    assert leaving(node) == b"+no\r\n"
