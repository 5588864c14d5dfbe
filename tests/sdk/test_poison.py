"""Why a job came back: handler failures (its nacks) and lost deliveries (its
additional deliveries: a worker crashed on it) have separate limits and
separate reasons in the dead letter."""

from __future__ import annotations

import signal

import pytest

from disquette import Client, Worker
from tests.sdk.cli_worker import CliWorker, cli_workers  # noqa: F401 (a fixture)
from tests.sdk.test_worker import Running


def test_worker_killed_mid_job_is_dead_lettered_for_lost_deliveries(
        dnode, tmp_path, cli_workers, wait_until):
    """A job that kills its worker (SIGKILL mid-job, three times) is not run
    a fourth time: it goes to the dead-letter queue, reason lost-deliveries."""
    c = Client(dnode.addr)

    def standby() -> CliWorker:
        """A worker blocked in GETJOB: it takes the job as soon as RETRY
        brings it back (a job left queued past its RETRY is requeued again
        at once when delivered, as in Disque, and that would count twice)."""
        w = CliWorker(tmp_path / str(len(cli_workers)), dnode.addr, "hang",
                      "--max-lost-deliveries", "3", "--max-attempts", "0")
        cli_workers.append(w)
        wait_until(lambda: "worker started" in w.log_path.read_text())
        return w

    current = standby()
    jid = c.add_job("q", {"to": "the crasher"}, retry=2)
    for crash in range(3):
        wait_until(lambda: current.started() == [jid])
        following = standby()
        current.proc.send_signal(signal.SIGKILL)
        current.wait()
        current = following
    wait_until(lambda: c.qlen("q:dead") == 1)
    current.signal(signal.SIGTERM)
    assert current.wait() == 0
    assert current.started() == []  # the fourth delivery did not run it
    (dead,) = c.dead_letters("q:dead")
    assert (dead.job_id, dead.reason, dead.limit) == (jid, "lost-deliveries",
                                                      "max_lost_deliveries")
    assert dead.body == {"to": "the crasher"} and "delivered 3 more times" in dead.error
    assert c.show(jid) is None  # acked once dead-lettered


def test_handler_failures_are_dead_lettered_for_failures(dnode, wait_until):
    """max_failures counts the handler's failures only: deliveries lost
    before (here two) do not use it up."""
    c = Client(dnode.addr)
    jid = c.add_job("q", {"to": "nobody"})
    for _ in range(2):  # two deliveries that never answered
        c.get_jobs("q", nohang=True)
        c.enqueue(jid)
    seen: list[tuple[int, int]] = []

    def handler(job):
        seen.append((job.nacks, job.additional_deliveries))
        raise ValueError("the mail server said no")

    w = Worker(c, "q", handler, max_attempts=None, max_failures=2, max_lost_deliveries=5)
    with Running(w):
        wait_until(lambda: w.stats["dead_lettered"] == 1)
    assert seen == [(0, 2), (1, 2)]
    (dead,) = c.dead_letters("q:dead")
    assert (dead.job_id, dead.reason, dead.limit) == (jid, "failures", "max_failures")
    assert dead.error == "ValueError: the mail server said no" and dead.attempts == 4
    assert w.stats == {"failed": 2, "dead_lettered": 1}


def test_max_attempts_is_the_combined_limit(dnode, wait_until):
    """As before the two limits existed: nacks + lost deliveries + 1."""
    c = Client(dnode.addr)
    jid = c.add_job("q", "flaky")
    c.get_jobs("q", nohang=True)
    c.enqueue(jid)  # one lost delivery

    def handler(job):
        raise RuntimeError("no")

    w = Worker(c, "q", handler, max_attempts=3)
    with Running(w):
        wait_until(lambda: w.stats["dead_lettered"] == 1)
    (dead,) = c.dead_letters("q:dead")
    assert (dead.attempts, dead.reason, dead.limit) == (3, "failures", "max_attempts")


def test_limits_must_be_positive(dnode):
    with pytest.raises(ValueError, match="max_failures"):
        Worker(Client(dnode.addr), "q", print, max_failures=0)
