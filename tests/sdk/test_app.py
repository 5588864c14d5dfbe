"""disquette.App against a real node: tasks and their calls, with_options,
backoff, time limits, results (sync and AsyncClient)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from disquette import (
    App, AsyncClient, Backoff, Client, JobError, Worker, current_job,
)
from tests.sdk.test_worker import Running


def serving(app: App, **options) -> Running:
    options.setdefault("poll_ms", 200)
    return Running(app.worker(**options))


def test_tasks_get_their_calls_and_stay_callable(dnode, wait_until):
    app = App(Client(dnode.addr))
    calls: list[tuple] = []

    @app.job("emails", retry=60)
    def send_email(to, subject="", **extra):
        job = current_job()
        calls.append(("send_email", to, subject, extra, job and job.queue))

    @app.job("sms")
    async def send_sms(*numbers):
        job = current_job()
        await asyncio.sleep(0.01)  # others run meanwhile: each keeps its own job
        assert current_job() is job and job.queue == "sms"
        calls.append(("send_sms", numbers))

    assert send_email(1, subject="direct") is None  # still a function
    assert calls.pop() == ("send_email", 1, "direct", {}, None)
    job = send_email.enqueue(42, subject="hi", lang="fr")
    assert Client(dnode.addr).show(job.id)["retry"] == 60
    send_sms.enqueue()
    send_sms.enqueue_many([(1, 2), (3,), 4])
    send_email.enqueue_many([{"to": 5}, (6, "six")])
    Client(dnode.addr).add_job("sms", {"raw": "from another producer"})
    with serving(app, concurrency=4) as r:
        wait_until(lambda: r.worker.stats["ok"] == 8)
    assert sorted(map(repr, calls)) == sorted(map(repr, [
        ("send_email", 42, "hi", {"lang": "fr"}, "emails"),
        ("send_sms", ()), ("send_sms", (1, 2)), ("send_sms", (3,)), ("send_sms", (4,)),
        ("send_email", 5, "", {}, "emails"), ("send_email", 6, "six", {}, "emails"),
        ("send_sms", ({"raw": "from another producer"},))]))


def test_with_options_sets_one_calls_add_options(dnode):
    c = Client(dnode.addr)
    app = App(c, ttl=600)

    @app.job("reports", retry=30)
    def report(n):
        pass

    plain = c.show(report.enqueue(1).id)
    assert (plain["retry"], plain["ttl"] <= 600, plain["state"]) == (30, True, "queued")
    later = c.show(report.with_options(delay=50, retry=5, ttl=100, replicate=1).enqueue(2).id)
    assert (later["retry"], later["ttl"] <= 100, later["state"]) == (5, True, "active")
    assert report.with_options(retry=5).options["retry"] == 5 and report.options["retry"] == 30
    with pytest.raises(TypeError):
        report.with_options(max_running=3)


def test_backoff_nearest_wins_and_attempts_count(dnode, wait_until):
    """Failures come back after min(cap, base * 2**(n-1)) s: the App's backoff,
    then @app.job's, then with_options's, the nearest winning; nacks count
    each failure (attempts 1, 2, 3) and the job stays one job."""
    c = Client(dnode.addr)
    app = App(c, backoff=Backoff(base=5, cap=5, jitter=0))
    seen: dict[str, list[tuple[float, int, int]]] = {}

    @app.job("flaky", backoff=Backoff(base=0.3, cap=0.6, jitter=0))
    def flaky(name):
        job = current_job()
        seen.setdefault(name, []).append((time.monotonic(), job.attempts, job.nacks))
        if job.attempts < 4:
            raise ValueError("not yet")

    flaky.enqueue("task's")
    flaky.with_options(backoff=Backoff(base=0.1, cap=0.1, jitter=0)).enqueue("call's")
    with serving(app, max_attempts=10) as r:
        wait_until(lambda: r.worker.stats["ok"] == 2)
        assert list(c.jscan(queue="flaky", busyloop=True)) == []
    for name, delays in (("task's", [0.3, 0.6, 0.6]), ("call's", [0.1, 0.1, 0.1])):
        times, attempts, nacks = zip(*seen[name])
        assert attempts == (1, 2, 3, 4) and nacks == (0, 1, 2, 3)
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(d <= g < d + 1.0 for d, g in zip(delays, gaps)), gaps


def test_a_backoff_is_cut_short_by_a_stop(dnode, wait_until):
    c = Client(dnode.addr)
    app = App(c)

    @app.job("slow-retry", backoff=Backoff(base=60, cap=60, jitter=0))
    async def fails():
        raise ValueError("no")

    jid = fails.enqueue().id
    with serving(app) as r:
        wait_until(lambda: r.worker.stats["failed"] == 1)
        assert c.show(jid)["state"] == "active"  # held, with WORKING
        r.stop()
    shown = c.show(jid)
    assert (shown["state"], shown["nacks"]) == ("queued", 1)


@pytest.mark.parametrize("kind", ["async def", "def"])
def test_time_limit_fails_the_job_with_reason_timeout(kind, dnode, wait_until):
    """An async handler is cancelled at its limit, a def one's thread runs on
    (its end ignored); either way the job fails, reason "timeout"."""
    c = Client(dnode.addr)
    app = App(c)
    ends: list[str] = []

    if kind == "def":
        @app.job("hangs", timeout=0.2)
        def hangs(seconds):
            time.sleep(seconds)
            ends.append(f"slept {seconds}")
    else:
        @app.job("hangs", timeout=0.2)
        async def hangs(seconds):
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                ends.append("cancelled")
                raise
            ends.append(f"slept {seconds}")

    jid = hangs.enqueue(1.0).id
    longer = hangs.with_options(timeout=5).enqueue(0.3).id  # the call's own limit
    with serving(app, max_attempts=2, concurrency=4) as r:
        wait_until(lambda: r.worker.stats["dead_lettered"] == 1 and r.worker.stats["ok"] == 1)
        if kind == "def":  # both failed runs' threads end, later, for nothing
            wait_until(lambda: ends.count("slept 1.0") == 2)
    assert ends.count("slept 0.3") == 1
    assert ends.count("cancelled") == (2 if kind == "async def" else 0)
    (dead,) = c.dead_letters("hangs:dead")
    assert (dead.job_id, dead.reason, dead.limit, dead.attempts) == (jid, "timeout",
                                                                      "max_attempts", 2)
    assert dead.error == "JobTimeout: ran past its time limit of 0.2 s"
    assert c.show(longer) is None  # acked


def test_results_value_error_and_timeout(dnode, wait_until):
    c = Client(dnode.addr)
    app = App(c)

    @app.job("math", results=True)
    async def divide(a, b):
        return {"q": a / b}

    @app.job("quiet")
    def quiet():
        return 1

    ok = divide.enqueue(1, 4)
    bad = divide.enqueue(1, 0)
    never = quiet.enqueue()
    with pytest.raises(RuntimeError, match="results=True"):
        never.result()
    with_result = quiet.with_options(results=True).enqueue()
    with pytest.raises(TimeoutError):
        ok.result(timeout=0.2)  # no worker yet
    with serving(app, max_attempts=1):
        with pytest.raises(JobError) as e:
            bad.result(timeout=30)
        assert (e.value.type, e.value.message) == ("ZeroDivisionError", "division by zero")
        assert ok.result(timeout=30) == {"q": 0.25}
        assert with_result.result(timeout=30) == 1
    assert c.qlen(app.replies.queue) == 0


async def test_results_on_an_async_client(dnode):
    async with AsyncClient(dnode.addr) as c:
        app = App(c)

        @app.job("add", results=True)
        async def add(a, b):
            return a + b

        jobs = [await add.enqueue(1, 2)] + await add.enqueue_many([(3, 4), (5, 6)])
        worker = app.worker(poll_ms=200)
        serving_task = asyncio.create_task(worker.serve())
        try:
            assert [await j.result(timeout=30) for j in jobs] == [3, 7, 11]
        finally:
            worker.stop()
            await asyncio.wait_for(serving_task, 30)


def test_a_plain_worker_keeps_its_handler(dnode, wait_until):
    c = Client(dnode.addr)
    c.add_job("q", {"n": 1})
    got = []
    w = Worker(c, "q", lambda job: got.append(job.body), backoff=Backoff(0.1, 0.1, 0))
    with Running(w):
        wait_until(lambda: got == [{"n": 1}])
