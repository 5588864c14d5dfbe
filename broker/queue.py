# compiled: mypyc (setup.py builds each module whose first line this is)
"""A queue: jobs ordered by ctime (best-effort FIFO, SPEC section 3).

New jobs almost always carry the largest ctime, so they go to the end; requeued
and imported jobs may land in the middle. ``JobList`` keeps the first kind in a
list read from a moving head (native append and pop in the compiled build, 8
bytes a job) and only the second kind in a SortedKeyList (O(log n) anywhere),
and pops whichever head is older.
"""

from __future__ import annotations

from typing import Final

from collections import deque
from heapq import merge
from itertools import filterfalse, islice
from operator import attrgetter

from sortedcontainers import SortedKeyList

from broker.job import Job

# Pause flags (PAUSE command).
PAUSED_IN: Final = 1
PAUSED_OUT: Final = 2
PAUSE_NAMES = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_IN | PAUSED_OUT: b"all"}
IMPORT_RATE_WINDOW_MS = 5000   # no import for this long: the import rate is 0

_by_ctime = attrgetter("ctime")

# Dead entries tolerated in a JobList's run before it is compacted (beyond as
# many as there are live jobs): bounds the memory they hold.
_DEAD_SLACK: Final = 1024
# Popped slots kept at the front of a run before they are cut off (when they are
# also half of it): each cut moves the rest once, so a pop costs O(1) amortized.
_HEAD_SLACK: Final = 1024


class JobList:
    """The jobs of one queue, oldest ctime first.

    ``_run``: a list whose ctimes never decrease from ``_head`` on (the slots
    before it were popped and hold None); a job with a ctime at least the last
    one's is appended there (almost every new job). ``_sorted``: a
    SortedKeyList for the others (requeued, NACKed, imported jobs), None while
    empty. Removing a job from the middle of the run would be O(n), so it is
    lazy: the job goes to ``_dead`` and its entry is skipped when it reaches the
    head; queued again meanwhile, the entry (still at its ctime's place) is
    simply revived. The run is compacted when dead entries outnumber live jobs.

    The interface is the part of SortedKeyList the broker uses: len(), add(),
    pop(0), remove(), iteration oldest first, clear(); plus popleft() and
    newest_first().
    """

    __slots__ = ("_run", "_head", "_tail", "_sorted", "_dead", "size")

    def __init__(self) -> None:
        self._run: list[Job | None] = []
        self._head = 0              # the run's first live slot
        self._tail = 0              # the ctime of the run's last entry (typed: no lookup)
        self._sorted: SortedKeyList | None = None
        self._dead: set = set()
        self.size = 0               # live jobs (hot paths read it: no __len__ call)

    def __len__(self) -> int:
        return self.size

    def add(self, job: Job) -> None:
        dead = self._dead
        if dead and job in dead:    # its old entry is still in the run, in place
            dead.discard(job)
        else:
            run = self._run
            ctime = job.ctime
            if self._head >= len(run) or ctime >= self._tail:
                run.append(job)
                self._tail = ctime
            else:
                srt = self._sorted
                if srt is None:
                    srt = self._sorted = SortedKeyList(key=_by_ctime)
                srt.add(job)
        self.size += 1

    def popleft(self) -> Job | None:
        """Remove and return the oldest job, or None if there is none."""
        run = self._run
        srt = self._sorted
        dead = self._dead
        while True:
            head = self._head
            first = run[head] if head < len(run) else None
            if srt is not None and (first is None or srt[0].ctime <= first.ctime):
                job: Job = srt.pop(0)
                if not srt:
                    self._sorted = srt = None
            elif first is not None:
                self._pop_run(head)
                if dead and first in dead:
                    dead.discard(first)
                    continue
                job = first
            else:
                return None
            self.size -= 1
            return job

    def _pop_run(self, head: int) -> None:
        """Drop the run's first live slot."""
        run = self._run
        run[head] = None
        head += 1
        if head >= len(run):
            run.clear()
            head = 0
        elif head >= _HEAD_SLACK and 2 * head >= len(run):
            del run[:head]
            head = 0
        self._head = head

    def pop(self, index: int = 0) -> Job:
        """SortedKeyList's pop(0): the oldest job; IndexError when empty."""
        if index != 0:
            raise NotImplementedError("JobList pops the oldest job only")
        job = self.popleft()
        if job is None:
            raise IndexError("pop from an empty queue")
        return job

    def remove(self, job) -> None:
        """Remove a job known to be in this list (the caller checks it is queued here)."""
        srt = self._sorted
        if srt is not None:
            try:
                srt.remove(job)
            except ValueError:
                pass
            else:
                if not srt:
                    self._sorted = None
                self.size -= 1
                return
        dead = self._dead
        dead.add(job)
        self.size -= 1
        if len(dead) > self.size + _DEAD_SLACK:
            run = self._run = [j for j in self._run[self._head:] if j not in dead]
            self._head = 0
            last = run[-1] if run else None
            if last is not None:
                self._tail = last.ctime
            dead.clear()

    def _live_run(self):
        run = islice(self._run, self._head, None)
        dead = self._dead
        if not dead:
            return run
        # Lazy (mypyc would make a generator expression a list).
        return filterfalse(dead.__contains__, run)

    def __iter__(self):
        """Live jobs, oldest first."""
        if self._sorted is None:
            return iter(self._live_run())
        return merge(self._sorted, self._live_run(), key=_by_ctime)

    def newest_first(self):
        """Live jobs, newest first."""
        dead = self._dead
        run = islice(reversed(self._run), len(self._run) - self._head)
        if dead:
            run = filterfalse(dead.__contains__, run)
        if self._sorted is None:
            return run
        return merge(reversed(self._sorted), run, key=_by_ctime, reverse=True)

    def clear(self) -> None:
        self._run.clear()
        self._head = 0
        self._sorted = None
        self._dead.clear()
        self.size = 0


