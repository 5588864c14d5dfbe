"""The Worker against a real node: handlers (def and async def), acks,
failures, dead letters, WORKING keep-alive, slots, shutdown, hooks, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter

import pytest

from disquette import AsyncClient, Client, Worker
from tests.harness import WAIT_TIMEOUT


class Running:
    """A Worker serving in a background thread (``worker.run()`` off the main
    thread: no signal handlers), stopped at exit."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, daemon=True)
        self.thread.start()

    def stop(self, timeout: float = WAIT_TIMEOUT) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"

    def __enter__(self) -> "Running":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.stop()


def active_ids(client: Client, queue: str) -> list[str]:
    return list(client.jscan(queue=queue, states=["active"], busyloop=True))


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_handlers_ack_and_hooks(kind, dnode, wait_until):
    c = Client(dnode.addr)
    c.add_jobs([("q", {"n": i}) for i in range(300)])
    seen: list[int] = []
    events: Counter[str] = Counter()
    threads: set[str] = set()

    if kind == "def":
        def handler(job):
            threads.add(threading.current_thread().name)
            seen.append(job.body["n"])
    else:
        async def handler(job):
            await asyncio.sleep(0)
            seen.append(job.body["n"])

    async def after(job, error):
        events["after" if error is None else "after-error"] += 1

    w = Worker(c, ["q"], handler, concurrency=8, before_job=lambda j: events.update(["before"]),
               after_job=after)
    with Running(w) as r:
        wait_until(lambda: w.stats["ok"] == 300)
        r.stop()
    assert sorted(seen) == list(range(300))
    assert events == {"before": 300, "after": 300}
    if kind == "def":
        assert threads and all(t.startswith("disquette-worker") for t in threads)
    assert c.qlen("q") == 0 and list(c.jscan(queue="q", busyloop=True)) == []  # all acked


def test_failures_nack_then_dead_letter_then_requeue(dnode, wait_until):
    c = Client(dnode.addr)
    good = c.add_job("q", {"ok": True})
    bad = c.add_job("q", {"ok": False, "to": "x"})
    attempts: list[int] = []
    failures: list[str] = []

    def handler(job):
        if not job.body["ok"]:
            attempts.append(job.attempts)
            raise ValueError(f"cannot send to {job.body['to']}")

    w = Worker(c, "q", handler, max_attempts=3, on_failure=lambda j, e: failures.append(str(e)))
    with Running(w):
        wait_until(lambda: w.stats["dead_lettered"] == 1)
    assert attempts == [1, 2, 3]  # NACK: nacks counts the attempts
    assert failures == ["cannot send to x"] * 3
    assert w.stats == {"ok": 1, "failed": 3, "dead_lettered": 1}
    assert c.show(good) is None and c.show(bad) is None  # both acked
    (dead,) = c.dead_letters("q:dead")
    assert (dead.queue, dead.job_id, dead.attempts) == ("q", bad, 3)
    assert dead.error == "ValueError: cannot send to x" and "Traceback" in dead.traceback
    assert dead.body == {"ok": False, "to": "x"} and dead.raw == b'{"ok":false,"to":"x"}'
    envelope = json.loads(c.qpeek("q:dead", 1)[0].raw)  # plain JSON for any tool
    assert envelope["error"] == "ValueError: cannot send to x" and envelope["queue"] == "q"
    assert c.requeue_dead("q:dead") == 1
    assert c.qlen("q:dead") == 0
    (back,) = c.get_jobs("q", nohang=True)
    assert back.body == {"ok": False, "to": "x"} and back.attempts == 1


