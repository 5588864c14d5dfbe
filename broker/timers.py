# compiled: mypyc (setup.py builds each module whose first line this is)
"""Per-job timers: a wheel of 10 ms buckets (SPEC section 5).

A job's next wake-up time is derived from its state (broker/lifecycle.py's
wake_time), so the wheel stores no time per job. A bucket is a list of chunks,
a chunk (``Chunk``, defined beside the Job that points at it: broker/job.py) a
plain list of at most CHUNK jobs (8 bytes an entry, which matters with millions
of jobs) and the count of those still live; ``job.timer`` is the chunk holding
the job and ``job.timer_slot`` its index there, always below 257.

Every operation is O(1) plus a heap push for a new bucket (O(log buckets)):

- ``add`` appends the job to its bucket's last chunk; the slot it had
  elsewhere is set to None;
- ``cancel`` (the job is deleted) sets its slot to None;
- ``pop_due`` returns the jobs of the buckets whose time has come.

So a stale entry is a None: it costs 8 bytes and never keeps a job (and its
body) alive, and a deleted job is freed at once by its reference count (the
job <-> chunk cycle is broken when the slot is cleared). A chunk whose last live
job leaves drops its slots at once: after a million jobs are fetched and acked
no chunk full of Nones waits for compaction (at 10 ticks a second, a sweep of
two million slots took 40 s, while their lists kept the memory of the jobs
around them from going back to the system). ``compact`` (called from the node's
tick, never from a command) drops the Nones of the other chunks, a bounded
number of entries per call, once they outnumber the live entries.

A bucket's own objects (its key, its lists) live as long as the bucket and sit
in the allocator's arenas beside the jobs created at the same time: buckets for
every 10 ms of a day of TTLs would keep those arenas, hence the memory of jobs
long deleted, from going back to the system. So a time more than FAR_MS ahead
goes to a bucket on a COARSE_MS grid that fires FAR_MS / 2 early (one bucket per
second, not a hundred); the node's tick puts the jobs it pops before their time
back in, now in their 10 ms bucket. ``pop_due`` returns at most about
POP_BUDGET jobs a call, so that such a bucket costs no tick a long pause.
"""

from __future__ import annotations

from typing import Final

from heapq import heapify, heappop, heappush

from mypy_extensions import i64

from broker.job import Chunk, Job

RESOLUTION_MS: Final = 10
CHUNK: Final = 256                 # entries per chunk: slot indices stay cached small ints
COMPACT_SLACK: Final = 1024        # stale entries tolerated beyond the live ones
COMPACT_BUDGET: Final = 5_000      # entries looked at per compact() call (well under 1 ms)
FAR_MS: Final = 60_000             # times further ahead go to a coarse bucket...
COARSE_MS: Final = 1000            # ...on this grid, FAR_MS / 2 early
POP_BUDGET: Final = 10_000         # jobs pop_due returns per call, about (whole chunks)


