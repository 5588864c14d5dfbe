"""Writing rows as jobs, tied to Spark's commit protocol.

A task (``write_rows``) adds its rows in pipelined batches, several batches
in flight at once on their own connections (``connections``).
With staging (the data source's default) a job is added *held* (ADDJOB ...
HOLD, a Disquette extension): replicated, but no node queues it for
consumers, whatever its DELAY, RETRY or TTL; the task returns the ids in its
commit message.  Then, on the driver:

* ``commit``: every staged job is released by ``ENQUEUE`` on the node that
  created it, or another holder: queued there (or once its own DELAY has
  elapsed), no delivery counted, and every holder re-queues it after RETRY
  if it is not acked, as a job added unheld;
* ``abort``: every job of the write is deleted (FASTACK: here and, best
  effort, on every holder).

A task that fails deletes what it staged before the error propagates.  What
nobody deletes (an executor killed mid-task, a speculative attempt Spark
denied, a lost ADDJOB reply) stays held: never queued, gone at its TTL.
docs/spark.md states the exact guarantee.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterable

from disquette import AddJobsError, Client, DisqueError, ReplyError

from .options import Connection, WriteOptions
from .rows import RowMapper

log = logging.getLogger("disquette.spark")

RELEASE_IDS = 1000       # job ids per ENQUEUE
RELEASE_COMMANDS = 10    # ENQUEUEs per pipelined round trip
DELETE_CHUNK = 1000      # ids per FASTACK


class DisqueWriteError(DisqueError):
    """Rows could not be written (or a write could not be committed); the
    message names the queue and the node's reply."""


@dataclass
class StagedJobs:
    """What one task wrote (its commit message's payload): ``staged`` ids
    wait for ``commit``; ``direct`` ids (a write that is not staged) need
    nothing but are deleted on ``abort``."""

    staged: list[str] = field(default_factory=list)
    direct: list[str] = field(default_factory=list)
    rows: int = 0

    def all_ids(self) -> list[str]:
        return self.staged + self.direct


def _stage(options: dict[str, Any]) -> bool:
    """Stage the job: added held, its own DELAY (if any) starting at release."""
    options["hold"] = True
    return True


def _failure(err: AddJobsError, rows_before: int) -> DisqueWriteError:
    index, first = err.errors[0]
    queue = getattr(first, "queue", "?")
    more = f" (and {len(err.errors) - 1} more rows)" if len(err.errors) > 1 else ""
    return DisqueWriteError(
        f"disquette: row {rows_before + index} not written to queue {queue!r}: "
        f"{type(first).__name__}: {first}{more}")


def write_rows(opts: WriteOptions, rows: Iterable[Any], client: Client | None = None,
               staged: bool | None = None) -> StagedJobs:
    """Add ``rows`` as jobs, ``batchSize`` pipelined ADDJOBs a batch, up to
    ``connections`` batches in flight at once (each on its own connection of
    the client's pool: a node serves one connection's synchronous ADDJOBs one
    after the other); every reply is checked.  Raises DisqueWriteError naming
    the first failed row, after deleting what this call added when ``staged``."""
    staged = opts.staged if staged is None else staged
    own = client is None
    client = client or opts.conn.client()
    mapper = RowMapper(opts)
    done = StagedJobs()
    defaults: dict[str, Any] = {"timeout_ms": opts.timeout_ms, "asynchronous": opts.asynchronous}
    if opts.maxlen:
        defaults["maxlen"] = opts.maxlen
    parallel = max(1, opts.connections)
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="disquette-write") \
        if parallel > 1 else None
    inflight: deque[tuple[Future | None, list, list[bool], int]] = deque()
    it = iter(rows)

    def send(chunk: list) -> Any:
        return client.add_jobs(chunk, batch_size=len(chunk), **defaults)

    def collect() -> None:
        """The oldest batch's ids, or its error (rows numbered in input order)."""
        future, chunk, kinds, first_row = inflight.popleft()
        try:
            ids = future.result() if future is not None else send(chunk)
        except AddJobsError as e:
            for jid, kind in zip(e.results, kinds):
                if isinstance(jid, str):
                    (done.staged if kind else done.direct).append(jid)
            raise _failure(e, first_row) from e
        except DisqueError as e:
            raise DisqueWriteError(f"disquette: rows not written to queue "
                                   f"{chunk[0][0]!r}: {type(e).__name__}: {e}") from e
        for jid, kind in zip(ids, kinds):
            (done.staged if kind else done.direct).append(jid)

    try:
        rows_read = 0
        while True:
            chunk = [mapper.item(r) for r in islice(it, opts.batch_size)]
            if not chunk:
                break
            kinds = [_stage(o) for _, _, o in chunk] if staged else [False] * len(chunk)
            future = pool.submit(send, chunk) if pool is not None else None
            inflight.append((future, chunk, kinds, rows_read))
            rows_read += len(chunk)
            while len(inflight) >= parallel:
                collect()
        while inflight:
            collect()
        done.rows = rows_read
        return done
    except BaseException:
        # Batches still in flight finish first: what they added is deleted too.
        while inflight:
            try:
                collect()
            except Exception:  # noqa: BLE001 - the first error is the one raised
                pass
        if staged and done.all_ids():
            delete_jobs(client, done.all_ids())
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        if own:
            client.close()


