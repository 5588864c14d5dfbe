"""Per-job timers: a wheel of 10 ms buckets (SPEC section 5).

A job's next wake-up time is derived from its state (broker/lifecycle.py's
wake_time), so the wheel stores no time per job: a bucket is a plain list of jobs
(8 bytes an entry, which matters with millions of jobs), and ``job.timer`` is the
bucket the job is due in. Every operation is O(1) plus a heap push for a new
bucket (O(log buckets)):

- ``add`` appends the job to its bucket and points ``job.timer`` at it; the entry
  it had elsewhere becomes stale (``job.timer`` no longer names that bucket);
- ``cancel`` (the job is deleted) makes its entry stale;
- ``pop_due`` returns the live entries of the buckets whose time has come.

Stale entries are skipped when their bucket fires. So that deleted jobs are not
kept alive for long, ``compact`` (called from the node's tick, never from a
command) filters them out of a bounded number of entries per call once they
outnumber the live ones: no command ever pays for a whole-wheel rebuild.
"""

from __future__ import annotations

from heapq import heappop, heappush

RESOLUTION_MS = 10
COMPACT_SLACK = 1024        # stale entries tolerated beyond the live ones
COMPACT_BUDGET = 5_000      # entries looked at per compact() call (well under 1 ms)


class TimerWheel:
    __slots__ = ("buckets", "heap", "entries", "stale", "_sweep", "_cur")

    def __init__(self) -> None:
        self.buckets: dict[int, list] = {}
        self.heap: list[int] = []
        self.entries = 0            # entries in the buckets, stale ones included
        self.stale = 0              # entries whose job is due elsewhere or deleted
        self._sweep: list | None = None     # bucket keys compact() has yet to visit
        self._cur: list | None = None       # [key, bucket, read, write] being compacted

    def add(self, job, when: int) -> None:
        """Make job due at `when` (rounded up to the bucket: never early)."""
        b = -(-when // RESOLUTION_MS)
        lst = self.buckets.get(b)
        old = job.timer
        if old is not None:
            if old is lst:
                return
            self.stale += 1
        if lst is None:
            lst = self.buckets[b] = [job]
            heappush(self.heap, b)
        else:
            lst.append(job)
        job.timer = lst
        self.entries += 1

    def add_many(self, jobs: list, when: int) -> None:
        """add() for many new jobs due at the same time (the AOF loader's bulk path)."""
        b = -(-when // RESOLUTION_MS)
        lst = self.buckets.get(b)
        if lst is None:
            lst = self.buckets[b] = list(jobs)
            heappush(self.heap, b)
        else:
            lst.extend(jobs)
        for job in jobs:
            job.timer = lst
        self.entries += len(jobs)

    def cancel(self, job) -> None:
        if job.timer is not None:
            job.timer = None
            self.stale += 1

    def pop_due(self, now: int) -> list:
        """The jobs whose bucket time has come (each once; stale entries dropped)."""
        heap = self.heap
        limit = now // RESOLUTION_MS
        if not heap or heap[0] > limit:
            return []
        due = []
        stale = 0
        while heap and heap[0] <= limit:
            lst = self.buckets.pop(heappop(heap))
            self.entries -= len(lst)
            for job in lst:
                if job.timer is lst:
                    job.timer = None
                    due.append(job)
                else:
                    stale += 1
        self.stale = max(0, self.stale - stale)
        return due

    def next_time(self):
        return self.heap[0] * RESOLUTION_MS if self.heap else None

    @property
    def sweeping(self) -> bool:
        return self._sweep is not None or self._cur is not None

    def needs_compaction(self) -> bool:
        return self._sweep is not None or self._cur is not None or \
            self.stale > self.entries - self.stale + COMPACT_SLACK

    def compact(self, budget: int = COMPACT_BUDGET) -> None:
        """Drop stale entries, about `budget` entries per call: a sweep over
        every bucket spans as many calls as it needs, a big bucket included
        (compacted in place, live entries moved down, the tail cut when done)."""
        if self._sweep is None:
            self._sweep = list(self.buckets)
        sweep = self._sweep
        buckets = self.buckets
        left = budget
        while left > 0:
            cur = self._cur
            if cur is None:
                if not sweep:
                    self._sweep = None
                    return
                key = sweep.pop()
                lst = buckets.get(key)
                if lst is None:
                    continue
                cur = self._cur = [key, lst, 0, 0]
            key, lst, r, w = cur
            if buckets.get(key) is not lst:     # fired meanwhile: nothing to do
                self._cur = None
                continue
            end = min(len(lst), r + left)
            left -= end - r
            while r < end:
                job = lst[r]
                if job.timer is lst:
                    lst[w] = job
                    w += 1
                r += 1
            if r >= len(lst):
                removed = r - w
                del lst[w:]
                self.entries -= removed
                self.stale = max(0, self.stale - removed)
                self._cur = None
            else:
                cur[2], cur[3] = r, w
        # Entries between write and read are copies of moved ones, or stale:
        # pop_due meets a moved job first and skips the copy.

    def clear(self) -> None:
        # Jobs point at their bucket and buckets hold jobs: break those cycles so
        # dropped jobs are freed by reference counting, not by the cyclic GC.
        for lst in self.buckets.values():
            for job in lst:
                job.timer = None
        self.buckets.clear()
        self.heap.clear()
        self.entries = 0
        self.stale = 0
        self._sweep = None
        self._cur = None
