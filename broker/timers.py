"""Per-job timers: a wheel of 10 ms buckets (SPEC section 5).

A job's next wake-up time is derived from its state (see Node.wake_time), so the
wheel stores no time per job: a bucket is a plain list of jobs (8 bytes an entry,
which matters with millions of queued jobs). Rescheduling just appends to the new
bucket; the stale entry is recognised when it fires (the job is not due yet, or
is gone) and skipped. When stale entries outnumber live jobs the wheel is rebuilt,
so dropped jobs are never kept alive for long.
"""

from __future__ import annotations

from heapq import heappop, heappush

RESOLUTION_MS = 10


class TimerWheel:
    __slots__ = ("buckets", "heap", "entries")

    def __init__(self) -> None:
        self.buckets: dict[int, list] = {}
        self.heap: list[int] = []
        self.entries = 0

    def add(self, job, when: int) -> None:
        # Round up so a bucket never fires before the times it holds.
        b = -(-when // RESOLUTION_MS)
        lst = self.buckets.get(b)
        if lst is None:
            self.buckets[b] = [job]
            heappush(self.heap, b)
        else:
            lst.append(job)
        self.entries += 1

    def add_many(self, jobs: list, when: int) -> None:
        """add() for many jobs due at the same time (the AOF loader's bulk path)."""
        b = -(-when // RESOLUTION_MS)
        lst = self.buckets.get(b)
        if lst is None:
            self.buckets[b] = list(jobs)
            heappush(self.heap, b)
        else:
            lst.extend(jobs)
        self.entries += len(jobs)

    def pop_due(self, now: int) -> list:
        """Every entry whose bucket time has come (possibly stale ones)."""
        heap = self.heap
        limit = now // RESOLUTION_MS
        if not heap or heap[0] > limit:
            return []
        due = []
        while heap and heap[0] <= limit:
            lst = self.buckets.pop(heappop(heap))
            self.entries -= len(lst)
            due.extend(lst)
        return due

    def next_time(self):
        return self.heap[0] * RESOLUTION_MS if self.heap else None

    def clear(self) -> None:
        self.buckets.clear()
        self.heap.clear()
        self.entries = 0