# -- the driver's side ------------------------------------------------------

def _by_creator(client: Client, ids: Iterable[str]) -> dict[str, list[str]]:
    """Group job ids by the address of the node that created them (its id's
    8 hex chars are in the job id); unknown creators go to the current node."""
    try:
        hello = client.hello()
        addr_of = {n.id[:8]: n.addr for n in hello.nodes}
    except DisqueError:
        addr_of = {}
    groups: dict[str, list[str]] = {}
    for jid in ids:
        groups.setdefault(addr_of.get(jid[2:10], client.node), []).append(jid)
    return groups


def _release_on(client: Client, node: str, ids: list[str]) -> list[str]:
    """ENQUEUE the ids on ``node``, RELEASE_IDS per command, the commands
    pipelined; return the ids it did not know.  ENQUEUE counts the jobs it
    queued: one whose count falls short holds an unknown job or one released
    already (a commit run again): SHOW tells them apart, for that command's
    ids only.  (Many ids per ENQUEUE: a node parses one command, not one per
    job, and the driver reads one reply.)"""
    missing = []
    parts = [ids[start:start + RELEASE_IDS] for start in range(0, len(ids), RELEASE_IDS)]
    for first in range(0, len(parts), RELEASE_COMMANDS):
        batch = parts[first:first + RELEASE_COMMANDS]
        replies = client.execute_many([("ENQUEUE", *part) for part in batch], node=node)
        for reply in replies:
            if isinstance(reply, ReplyError):
                raise reply
        unsure = [jid for part, n in zip(batch, replies) if n != len(part) for jid in part]
        if unsure:
            shown = client.execute_many([("SHOW", jid) for jid in unsure], node=node)
            for jid, s in zip(unsure, shown):
                if isinstance(s, ReplyError):
                    raise s
                if s is None:
                    missing.append(jid)
    return missing


def release_jobs(conn: Connection, ids: list[str]) -> None:
    """Commit: make staged jobs visible (see the module doc).  A job its
    creator does not know (gone, or never kept a copy) is released on the
    first other node that holds it.  Raises DisqueWriteError naming how many
    could not be released."""
    if not ids:
        return
    with conn.client() as client:
        pending = _by_creator(client, ids)
        nodes = client.nodes
        lost: list[str] = []
        last_error: Exception | None = None
        for node, group in pending.items():
            candidates = [node] + [n for n in nodes if n != node]
            for candidate in candidates:
                try:
                    group = _release_on(client, candidate, group)
                except DisqueError as e:
                    last_error = e
                    continue
                if not group:
                    break
            lost += group
        if lost:
            raise DisqueWriteError(
                f"disquette: commit could not release {len(lost)} of {len(ids)} jobs (no node "
                f"knows them any more, e.g. {lost[0]}); last error: {last_error}")


def delete_jobs(client: Client, ids: list[str]) -> int:
    """Abort: FASTACK the jobs (here and, best effort, on every holder).
    Never raises: abort runs while something else already failed."""
    deleted = 0
    for node, group in _by_creator(client, ids).items():
        for start in range(0, len(group), DELETE_CHUNK):
            part = group[start:start + DELETE_CHUNK]
            try:
                deleted += client.fast_ack(*part, node=node)
            except DisqueError as e:
                log.warning("disquette: could not delete %d staged jobs on %s: %s "
                            "(their TTL collects them)", len(part), node, e)
    return deleted


def abort_jobs(conn: Connection, ids: list[str]) -> None:
    if ids:
        with conn.client() as client:
            delete_jobs(client, ids)
