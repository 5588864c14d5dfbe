"""Exactly once across driver restarts: commit records kept in the cluster.

A staged write (writes.py) becomes visible when the driver releases its jobs.
If the driver dies during that release, or after it but before Spark's own
commit log has the micro-batch, Spark runs the micro-batch again after the
restart, and a plain re-run would add its rows a second time.  So each write
with a *key* (a streaming query's id and batch id, or a batch write's
``writeId``) keeps a small *commit record* in the cluster itself, as jobs in
the system queue ``disquette.commits/<key>`` (``RECORD_PREFIX``):

* ``release`` (the head): written, replicated like the data, before the first
  job is released; it holds the ids to release (the first ``IDS_PER_RECORD``
  inline, the rest in ``ids`` jobs of the queue ``.../ids``, written first);
* ``progress``: after each ``RELEASE_STEP`` ids released, how many are;
* ``done``: the release finished; the head, its ``ids`` jobs and the progress
  records are then deleted, the ``done`` record stays until the query's next
  micro-batch commits (or its TTL).

A task looks for the record before staging (``recorded``): when there is one,
it writes nothing.  The driver's commit (``commit_release``) looks again:
``done`` -> nothing to do; a head -> finish releasing the SAME jobs (they
wait, staged, until their TTL), from the last progress record on; none ->
write the head, release, mark done.  Records are found with QPEEK on every
node (they are queued, in a queue no consumer reads; a short RETRY makes a
surviving copy queued again soon after the node that had it queued dies),
with a JSCAN of the queue when a node did not answer.  docs/spark.md states
the guarantee and the window that remains.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from disquette import Client, DisqueError, ReplyError

from .options import WriteOptions
from .writes import DisqueWriteError, delete_jobs, release_jobs

log = logging.getLogger("disquette.spark")

RECORD_PREFIX = "disquette.commits/"
RECORD_TTL = 7 * 86400   # at least: a record lives as long as the write's TTL
RECORD_RETRY = 2         # seconds before a surviving copy is queued again
IDS_PER_RECORD = 20_000  # ids per record job (about 0.9 MB of JSON)
RELEASE_STEP = 5000      # ids released between two progress records
PEEK_MAX = 10_000        # records of one key read at once (a key has a few)

# Test hook (documented in docs/spark.md): "point[@queue],..." stops the
# driver's commit at that point for PAUSE_SECONDS, so a test can kill the
# driver there.  Points: before-release, mid-release, after-release.
PAUSE_ENV = "DISQUETTE_SPARK_COMMIT_PAUSE"
PAUSE_SECONDS = 600


@dataclass(frozen=True)
class CommitKey:
    """What a commit record is for: a streaming query id and batch id, or a
    batch write's ``writeId`` (``batch`` None)."""

    name: str
    batch: int | None = None

    @classmethod
    def stream(cls, query_id: str, batch_id: int) -> "CommitKey":
        return cls(query_id, batch_id)

    @classmethod
    def write(cls, write_id: str) -> "CommitKey":
        return cls("write/" + write_id)

    @property
    def queue(self) -> str:
        tail = self.name if self.batch is None else f"{self.name}/{self.batch}"
        return RECORD_PREFIX + tail

    def previous(self) -> "CommitKey | None":
        """The micro-batch before this one (whose record Spark no longer needs)."""
        if self.batch is None or self.batch <= 0:
            return None
        return CommitKey(self.name, self.batch - 1)


@dataclass
class Record:
    """The record of one key as found in the cluster."""

    key: CommitKey
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)   # record job id -> body
    answered: bool = True            # every node answered the lookup

    def _of(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(jid, body) for jid, body in self.jobs.items() if body.get("kind") == kind]

    @property
    def done(self) -> bool:
        return bool(self._of("done"))

    @property
    def head(self) -> tuple[str, dict[str, Any]] | None:
        heads = self._of("release")
        return heads[0] if heads else None

    @property
    def released(self) -> int:
        """How many of the head's ids an earlier driver released for sure."""
        return max((int(b.get("released", 0)) for _, b in self._of("progress")), default=0)

    @property
    def exists(self) -> bool:
        return self.done or self.head is not None


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _body(raw: Any) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _nodes(client: Client) -> list[str]:
    try:
        client.hello()       # learn every node, not only the listed ones
    except DisqueError as e:
        log.warning("disquette: HELLO failed (%s); looking at the listed nodes only", e)
    return list(client.nodes)


