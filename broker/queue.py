"""A queue: jobs ordered by ctime (best-effort FIFO, SPEC section 3).

New jobs almost always carry the largest ctime, so they go to the end; requeued
and imported jobs may land in the middle. A SortedKeyList handles both in
O(log n) without a home-made skiplist.
"""

from __future__ import annotations

from collections import deque
from operator import attrgetter

from sortedcontainers import SortedKeyList

# Pause flags (PAUSE command).
PAUSED_IN = 1
PAUSED_OUT = 2
PAUSE_NAMES = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_IN | PAUSED_OUT: b"all"}

_by_ctime = attrgetter("ctime")


class Queue:
    __slots__ = (
        "name", "jobs", "ctime", "atime", "flags", "blocked", "jobs_in", "jobs_out",
        "needjobs_bcast_time", "needjobs_adhoc_time", "needjobs_bcast_attempt",
        "needjobs_adhoc_attempt", "needjobs_responders", "current_import_jobs_time",
        "current_import_jobs_count", "prev_import_jobs_time", "prev_import_jobs_count",
    )

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.jobs = SortedKeyList(key=_by_ctime)
        self.ctime = now            # creation time, ms
        self.atime = now            # last time a job went in or out, ms
        self.flags = 0              # PAUSED_IN / PAUSED_OUT
        self.blocked = deque()      # clients blocked in GETJOB on this queue, FIFO
        self.jobs_in = 0
        self.jobs_out = 0
        # Federation state (cluster/federation.py), kept here so it goes with the queue.
        self.needjobs_bcast_time = 0
        self.needjobs_adhoc_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_attempt = 0
        self.needjobs_responders = None   # {node_id: last time it sent us jobs}
        self.current_import_jobs_time = 0
        self.current_import_jobs_count = 0
        self.prev_import_jobs_time = 0
        self.prev_import_jobs_count = 0

    def __len__(self) -> int:
        return len(self.jobs)

    def push(self, job) -> None:
        self.jobs.add(job)

    def pop(self):
        """The oldest job, or None."""
        jobs = self.jobs
        return jobs.pop(0) if jobs else None

    def remove(self, job) -> bool:
        try:
            self.jobs.remove(job)
            return True
        except ValueError:
            return False

    def peek(self, count: int) -> list:
        """Oldest first for count > 0, newest first for count < 0."""
        jobs = self.jobs
        if count >= 0:
            return list(jobs.islice(0, count))
        n = -count
        return list(jobs.islice(max(0, len(jobs) - n), len(jobs), reverse=True))

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & 3]

    def is_collectable(self) -> bool:
        """Empty, nobody waiting, not paused: may be garbage collected when idle."""
        return not self.jobs and not self.blocked and not self.flags
