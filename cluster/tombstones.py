# compiled: mypyc (setup.py builds each module whose first line this is)
"""Job ids remembered for a while after their job left this node, so that a
message about it delayed in the network (or in a reconnect backlog) cannot
bring it back: a REPLJOB or YOURJOBS of a deleted replicated job is dropped,
a YOURJOBS of one deleted acked is answered with SETACK (federation).

``remember``/``forget_expired`` keep such an id -> until table in insertion
order, bounded; requeue's heard_queued is one too.
"""

from __future__ import annotations

from typing import Final

from broker.job import ACKED, Job

# How long a deleted replicated job is remembered.
TOMBSTONE_MS: Final = 30_000
MAX_REMEMBERED: Final = 1_000_000


def remember(ids: dict[bytes, int], jid: bytes, until: int) -> None:
    """A job id remembered until a time, bounded (the oldest one goes)."""
    ids.pop(jid, None)      # re-insert at the end: expiry order = insertion order
    ids[jid] = until
    if len(ids) > MAX_REMEMBERED:
        del ids[next(iter(ids))]


def forget_expired(ids: dict[bytes, int], now: int) -> None:
    while ids:
        jid = next(iter(ids))
        if ids[jid] > now:
            break
        del ids[jid]


class Tombstones:
    """Owns ``ids`` (deleted job id -> until, insertion order) and ``acked``
    (the same for the jobs deleted acked: a copy moved to us later is answered
    with SETACK, not bounced for 30 s)."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        self.acked: dict[bytes, int] = {}

    def bury(self, jid: bytes, now: int) -> None:
        remember(self.ids, jid, now + TOMBSTONE_MS)

    def job_deleted(self, job: Job, now: int) -> None:
        """Our copy of a job other nodes hold was deleted."""
        self.bury(job.id, now)
        if job.state == ACKED:
            remember(self.acked, job.id, now + TOMBSTONE_MS)

    def tick(self, now: int) -> None:
        forget_expired(self.ids, now)
        forget_expired(self.acked, now)