def _peek(client: Client, queue: str) -> tuple[dict[str, bytes], bool]:
    """id -> body of every job queued in ``queue`` on any node, and whether
    every node answered."""
    found: dict[str, bytes] = {}
    answered = True
    for node in _nodes(client):
        try:
            [reply] = client.execute_many([("QPEEK", queue, PEEK_MAX)], node=node)
        except DisqueError:
            answered = False
            continue
        if isinstance(reply, ReplyError):
            answered = False
            continue
        for entry in reply or ():
            found[_text(entry[1])] = bytes(entry[2])
    return found, answered


def _show_body(reply: Any) -> bytes | None:
    """The body of a SHOW reply (a flat field/value array), or None."""
    if not reply or isinstance(reply, ReplyError):
        return None
    fields = list(reply)
    for i in range(0, len(fields) - 1, 2):
        if _text(fields[i]) == "body":
            return bytes(fields[i + 1])
    return None


def _scan(client: Client, queue: str) -> dict[str, bytes]:
    """id -> body of every job of ``queue`` any reachable node holds, queued
    or not (JSCAN walks every job of a node: only when QPEEK cannot decide)."""
    found: dict[str, bytes] = {}
    for node in _nodes(client):
        try:
            [reply] = client.execute_many([("JSCAN", 0, "BUSYLOOP", "QUEUE", queue)], node=node)
            ids = [_text(j) for j in reply[1]] if not isinstance(reply, ReplyError) else []
            shows = client.execute_many([("SHOW", j) for j in ids if j not in found], node=node)
        except DisqueError:
            continue
        for jid, show in zip([j for j in ids if j not in found], shows):
            raw = _show_body(show)
            if raw is not None:
                found[jid] = raw
    return found


def find(client: Client, key: CommitKey, thorough: bool = False) -> Record:
    """The record of ``key``.  ``thorough``: when a node did not answer and
    nothing was found queued, also look at the jobs that are not queued."""
    raw, answered = _peek(client, key.queue)
    if thorough and not answered and not any(_body(b).get("kind") in ("release", "done")
                                             for b in raw.values()):
        raw.update(_scan(client, key.queue))
    return Record(key, {jid: _body(b) for jid, b in raw.items()}, answered)


def recorded(client: Client, key: CommitKey) -> bool:
    """Whether an earlier run already began releasing ``key`` (a task then
    writes nothing: the driver finishes that release)."""
    try:
        return find(client, key).exists
    except DisqueError as e:   # the driver's commit looks again, thoroughly
        log.warning("disquette: could not look for the commit record of %s: %s", key.queue, e)
        return False


# -- writing records ------------------------------------------------------------

def _record_options(opts: WriteOptions) -> dict[str, Any]:
    # (no ttl option: the broker's default, a day, is below RECORD_TTL)
    ttl = max(RECORD_TTL, int(opts.defaults.get("ttl") or 0))
    return {"replicate": opts.defaults.get("replicate"), "retry": RECORD_RETRY, "ttl": ttl,
            "timeout_ms": opts.timeout_ms}


def _add(client: Client, queue: str, body: dict[str, Any], opts: WriteOptions) -> str:
    """Add one record job, synchronously replicated (raises if not)."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    return str(client.add_job(queue, raw, **_record_options(opts)))


def _run_of(added: list[str]) -> str:
    """Names the run that wrote a head (by the jobs its tasks added), so that
    its own abort can tell its record from an earlier run's."""
    return hashlib.sha1("\n".join(sorted(added)).encode()).hexdigest()


def _begin(client: Client, key: CommitKey, ids: list[str], added: list[str],
           opts: WriteOptions) -> Record:
    """Write the head (after its extra ``ids`` jobs): from now on a re-run
    finishes this release instead of staging again."""
    parts = [_add(client, key.queue + "/ids",
                  {"kind": "ids", "key": key.queue, "ids": ids[start:start + IDS_PER_RECORD]},
                  opts)
             for start in range(IDS_PER_RECORD, len(ids), IDS_PER_RECORD)]
    head = {"kind": "release", "key": key.queue, "run": _run_of(added), "count": len(ids),
            "ids": ids[:IDS_PER_RECORD], "parts": parts}
    return Record(key, {_add(client, key.queue, head, opts): head})


def _head_ids(client: Client, head: dict[str, Any]) -> list[str]:
    """Every id a head holds (its own and those of its ``ids`` jobs)."""
    ids = list(head.get("ids") or [])
    nodes = _nodes(client)
    for part in head.get("parts") or []:
        for node in nodes:
            try:
                [reply] = client.execute_many([("SHOW", part)], node=node)
            except DisqueError:
                continue
            raw = _show_body(reply)
            if raw is not None:
                ids += _body(raw).get("ids") or []
                break
        else:
            raise DisqueWriteError(f"disquette: the commit record {head.get('key')} lost its "
                                   f"part {part}: cannot finish that release")
    return ids


