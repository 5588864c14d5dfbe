"""Worker.run_until_empty(): a test of the user's own handlers processes
what it queued, then goes on with its assertions."""

from __future__ import annotations

import asyncio
import time

import pytest

from disquette import AsyncClient, Client, Worker


def test_run_until_empty_processes_everything_then_returns(dnode):
    c = Client(dnode.addr)
    c.add_jobs([("emails", {"to": n}) for n in range(50)] + [("sms", "hi")])
    sent: list[object] = []

    def send(job):
        if job.body == {"to": 7} and job.attempts == 1:
            raise ConnectionError("flaky")  # NACKed, then done on its second try
        sent.append(job.body)

    w = Worker(c, ["emails", "sms"], send, concurrency=4)
    w.run_until_empty(timeout=60)
    assert len(sent) == 51 and sent.count({"to": 7}) == 1
    assert w.stats == {"ok": 51, "failed": 1} and w.in_flight == 0
    assert c.qlen("emails") == c.qlen("sms") == 0
    assert list(c.jscan(busyloop=True)) == []  # every job acked


async def test_serve_until_empty_inside_an_event_loop(dnode):
    async with AsyncClient(dnode.addr) as c:
        await c.add_jobs([("q", n) for n in range(20)])
        seen: list[int] = []

        async def handler(job):
            await asyncio.sleep(0.001)
            seen.append(job.body)

        await Worker(c, "q", handler, concurrency=8).serve_until_empty(timeout=60)
        assert sorted(seen) == list(range(20))
        assert await c.qlen("q") == 0


def test_run_until_empty_times_out(dnode):
    c = Client(dnode.addr)
    c.add_job("q", "slow")

    def handler(job):
        time.sleep(0.5)

    w = Worker(c, "q", handler, grace_period=5)
    with pytest.raises(TimeoutError, match="not empty"):
        w.run_until_empty(timeout=0.1)
    assert w.stats == {"ok": 1}  # stopped as stop() does: the job in flight finished