def _bucket(when: i64, now: i64) -> i64:
    """The bucket key (time // RESOLUTION_MS) for a job due at `when`: its 10 ms
    bucket, rounded up (never early), or an early coarse one when far ahead."""
    if when - now > FAR_MS:
        return (when - FAR_MS // 2) // COARSE_MS * (COARSE_MS // RESOLUTION_MS)
    return -(-when // RESOLUTION_MS)


class TimerWheel:
    __slots__ = ("buckets", "heap", "entries", "stale", "now", "_sweep", "_cur",
                 "_last_key", "_last_chunks")

    def __init__(self, now: int = 0) -> None:
        self.buckets: dict[int, list[Chunk]] = {}   # bucket time // RESOLUTION_MS -> chunks
        self.heap: list[int] = []
        self.entries = 0            # slots in the buckets, stale ones (None) included
        self.stale = 0              # slots set to None (exact)
        self.now = now              # the last pop_due's time: what "far ahead" is from
        self._sweep: list | None = None     # bucket keys compact() has yet to visit
        self._cur: list | None = None       # [key, chunks, read] being compacted
        # The bucket add() used last: a burst of jobs goes to one bucket (their
        # TTL's coarse one), found without a dict lookup. Forgotten when a
        # bucket goes.
        self._last_key = 0
        self._last_chunks: list[Chunk] | None = None

    def add(self, job: Job, when: int) -> None:
        """Make job due at `when` (popped at its 10 ms bucket, never early, or
        in an early coarse bucket when far ahead)."""
        b = _bucket(when, self.now)
        chunks = self._last_chunks
        if chunks is None or b != self._last_key:
            chunks = self.buckets.get(b)
        old = job.timer
        if chunks is None:
            chunk = Chunk([job], b)
            chunks = self.buckets[b] = [chunk]
            heappush(self.heap, b)
        else:
            chunk = chunks[-1]
            if old is chunk:        # due in this bucket already
                return
            if len(chunk.jobs) >= CHUNK:
                chunk = Chunk([job], b)
                chunks.append(chunk)
            else:
                chunk.jobs.append(job)
                chunk.live += 1
        self._last_key = b
        self._last_chunks = chunks
        if old is not None:
            self._vacate(old, job.timer_slot)
        job.timer = chunk
        job.timer_slot = len(chunk.jobs) - 1
        self.entries += 1

    def _vacate(self, chunk: Chunk, slot: int) -> None:
        """A job leaves its slot: None there; or, the chunk's last live job, the
        chunk goes (and its bucket with its last chunk): nothing made while the
        jobs arrived stays after they are gone."""
        jobs = chunk.jobs
        chunk.live -= 1
        if chunk.live:
            jobs[slot] = None
            self.stale += 1
            return
        self.entries -= len(jobs)
        self.stale -= len(jobs) - 1
        jobs.clear()
        chunks = self.buckets.get(chunk.key)
        if chunks is None:          # popped already (pop_due is taking it)
            return
        if len(chunks) > 1:
            chunks.remove(chunk)    # a scan of the bucket's chunks, once per chunk
        else:
            # A bucket's last chunk: the bucket goes, its key out of the heap
            # (a few thousand keys at most: one per 10 ms for a minute ahead,
            # one per second beyond).
            del self.buckets[chunk.key]
            self._last_chunks = None
            heap = self.heap
            heap.remove(chunk.key)
            heapify(heap)

    def add_many(self, jobs: list, when: int) -> None:
        """add() for many new jobs due at the same time (the AOF loader's bulk path)."""
        if not jobs:
            return
        b = _bucket(when, self.now)
        chunks = self.buckets.get(b)
        if chunks is None:
            chunks = self.buckets[b] = []
            heappush(self.heap, b)
        for i in range(0, len(jobs), CHUNK):
            chunk = Chunk(jobs[i:i + CHUNK], b)
            chunks.append(chunk)
            for slot, job in enumerate(chunk.jobs):
                job.timer = chunk
                job.timer_slot = slot
        self.entries += len(jobs)

    def cancel(self, job) -> None:
        chunk = job.timer
        if chunk is not None:
            job.timer = None
            self._vacate(chunk, job.timer_slot)

    def pop_due(self, now: int, budget: int = POP_BUDGET) -> list:
        """The jobs whose bucket time has come, each once, about `budget` at
        most (whole chunks): the rest stays due (next_time() <= now). A job
        from an early coarse bucket may not be due yet: the caller checks."""
        self.now = now
        heap = self.heap
        limit = now // RESOLUTION_MS
        if not heap or heap[0] > limit:
            return []
        buckets = self.buckets
        due = []
        slots = 0
        while heap and heap[0] <= limit and slots < budget:
            chunks = buckets[heap[0]]
            n = 0
            for chunk in chunks:
                n += 1
                slots += len(chunk.jobs)
                for job in chunk.jobs:
                    if job is not None:
                        job.timer = None
                        due.append(job)
                if slots >= budget:
                    break
            if n == len(chunks):
                del buckets[heappop(heap)]
                self._last_chunks = None
            else:
                del chunks[:n]
        self.entries -= slots
        self.stale -= slots - len(due)
        return due

    def next_time(self) -> int | None:
        """When the earliest bucket is due (ms), or None."""
        heap = self.heap
        return heap[0] * RESOLUTION_MS if heap else None

    def needs_compaction(self) -> bool:
        """A sweep is under way, or stale slots outnumber the live ones."""
        return self._sweep is not None or self.stale > self.entries - self.stale + COMPACT_SLACK

    def compact(self, budget: int = COMPACT_BUDGET) -> None:
        """Drop stale slots, whole chunks at a time until about `budget` slots
        were looked at: a sweep over every bucket spans as many calls as it
        needs, a big bucket included (its chunks compacted in place, the
        emptied ones dropped once the bucket is done)."""
        if self._sweep is None:
            self._sweep = list(self.buckets)
        sweep = self._sweep
        buckets = self.buckets
        left = budget
        chunks: list       # one type for mypyc (the bucket being compacted)
        while left > 0:
            cur = self._cur
            if cur is None:
                if not sweep:
                    self._sweep = None
                    return
                key = sweep.pop()
                got = buckets.get(key)
                if got is None:
                    continue
                cur = self._cur = [key, got, 0]
            key, chunks, r = cur
            if buckets.get(key) is not chunks:      # fired meanwhile: nothing to do
                self._cur = None
                continue
            n = len(chunks)
            while r < n and left > 0:
                chunk = chunks[r].jobs
                r += 1
                size = len(chunk)
                left -= size + 1
                if None in chunk:
                    live = [job for job in chunk if job is not None]
                    chunk[:] = live         # the same Chunk: job.timer stays right
                    for slot, job in enumerate(live):
                        job.timer_slot = slot
                    self.entries -= size - len(live)
                    self.stale -= size - len(live)
            if r < n:
                cur[2] = r
            else:
                # Done with this bucket: drop its emptied chunks (one pass over
                # the chunk list, not the entries), keeping a last chunk for
                # add() to append to.
                kept = [c for c in chunks if c.jobs]
                if len(kept) < n:
                    chunks[:] = kept or [Chunk([], key)]
                self._cur = None

    def clear(self) -> None:
        # Live jobs point at their chunk and chunks hold them: break those cycles
        # so dropped jobs are freed by reference counting, not by the cyclic GC.
        for chunks in self.buckets.values():
            for chunk in chunks:
                for job in chunk.jobs:
                    if job is not None:
                        job.timer = None
        self.buckets.clear()
        self.heap.clear()
        self.entries = 0
        self.stale = 0
        self._sweep = None
        self._cur = None
        self._last_chunks = None