def _release(opts: WriteOptions, client: Client, record: Record, ids: list[str],
             finishing: bool) -> None:
    """Release ``ids`` from where the record says an earlier driver stopped,
    ``RELEASE_STEP`` at a time, recording the progress after each step."""
    start = record.released if finishing else 0
    for pos in range(start, len(ids), RELEASE_STEP):
        step = ids[pos:pos + RELEASE_STEP]
        try:
            release_jobs(opts.conn, step)
        except DisqueWriteError as e:
            if not finishing:
                raise
            # An earlier driver may have released these, and consumers acked
            # them since: a job nobody knows is not one to add again.
            log.warning("disquette: finishing the release of %s: %s", record.key.queue, e)
        if pos + len(step) < len(ids):
            progress = {"kind": "progress", "key": record.key.queue, "released": pos + len(step)}
            try:
                record.jobs[_add(client, record.key.queue, progress, opts)] = progress
            except DisqueError as e:   # a re-run then releases this step again: no harm
                log.warning("disquette: progress of %s not recorded: %s", record.key.queue, e)
            pause_at("mid-release", opts)


def _forget(client: Client, ids: Iterable[str]) -> None:
    ids = list(ids)
    if ids:
        delete_jobs(client, ids)


def commit_release(opts: WriteOptions, key: CommitKey, staged: list[str], added: list[str],
                   skipped: bool) -> None:
    """Spark's commit of a keyed write: release ``staged`` once, whatever
    earlier drivers did for the same key.  ``added``: every job this run's
    tasks wrote (deleted if an earlier run's record stands instead);
    ``skipped``: some task found a record and wrote nothing."""
    with opts.conn.client() as client:
        record = find(client, key, thorough=True)
        if record.done:
            log.info("disquette: %s was committed by an earlier run: nothing to release",
                     key.queue)
            _forget(client, added)
        elif record.head is not None:
            log.warning("disquette: finishing the release %s that an earlier driver began",
                        key.queue)
            _forget(client, added)      # tasks that did not see the record staged again
            _release(opts, client, record, _head_ids(client, record.head[1]), finishing=True)
            _add(client, key.queue, {"kind": "done", "key": key.queue}, opts)
        elif skipped:
            raise DisqueWriteError(
                f"disquette: tasks found the commit record {key.queue} that the driver "
                "cannot find now (nodes down?): not committing; run the query again")
        elif added:
            record = _begin(client, key, staged, added, opts)
            pause_at("before-release", opts)
            _release(opts, client, record, staged, finishing=False)
            _add(client, key.queue, {"kind": "done", "key": key.queue}, opts)
        _drop_release(client, record)
        _drop_previous(client, key)
    pause_at("after-release", opts)


def abort_release(opts: WriteOptions, key: CommitKey, added: list[str]) -> None:
    """Spark's abort of a keyed write (after its jobs were deleted): when the
    commit that failed was this run's (its head names this run), its record
    goes too, so that running the write again writes it afresh.  An earlier
    run's record stays: a re-run still finishes that release."""
    try:
        with opts.conn.client() as client:
            record = find(client, key, thorough=True)
            if record.head is not None and record.head[1].get("run") == _run_of(added):
                ids = list(record.jobs) + (record.head[1].get("parts") or [])
                log.warning("disquette: the commit of %s failed: deleting its record", key.queue)
                _forget(client, ids)
    except DisqueError as e:   # abort runs while something else already failed
        log.warning("disquette: the record %s stays (until its TTL): %s", key.queue, e)


def _drop_release(client: Client, record: Record) -> None:
    """Once done: delete the head, its ``ids`` jobs and the progress records
    (the ``done`` record alone answers a re-run)."""
    ids = [jid for jid, body in record.jobs.items() if body.get("kind") in ("release", "progress")]
    if record.head is not None:
        ids += record.head[1].get("parts") or []
    _forget(client, ids)


def _drop_previous(client: Client, key: CommitKey) -> None:
    """Spark asks for micro-batch N only once N - 1 is in its commit log, so
    the record of N - 1 can go."""
    prev = key.previous()
    if prev is None:
        return
    try:
        record = find(client, prev)
    except DisqueError as e:
        log.warning("disquette: the commit record %s stays until its TTL: %s", prev.queue, e)
        return
    ids = list(record.jobs)
    if record.head is not None:
        ids += record.head[1].get("parts") or []
    _forget(client, ids)


def pause_at(point: str, opts: WriteOptions) -> None:
    """The test hook (see ``PAUSE_ENV``)."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    for item in spec.split(","):
        where, _, queue = item.strip().partition("@")
        if where == point and (not queue or queue == opts.queue):
            log.warning("disquette: %s=%s: pausing the commit at %s", PAUSE_ENV, spec, point)
            time.sleep(PAUSE_SECONDS)
