"""How long a failed job waits before it comes back: ``Backoff``.

    Backoff(base=1, cap=300, jitter=0.1)   # 1 s, 2 s, 4 s ... at most 300 s, less up to 10%

After the n-th failed delivery a job comes back after ``min(cap, base *
2**(n-1))`` seconds, shortened by a random fraction of up to ``jitter`` (so
jobs that failed together do not come back together).

How the Worker waits (disquette/worker.py, ``_hold``): it keeps the failed
job, out of its concurrency slots, with WORKING while the delay runs, then
NACKs it.  So the job stays one job on the cluster the whole time, and its
``nacks`` count the failures.  If the worker dies meanwhile, the nodes
queue the job again when its RETRY elapses (one more additional delivery),
as for any job a worker took: it is never lost and never doubled.  A stop
NACKs the jobs it holds at once (their delay cut short, their failure
counted).  A job cannot be kept past half its TTL (WORKING answers TOOLATE
then): it comes back by RETRY from there.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple


class Backoff(NamedTuple):
    """``base`` seconds after the first failure, doubling, at most ``cap``;
    ``jitter`` (0 to 1): the fraction of the delay a random draw may take off."""

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.1

    def delay(self, attempt: int, rng: random.Random | Any = random) -> float:
        """Seconds before delivery ``attempt + 1``, after delivery ``attempt`` failed."""
        d = min(self.cap, self.base * 2 ** max(attempt - 1, 0))
        if self.jitter:
            d *= 1.0 - self.jitter * rng.random()
        return max(0.0, d)

    def check(self) -> "Backoff":
        if self.base < 0 or self.cap < 0:
            raise ValueError("Backoff base and cap must be 0 or more")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff jitter must be between 0 and 1")
        return self
