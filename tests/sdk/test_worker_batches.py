"""What an ``async def`` handler sees of the Task it runs in: the jobs of one
GETJOB batch start one after the other in one Task (the Worker's hot path),
yet a handler that waits has a Task of its own, its own context, and its
neighbours in the batch keep running."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from disquette import Client, Worker
from tests.sdk.test_worker import Running

# Set by handlers; each job must start with it unset, as in a Task of its own.
current_job: contextvars.ContextVar[str] = contextvars.ContextVar("current_job")

# Without metrics (and spans and hooks) a fresh job's handler starts in the
# batch's loop itself (the plain path); with them, through the full one.
BOTH_PATHS = pytest.mark.parametrize("metrics", [False, None], ids=["plain", "metrics"])


@BOTH_PATHS
def test_handlers_that_wait_run_together_each_in_its_own_task(metrics, dnode, wait_until):
    """Twenty jobs in one batch, each waiting for all the others to start:
    none waits behind another's wait, and no two share a Task or a context."""
    c = Client(dnode.addr)
    ids = c.add_jobs([("q", i) for i in range(20)])
    tasks: dict[str, asyncio.Task] = {}
    seen: dict[str, str | None] = {}
    all_started = asyncio.Event()

    async def handler(job):
        seen[job.id] = current_job.get(None)
        current_job.set(job.id)
        tasks[job.id] = asyncio.current_task()
        if len(tasks) == 20:
            all_started.set()
        await all_started.wait()
        assert current_job.get() == job.id and asyncio.current_task() is tasks[job.id]

    w = Worker(c, "q", handler, concurrency=32, metrics=metrics)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 20)
    assert sorted(tasks) == sorted(ids) and seen == dict.fromkeys(ids)
    assert len(set(map(id, tasks.values()))) == 20


@BOTH_PATHS
def test_a_timeout_entered_before_the_first_wait_cancels_its_own_handler(metrics, dnode, wait_until):
    """``asyncio.timeout`` takes the current Task when entered, before the
    handler first waits: it must be the handler's, so that the timeout ends
    that handler only (the others of its batch finish, the worker serves on)."""
    c = Client(dnode.addr)
    c.add_jobs([("q", i) for i in range(10)])
    timed_out: list[int] = []

    async def handler(job):
        try:
            async with asyncio.timeout(0.2 if job.body == 4 else 30):
                await asyncio.sleep(30 if job.body == 4 else 0)
        except TimeoutError:
            timed_out.append(job.body)
            raise

    w = Worker(c, "q", handler, max_attempts=1, metrics=metrics)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 9 and w.stats["dead_lettered"] == 1)
    assert timed_out == [4]
    (dead,) = c.get_jobs("q:dead", timeout_ms=1000)
    assert dead.body["error"].startswith("TimeoutError")


@BOTH_PATHS
def test_handlers_that_never_wait_do_not_see_each_others_context(metrics, dnode, wait_until):
    c = Client(dnode.addr)
    c.add_jobs([("q", i) for i in range(200)])
    leaked: list[str] = []

    async def handler(job):
        if current_job.get(None) is not None:
            leaked.append(current_job.get())
        current_job.set(job.id)

    w = Worker(c, "q", handler, concurrency=64, prefetch=16, metrics=metrics)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 200)
    assert leaked == []


@BOTH_PATHS
def test_handlers_that_raise_at_once_or_after_a_wait_fail_alike(metrics, dnode, wait_until):
    """NACKed, then dead-lettered with the handler's own line in the
    traceback, whether it raised before its first wait or after."""
    c = Client(dnode.addr)
    c.add_jobs([("q", {"wait": False}), ("q", {"wait": True})])

    async def handler(job):
        if job.body["wait"]:
            await asyncio.sleep(0.01)
        raise ValueError("no")

    w = Worker(c, "q", handler, max_attempts=2, metrics=metrics)
    with Running(w):
        wait_until(lambda: w.stats["dead_lettered"] == 2)
    assert w.stats == {"failed": 4, "dead_lettered": 2}
    dead = c.dead_letters("q:dead")
    assert sorted(d.body["wait"] for d in dead) == [False, True]
    for d in dead:
        assert d.error == "ValueError: no" and 'raise ValueError("no")' in d.traceback
        assert "_run_batch" not in d.traceback
