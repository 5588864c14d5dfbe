"""Shutdown that loses nothing and counts nothing: SIGTERM to a worker
process holding jobs it has not started (``--prefetch``)."""

from __future__ import annotations

import signal

from disquette import Client
from tests.sdk.cli_worker import CliWorker, cli_workers  # noqa: F401 (a fixture)


def active(c: Client) -> set[str]:
    return set(c.jscan(queue="q", states=["active"], busyloop=True))


def test_sigterm_returns_unstarted_jobs_at_once_and_lets_running_ones_finish(
        dnode, tmp_path, cli_workers, wait_until):
    c = Client(dnode.addr)
    ids = c.add_jobs([("q", n) for n in range(20)])
    w = CliWorker(tmp_path, dnode.addr, "gated", "--concurrency", "2", "--prefetch", "6")
    cli_workers.append(w)
    wait_until(lambda: len(w.started()) == 2 and len(active(c)) == 8)  # 2 run, 6 wait
    running = set(w.started())
    w.signal(signal.SIGTERM)
    # At once, while the two handlers still run: the six back in the queue,
    # with no failure counted.
    wait_until(lambda: active(c) == running)
    assert w.done() == [] and c.qlen("q") == 18
    returned = set(ids) - running - set(c.jscan(queue="q", states=["queued"], busyloop=True))
    assert returned == set()
    w.release()
    assert w.wait() == 0
    assert set(w.done()) == running and sorted(w.started()) == sorted(w.done())
    out = w.stdout().splitlines()
    assert out[0] == "handed back 6 jobs not started (ENQUEUE), 0 unfinished (NACK)"
    not_started = {line.split(": ")[1] for line in out[1:]}
    assert len(not_started) == 6 and not not_started & running
    for jid in not_started:
        shown = c.show(jid)
        assert (shown["state"], shown["nacks"]) == ("queued", 0)
    wait_until(lambda: not active(c))  # the two finished were acked
    assert all(c.show(jid) is None for jid in running)


def test_sigterm_nacks_what_outlives_the_grace_period(dnode, tmp_path, cli_workers,
                                                      wait_until):
    c = Client(dnode.addr)
    jid = c.add_job("q", "slow")
    w = CliWorker(tmp_path, dnode.addr, "gated", "--grace-period", "0.5")
    cli_workers.append(w)
    wait_until(lambda: w.started() == [jid])
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert w.stdout().splitlines() == [
        "handed back 0 jobs not started (ENQUEUE), 1 unfinished (NACK)", f"unfinished: {jid}"]
    shown = c.show(jid)
    assert (shown["state"], shown["nacks"]) == ("queued", 1)
