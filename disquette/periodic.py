"""Periodic jobs with no single scheduler: ``@app.periodic("*/5 * * * *")``.

Every worker of the app schedules every periodic job: at each tick it adds
the tick's job (``shared_adds.add_once``, the key naming the job and the
tick), and the cluster makes one job per tick whichever workers are alive.
So no tick is lost when workers die (any one left adds it) and none runs
twice (they all add the same job), where a single beat process is both a
single point of failure and, doubled by mistake, a double run.

Ticks are computed from the wall clock, the same on every machine: cron
expressions (cronsim) in UTC unless ``tz`` is given, or ``every`` seconds
counted from the Unix epoch.  A worker adds the ticks that fall while it
runs (a late one, after a pause, still adds each tick it missed, up to half
the tick's TTL late, while the key of another worker's add is surely
remembered; a worker that starts adds none from before its start).  The job's body carries the
tick (``disquette.current_tick()`` in the handler).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from cronsim import CronSim

from .errors import DisqueError
from .shared_adds import add_once

log = logging.getLogger("disquette.periodic")

ADD_RETRY_DELAY = 0.5   # seconds between tries of a tick's add that failed


class Schedule:
    """When a periodic job ticks: a cron expression or ``every`` seconds."""

    def __init__(self, cron: str | None = None, every: float | timedelta | None = None,
                 tz: tzinfo | None = None) -> None:
        if (cron is None) == (every is None):
            raise ValueError("a periodic job needs a cron expression or every=, not both")
        if isinstance(every, timedelta):
            every = every.total_seconds()
        if every is not None and every <= 0:
            raise ValueError("every= must be more than 0 seconds")
        self.cron, self.every, self.tz = cron, every, tz or timezone.utc
        if cron is not None:
            CronSim(cron, datetime.now(self.tz))  # a bad expression fails here, not later

    def next_after(self, t: float) -> float:
        """The first tick after ``t`` (Unix seconds)."""
        if self.every is not None:
            return (math.floor(t / self.every) + 1) * self.every
        start = datetime.fromtimestamp(t, self.tz)
        return next(CronSim(self.cron, start)).timestamp()  # type: ignore[arg-type]

    def period(self) -> float:
        """Seconds between two ticks (the first two from now, for cron)."""
        if self.every is not None:
            return self.every
        first = self.next_after(time.time())
        return self.next_after(first) - first

    def __repr__(self) -> str:
        return f"<Schedule {self.cron or f'every {self.every:g} s'}>"


def tick_key(name: str, tick: float) -> str:
    return f"tick:{name}:{round(tick * 1000)}"


async def schedule_loop(aclient: Any, name: str, queue: str, schedule: Schedule,
                        body_of: Any, ttl: int, retry: int) -> None:
    """Add each tick's job of one periodic job, for ever (a Task of the worker)."""
    tick = schedule.next_after(time.time())
    while True:
        wait = tick - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        elif -wait > ttl / 2:
            # Late by half the TTL (the process was stopped?): another
            # worker's add of this tick may be forgotten by now (its key
            # lives for the TTL), so adding it could run it twice.
            log.warning("periodic %s: tick %s skipped, %.0f s late", name, tick, -wait)
            tick = schedule.next_after(tick)
            continue
        while True:
            try:
                await add_once(aclient, queue, body_of(tick), tick_key(name, tick), ttl=ttl,
                               retry=retry)
                break
            except DisqueError as e:
                if time.time() - tick > ttl / 2:
                    log.error("periodic %s: tick %s not added (%s); giving up after its TTL",
                              name, tick, e)
                    break
                log.warning("periodic %s: adding tick %s failed (%s); trying again", name,
                            tick, e)
                await asyncio.sleep(ADD_RETRY_DELAY)
        tick = schedule.next_after(tick)
