"""Concurrency limits across the cluster: ``@app.job(..., max_running=N)``.

A limit of N is N *slot* jobs in a system queue (``disquette:slots:<queue>``):
a worker takes a slot (GETJOB) before it runs a job of that queue, keeps it
with WORKING while the handler runs, and gives it back (NACK) after.  N
slots, so at most N handlers run at once, on every worker of every node.  A
worker that dies with a slot never gives it back: the nodes queue the slot
again when its RETRY (the task's ``retry``, else 30 s) elapses, the broker's
own at-least-once.

The slots are made by every worker that starts (``shared_adds.add_once``,
one key per queue, limit and slot), so the cluster holds N whatever the
number of workers.  A slot made for another limit (the app was deployed with
a new ``max_running``) is deleted by the first worker of the new limit that
takes it.  Slots live a year (their TTL); WORKING keeps them for half of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .commands import _parse_jobs, getjob_request
from .errors import DisqueError, NoJobError, TooLateError
from .job import Job
from .shared_adds import add_once

log = logging.getLogger("disquette.limits")

SLOT_TTL = 365 * 86400
SLOT_RETRY = 30
TAKE_POLL_MS = 1000
KEEP_TICK = 0.1


def slots_queue(queue: str) -> str:
    return f"disquette:slots:{queue}"


class Limiter:
    """The slots of one queue's limit, in one worker (see the module doc)."""

    def __init__(self, queue: str, limit: int, retry: int | None) -> None:
        if limit < 1:
            raise ValueError("max_running must be at least 1")
        self.queue, self.limit = queue, limit
        self.retry = retry or SLOT_RETRY
        self.slots = slots_queue(queue)
        self.held: dict[str, list[Any]] = {}   # slot id -> [job, next WORKING]
        self._aclient: Any = None
        self._made = False
        self._lock: asyncio.Lock | None = None

    async def _make_slots(self) -> None:
        for i in range(self.limit):
            await add_once(self._aclient, self.slots, {"slot": i, "limit": self.limit},
                           f"slot:{self.queue}:{self.limit}:{i}", ttl=SLOT_TTL,
                           retry=self.retry)
        self._made = True

    async def acquire(self, aclient: Any) -> Job:
        """Wait for a slot (one taker at a time in this worker), through
        ``aclient`` (the worker's, in its event loop)."""
        self._aclient = aclient
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self._made:
                await self._make_slots()
            req = getjob_request((self.slots,), 1, TAKE_POLL_MS, False, False)
            # Parsed without the consumer rule: slot ids must not move the client.
            req = req._replace(parse=_parse_jobs)
            while True:
                jobs = await self._aclient._run(req)
                if not jobs:
                    continue
                slot = jobs[0]
                body = slot.body
                if isinstance(body, dict) and body.get("limit") != self.limit:
                    log.info("slot %s of %s was made for a limit of %s: deleting it", slot.id,
                             self.queue, body.get("limit"))
                    await self._aclient.ack_job(slot.id, node=slot.node)
                    continue
                self.held[slot.id] = [slot, time.monotonic() + self.retry / 2]
                return slot

    async def release(self, slot: Job) -> None:
        self.held.pop(slot.id, None)
        try:
            await self._aclient.nack_job(slot.id, node=slot.node)
        except DisqueError as e:
            log.warning("slot %s of %s not given back (%s): it comes back after RETRY",
                        slot.id, self.queue, e)

    async def keep(self) -> None:
        """WORKING for the slots held, every half RETRY (a Task of the worker:
        the slots are taken through its client)."""
        while True:
            await asyncio.sleep(KEEP_TICK)
            now = time.monotonic()
            for slot_id, entry in list(self.held.items()):
                slot, due = entry
                if due > now:
                    continue
                entry[1] = now + self.retry / 2
                try:
                    await self._aclient.working(slot_id, node=slot.node)
                except (NoJobError, TooLateError) as e:
                    log.warning("slot %s of %s lost (%s)", slot_id, self.queue, e)
                    self.held.pop(slot_id, None)
                except DisqueError as e:
                    log.warning("WORKING for slot %s failed (%s)", slot_id, e)
                    entry[1] = now + 0.2

    async def close(self) -> None:
        """At the worker's stop: give back what is held."""
        for slot, _ in list(self.held.values()):
            await self.release(slot)