class Queue:
    __slots__ = (
        "name", "jobs", "ctime", "atime", "flags", "blocked", "jobs_in", "jobs_out",
        "needjobs_bcast_time", "needjobs_adhoc_time", "needjobs_bcast_attempt",
        "needjobs_adhoc_attempt", "needjobs_responders", "current_import_jobs_time",
        "current_import_jobs_count", "prev_import_jobs_time", "prev_import_jobs_count",
    )

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.jobs = JobList()
        self.ctime = now            # creation time, ms
        self.atime = now            # last time a job went in or out, ms
        self.flags = 0              # PAUSED_IN / PAUSED_OUT
        self.blocked: deque = deque()      # clients blocked in GETJOB on this queue, FIFO
        self.jobs_in = 0
        self.jobs_out = 0
        # Federation state (cluster/federation.py), kept here so it goes with the queue.
        self.needjobs_bcast_time = 0
        self.needjobs_adhoc_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_attempt = 0
        self.needjobs_responders: dict | None = None   # {node_id: last time it sent us jobs}
        self.current_import_jobs_time = now
        self.current_import_jobs_count = 0
        self.prev_import_jobs_time = now
        self.prev_import_jobs_count = 0

    def __len__(self) -> int:
        return len(self.jobs)

    def remove(self, job) -> bool:
        """Take out a queued job of this queue (see lifecycle.dequeue)."""
        if job.queue != self.name:
            return False
        self.jobs.remove(job)
        return True

    def peek(self, count: int) -> list:
        """Oldest first for count > 0, newest first for count < 0."""
        jobs = self.jobs
        if count >= 0:
            return list(islice(jobs, count))
        return list(islice(jobs.newest_first(), -count))

    # Import rate (jobs received from other nodes because we asked for them),
    # kept and computed as Disque's updateQueueImportRate/getQueueImportRate:
    # two counters of about a second each, zero 5 s after the current one began.
    def count_imports(self, n: int, now: int) -> None:
        if now - self.current_import_jobs_time > 1000:
            self.prev_import_jobs_time = self.current_import_jobs_time
            self.prev_import_jobs_count = self.current_import_jobs_count
            self.current_import_jobs_time = now
            self.current_import_jobs_count = 0
        self.current_import_jobs_count += n

    def import_rate(self, now: int) -> int:
        """Jobs imported per second, rounded up (QSTAT import-rate, QSCAN IMPORTRATE)."""
        if now - self.current_import_jobs_time > IMPORT_RATE_WINDOW_MS:
            return 0
        jobs = self.prev_import_jobs_count + self.current_import_jobs_count
        elapsed = max(now - self.prev_import_jobs_time, 50)   # never overestimate
        return -(-jobs * 1000 // elapsed)

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & 3]

    def is_collectable(self) -> bool:
        """Empty, nobody waiting, not paused: may be garbage collected when idle."""
        return not self.jobs and not self.blocked and not self.flags
