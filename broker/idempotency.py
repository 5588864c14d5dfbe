# compiled: mypyc (setup.py builds each module whose first line this is)
"""Idempotent adds **(ext)**: `ADDJOB queue body ms-timeout IDEMPOTENCY key ...`
(SPEC section 10).

A node maps (queue, key) -> the id of the job added with that key until the
job's expire time (ctime + TTL), even after the job was acked or deleted: a
producer retrying an add whose first attempt was already consumed must not
create the job again. An ADDJOB with a key the node knows answers the known id
and creates nothing (broker/commands/jobs.py).

The key travels with the job (REPLJOB, YOURJOBS, the AOF: broker/job.py's
``idem_key``), and every holder of a copy maps it, so a retry sent to another
holder after a failover gets the same id. The first job mapped wins: a copy of
another job with the same key (two nodes that each created one, see the window
in docs/sdk.md) does not replace a live entry.

A key is forgotten early only when its job turned out never to exist for the
producer: its ADDJOB failed (-NOREPL), or a copy was deleted by its originator
before being acked (broker/lifecycle.py's ``forget_key``).

Entries expire from a heap ordered by expire time; the memory of every entry
still in the heap (forgotten early or not) counts in ``used_memory``.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Final

from disquette import job_record as field

# A key is a client's string, bounded so that the map's memory stays a small
# fraction of the jobs it guards (Stripe's idempotency keys allow 255 chars).
KEY_MAX_BYTES: Final = field.KEY_MAX_BYTES
# Accounted cost of one entry besides its queue name and key (dict entry,
# tuples, heap slot): deterministic, as all of maxmemory's accounting.
ENTRY_OVERHEAD: Final = 200

ERR_KEY_MISSING = "ERR IDEMPOTENCY needs a key: IDEMPOTENCY <key>"
ERR_KEY_LENGTH = "ERR IDEMPOTENCY key must be 1 to %d bytes long" % KEY_MAX_BYTES


def key_error(key: bytes) -> str | None:
    """The error for a key ADDJOB must refuse, or None."""
    if not 0 < len(key) <= KEY_MAX_BYTES:
        return ERR_KEY_LENGTH
    return None


class IdempotencyKeys:
    """One node's (queue, key) -> job id map, with expiry and memory accounting."""

    def __init__(self) -> None:
        # (queue, key) -> (job id, expire time ms)
        self.entries: dict[tuple[bytes, bytes], tuple[bytes, int]] = {}
        # (expire time ms, queue, key): one per remember(), popped at expiry
        self.expiries: list[tuple[int, bytes, bytes]] = []
        self.memory = 0

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, queue: bytes, key: bytes, now: int) -> bytes | None:
        """The id of the job added with this key, if it has not expired."""
        e = self.entries.get((queue, key))
        if e is None or e[1] <= now:
            return None
        return e[0]

    def remember(self, queue: bytes, key: bytes, jid: bytes, etime: int, now: int) -> None:
        """Map the key to this job until `etime`, unless it maps to a live
        entry already (the first one wins, on every node alike)."""
        k = (queue, key)
        e = self.entries.get(k)
        if e is not None and (e[0] == jid or e[1] > now):
            return
        self.entries[k] = (jid, etime)
        heappush(self.expiries, (etime, queue, key))
        self.memory += len(queue) + len(key) + ENTRY_OVERHEAD

    def forget(self, queue: bytes, key: bytes, jid: bytes) -> None:
        """Drop the entry if it names this job (its add failed). Its heap slot,
        and the memory accounted for it, go at its expire time."""
        k = (queue, key)
        e = self.entries.get(k)
        if e is not None and e[0] == jid:
            del self.entries[k]

    def expire(self, now: int) -> None:
        """Drop the entries whose job's TTL has elapsed."""
        heap = self.expiries
        entries = self.entries
        while heap and heap[0][0] <= now:
            etime, queue, key = heappop(heap)
            self.memory -= len(queue) + len(key) + ENTRY_OVERHEAD
            k = (queue, key)
            e = entries.get(k)
            if e is not None and e[1] <= now:
                del entries[k]

    def clear(self) -> None:
        """DEBUG FLUSHALL, CLUSTER RESET HARD: every job goes, every key too."""
        self.entries.clear()
        self.expiries.clear()
        self.memory = 0