def test_custom_dead_letter_queue_and_poison_jobs(dnode, wait_until):
    """A job delivered more than max_attempts times without finishing (its
    workers died) is dead-lettered without running the handler again."""
    c = Client(dnode.addr)
    jid = c.add_job("q", b"\xff binary body")
    for _ in range(3):  # three deliveries that never finished
        c.get_jobs("q", nohang=True)
        c.enqueue(jid)
    ran: list[str] = []
    w = Worker(c, "q", lambda job: ran.append(job.id), max_attempts=3,
               dead_letter_queue=lambda q: f"dlq.{q}")
    with Running(w):
        wait_until(lambda: w.stats["dead_lettered"] == 1)
    assert ran == []
    (dead,) = c.dead_letters("dlq.q")
    assert dead.raw == b"\xff binary body" and dead.body == b"\xff binary body"
    assert "delivered 4 times without finishing" in dead.error
    assert c.requeue_dead("dlq.q", queue="elsewhere") == 1
    assert c.get_jobs("elsewhere", nohang=True)[0].raw == b"\xff binary body"


def test_retry_backoff_lets_retry_requeue(dnode, wait_until):
    c = Client(dnode.addr)
    jid = c.add_job("q", "flaky", retry=1)
    seen: list[tuple[int, int, float]] = []

    def handler(job):
        seen.append((job.nacks, job.additional_deliveries, time.monotonic()))
        if len(seen) == 1:
            raise RuntimeError("try later")

    w = Worker(c, "q", handler, retry_backoff=True, working_after=5)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 1)
    (n1, a1, t1), (n2, a2, t2) = seen
    assert (n1, a1, n2, a2) == (0, 0, 0, 1)  # no NACK: RETRY re-queued it
    assert t2 - t1 >= 0.6  # RETRY 1 s, minus the broker's jitter
    assert c.show(jid) is None


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_working_keeps_long_job(kind, dnode, wait_until):
    """A job running 1.4x its RETRY is not delivered again: the worker sends
    WORKING for it (and the handler may call job.working() itself)."""
    c = Client(dnode.addr)
    # WORKING goes out 0.3 s in, then every half RETRY: 2.5 s of margin a
    # loaded machine cannot eat up (RETRY 1 left half a second).
    jid = c.add_job("q", "long", retry=5)
    runs: list[int] = []
    own: list[int] = []

    if kind == "def":
        def handler(job):
            runs.append(job.attempts)
            time.sleep(1.2)
            own.append(job.working())
            time.sleep(5.8)
    else:
        async def handler(job):
            runs.append(job.attempts)
            await asyncio.sleep(1.2)
            own.append(await job.working())
            await asyncio.sleep(5.8)

    w = Worker(c, "q", handler, concurrency=2, working_after=0.3)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 1)
    assert runs == [1] and own == [5]
    assert c.show(jid) is None


@pytest.mark.parametrize("kind", ["def", "async def", "async def, plain"])
def test_a_job_delivered_again_while_it_runs_is_handled_twice(kind, dnode, wait_until):
    """At least once: a job whose RETRY passes before its handler sends
    WORKING comes back, here to the same worker while the first delivery
    still runs.  Both deliveries end, each counted, and the worker serves on.
    (``plain``: no metrics, so the async handler starts on the Worker's
    plain path, see test_worker_batches.)"""
    c = Client(dnode.addr)
    c.add_job("q", "slow", retry=1)
    starts: list[int] = []
    again = threading.Event()

    def first_delivery(job) -> bool:
        starts.append(job.additional_deliveries)
        if job.body == "slow" and len(starts) == 1:
            return True  # waits until the second delivery has started
        again.set()
        return False

    if kind == "def":
        def handler(job):
            if first_delivery(job):
                again.wait(WAIT_TIMEOUT)
    else:
        async def handler(job):
            if first_delivery(job):
                while not again.is_set():
                    await asyncio.sleep(0.01)

    w = Worker(c, "q", handler, concurrency=2, working_after=WAIT_TIMEOUT,
               metrics=False if kind.endswith("plain") else None)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 2)
        assert w.in_flight == 0
        c.add_job("q", "after")
        wait_until(lambda: w.stats["ok"] == 3)
    assert starts == [0, 1, 0]


