"""Why a job came back, and when to stop trying: the Worker's poison policy.

A job delivered again has one of two histories, and GETJOB WITHCOUNTERS tells
them apart:

* ``nacks``: handlers failed on it (the Worker NACKs a job whose handler
  raised);
* ``additional-deliveries``: it came back without an answer: the worker that
  had it crashed, was killed, or ran past RETRY without WORKING (and every
  other requeue that is not a NACK, as Disque counts: ENQUEUE too).

``max_failures`` bounds the first, ``max_lost_deliveries`` the second,
``max_attempts`` their sum (nacks + additional deliveries + 1, the Worker's
limit before the two existed).  A job over a limit is dead-lettered with a
``reason``: ``"failures"`` when its handler just failed, ``"lost-deliveries"``
when it arrives with too many lost deliveries (it is not run again), and the
``limit`` that was reached.
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import JobTimeout
from .job import Job

FAILURES = "failures"
LOST_DELIVERIES = "lost-deliveries"
TIMEOUT = "timeout"  # the last failure was a time limit (disquette.JobTimeout)


class Verdict(NamedTuple):
    """Dead-letter this job: ``reason`` (FAILURES or LOST_DELIVERIES), the
    ``limit`` reached (``"max_failures"``, ``"max_lost_deliveries"`` or
    ``"max_attempts"``) and a sentence for the dead letter's error."""

    reason: str
    limit: str
    message: str


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1 (or None: no limit)")


class PoisonPolicy:
    """The three limits (None: no limit); see the module doc."""

    __slots__ = ("max_attempts", "max_failures", "max_lost_deliveries")

    def __init__(self, max_attempts: int | None = 5, max_failures: int | None = None,
                 max_lost_deliveries: int | None = None) -> None:
        # max_attempts=0 has always meant "no limit" (the CLI's --max-attempts 0).
        self.max_attempts = max_attempts or None
        _check_limit("max_failures", max_failures)
        _check_limit("max_lost_deliveries", max_lost_deliveries)
        self.max_failures = max_failures
        self.max_lost_deliveries = max_lost_deliveries

    def on_delivery(self, job: Job) -> Verdict | None:
        """Before running the handler: a job whose deliveries were lost too
        often is dead-lettered without running it again."""
        lost = job.additional_deliveries or 0
        limit = self.max_lost_deliveries
        if limit is not None and lost >= limit:
            return Verdict(LOST_DELIVERIES, "max_lost_deliveries",
                           f"delivered {lost} more times without an answer "
                           f"(max_lost_deliveries {limit})")
        if self.max_attempts is not None and job.attempts > self.max_attempts:
            # Over the combined limit on arrival: lost deliveries, unless its
            # earlier workers only ever NACKed it (a lower limit than theirs).
            return Verdict(LOST_DELIVERIES if lost else FAILURES, "max_attempts",
                           f"delivered {job.attempts} times without finishing "
                           f"(max_attempts {self.max_attempts})")
        return None

    def after_failure(self, job: Job, error: BaseException | None = None) -> Verdict | None:
        """After the handler raised ``error`` (this failure counted): dead-letter,
        or None to let the job be tried again.  A time limit
        (:class:`~disquette.JobTimeout`) counts as a failure; its reason is
        ``"timeout"``."""
        reason = TIMEOUT if isinstance(error, JobTimeout) else FAILURES
        failures = (job.nacks or 0) + 1
        limit = self.max_failures
        if limit is not None and failures >= limit:
            return Verdict(reason, "max_failures", f"failed {failures} times "
                           f"(max_failures {limit})")
        if self.max_attempts is not None and job.attempts >= self.max_attempts:
            return Verdict(reason, "max_attempts", f"failed on delivery {job.attempts} "
                           f"(max_attempts {self.max_attempts})")
        return None
