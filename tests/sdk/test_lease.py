"""LeaseLost: when WORKING is refused for a running job (TOOLATE, NOJOB),
someone else may have it; the handler learns it and the worker neither acks
nor NACKs the job."""

from __future__ import annotations

import asyncio
import threading
import time

from disquette import Client, LeaseLost, Worker
from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT
from tests.sdk.test_worker import Running


def test_async_handler_is_cancelled_with_lease_lost_when_its_job_is_taken_over(
        dnode, wait_until):
    """Half the TTL gone: WORKING answers TOOLATE, RETRY requeues the job and
    another consumer takes it; the first handler gets LeaseLost at its await."""
    c = Client(dnode.addr)
    jid = c.add_job("q", "long", ttl=6, retry=1)
    seen: list[str] = []
    taken_over = threading.Event()

    async def handler(job):
        try:
            await asyncio.sleep(WAIT_TIMEOUT)
        except LeaseLost as e:
            seen.append(f"{e.job_id} lease_lost={job.lease_lost}")
            # Hold the worker's only slot until the other consumer has the job.
            while not taken_over.is_set():
                await asyncio.sleep(0.01)
            raise

    w = Worker(c, "q", handler, concurrency=1, working_after=0.2)
    with Running(w) as r:
        wait_until(lambda: seen)
        # The other consumer: the job came back by RETRY, not by a NACK.
        (job,) = c.get_jobs("q", timeout_ms=NODE_WAIT_MS)
        assert (job.id, job.nacks, job.additional_deliveries) == (jid, 0, 1)
        taken_over.set()
        wait_until(lambda: w.stats["lease_lost"] == 1)
        r.stop()
    assert seen == [f"{jid} lease_lost=True"]
    # Neither ok nor failed (RETRY may have brought the job back to the
    # worker as it stopped: it went back unstarted, by ENQUEUE).
    assert w.stats["lease_lost"] == 1 and not {"ok", "failed", "handed_back"} & set(w.stats)
    shown = c.show(jid)  # never acked nor NACKed by the first worker
    assert shown["state"] != "acked" and shown["nacks"] == 0


def test_sync_handler_sees_lease_lost_when_another_client_deletes_its_job(
        dnode, wait_until):
    """DELJOB by another client: WORKING answers NOJOB; a def handler sees
    job.lease_lost, and job.working() raises LeaseLost."""
    c = Client(dnode.addr)
    jid = c.add_job("q", "long", retry=1)
    started = threading.Event()
    seen: list[str] = []

    def handler(job):
        started.set()
        deadline = time.monotonic() + WAIT_TIMEOUT
        while not job.lease_lost and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            job.working()
        except LeaseLost:
            seen.append("LeaseLost")
        return "finished anyway"

    after: list[object] = []
    w = Worker(c, "q", handler, working_after=0.2,
               after_job=lambda job, error: after.append(error))
    with Running(w):
        assert started.wait(WAIT_TIMEOUT)
        assert c.del_job(jid) == 1
        wait_until(lambda: w.stats["lease_lost"] == 1)
    assert seen == ["LeaseLost"] and after == [None]
    assert w.stats == {"lease_lost": 1}  # not acked, not NACKed


def test_handler_working_refused_loses_the_lease(dnode, wait_until):
    """The handler's own job.working() getting NOJOB: LeaseLost, and the
    worker does not ack or NACK (the ACK by another client stands)."""
    c = Client(dnode.addr)
    jid = c.add_job("q", "long", retry=30)
    taken = threading.Event()
    release = threading.Event()

    def handler(job):
        taken.set()
        release.wait(WAIT_TIMEOUT)
        job.working()  # raises LeaseLost: the job was acked elsewhere

    w = Worker(c, "q", handler, working_after=WAIT_TIMEOUT)
    with Running(w):
        assert taken.wait(WAIT_TIMEOUT)
        assert c.ack_job(jid) == 1
        release.set()
        wait_until(lambda: w.stats["lease_lost"] == 1)
    assert w.stats == {"lease_lost": 1}