def test_never_more_jobs_than_free_slots(dnode, wait_until):
    c = Client(dnode.addr)
    c.add_jobs([("q", i) for i in range(20)])
    release = threading.Event()
    w = Worker(c, "q", lambda job: release.wait(WAIT_TIMEOUT), concurrency=3, poll_ms=100)
    with Running(w) as r:
        wait_until(lambda: w.in_flight == 3)
        for _ in range(5):  # several fetch rounds later: still 3 taken, 17 queued
            assert c.qlen("q") == 17 and len(active_ids(c, "q")) == 3
            time.sleep(0.1)     # a window: holds however slow the machine
        release.set()
        wait_until(lambda: w.stats["ok"] == 20)
        r.stop()
    assert c.qlen("q") == 0


def test_graceful_stop_under_load_loses_nothing(dnode, wait_until):
    c = Client(dnode.addr)
    ids = set(c.add_jobs([("q", i) for i in range(400)]))
    done: set[str] = set()

    async def handler(job):
        await asyncio.sleep(0.02)
        done.add(job.id)

    w = Worker(c, "q", handler, concurrency=16)
    with Running(w) as r:
        wait_until(lambda: w.stats["ok"] >= 100)
        r.stop()
    # Everything is either finished and acked, or queued again: nothing is
    # left active (taken by the worker and not given back).
    assert active_ids(c, "q") == []
    queued = set(c.jscan(queue="q", states=["queued"], busyloop=True))
    assert done | queued == ids and not (done & queued)
    assert w.stats["ok"] == len(done)


def test_grace_period_hands_back_unfinished_jobs(dnode, wait_until):
    c = Client(dnode.addr)
    jid = c.add_job("q", "slow")
    release = threading.Event()
    w = Worker(c, "q", lambda job: release.wait(WAIT_TIMEOUT), grace_period=0.3)
    with Running(w) as r:
        wait_until(lambda: w.in_flight == 1)
        t0 = time.monotonic()
        r.stop()
        # Not waiting for the handler (blocked for WAIT_TIMEOUT): a bound far
        # from both, which a loaded machine keeps.
        assert time.monotonic() - t0 < WAIT_TIMEOUT / 2
    release.set()
    assert w.stats["handed_back"] == 1
    shown = c.show(jid)
    assert shown["state"] == "queued" and shown["nacks"] == 1


def test_forced_stop_exits_at_once(dnode, wait_until):
    c = Client(dnode.addr)
    c.add_job("q", "stuck")
    release = threading.Event()
    w = Worker(c, "q", lambda job: release.wait(WAIT_TIMEOUT), grace_period=2 * WAIT_TIMEOUT)
    r = Running(w)
    wait_until(lambda: w.in_flight == 1)
    w.stop()
    w.stop(force=True)
    # At once: not after the handler (blocked for WAIT_TIMEOUT) nor the grace
    # period (twice that); a bound far from both, which a loaded machine keeps.
    r.thread.join(WAIT_TIMEOUT / 2)
    assert not r.thread.is_alive() and w.forced
    release.set()


async def test_serve_with_async_client_and_metrics(dnode, wait_until):
    from prometheus_client import REGISTRY

    def sample(outcome):
        return REGISTRY.get_sample_value("disquette_worker_jobs_total",
                                         {"queue": "mq", "outcome": outcome}) or 0

    before_ok, before_failed = sample("ok"), sample("failed")
    async with AsyncClient([dnode.addr]) as c:
        await c.add_jobs([("mq", i) for i in range(10)])

        async def handler(job):
            if job.body == 3 and job.attempts == 1:
                raise KeyError("once")

        w = Worker(c, "mq", handler)
        task = asyncio.create_task(w.serve())
        async with asyncio.timeout(WAIT_TIMEOUT):
            while w.stats["ok"] < 10:
                await asyncio.sleep(0.01)
        w.stop()
        await asyncio.wait_for(task, WAIT_TIMEOUT)
        assert await c.qlen("mq") == 0
    assert sample("ok") - before_ok == 10 and sample("failed") - before_failed == 1
