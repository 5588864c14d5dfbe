"""The append-only file format and its loader, sans-IO (SPEC section 7).

Nothing here opens a file or reads a clock: the encoders return bytes, the
``Scanner`` and the ``Loader`` are fed bytes and told the time. server/aof.py
writes the bytes to the disk and server/aof_load.py reads them back (in the
simulator too, on a simulated disk); server/check_aof.py uses the same Scanner
to check and repair a file.

The file layout and the record types are disquette/aof_codec.py's (the byte-level
codec, shared with the job history's readers); this module encodes Job objects
into records and loads records into a node.

What the writer guarantees and the loader relies on: records are appended in
the order things happened; a later job record for an id replaces the earlier one
(a rewrite may log a job twice); D/A/R records for unknown ids are ignored.

Damage (disquette/aof_codec.py says what a torn tail is): the loader reports a
torn tail (``TornTail``) with the offset where the good data ends, and the
caller truncates it when ``aof-load-truncated`` allows; anything else is
corruption (``CorruptAOF``, with the byte offset of the record that failed),
and the node refuses to start.
"""

from __future__ import annotations

from itertools import repeat

from broker import lifecycle
from broker.job import (
    ACKED, ACTIVE, FLAG_DELIVERED, FLAG_DUMMY_ACK, JOB_ID_LEN, QUEUED, SHARDS, Job,
    job_shard, job_to_fields,
)
from broker.job import FLAG_HELD, HELD
from broker.job import FLAG_KEY_ANSWERED  # (ext) kept by a load: see broker/lifecycle.py
from disquette import job_record as field
from disquette.aof_codec import (  # noqa: F401  (part of this module's interface)
    FILE_HEADER, FILE_HEADER_SIZE, HISTORY_ONLY, JOB_RECORDS, MAGIC, READ_VERSIONS, REC_ACK,
    REC_DEL, REC_DELIVERED, REC_EXPIRED, REC_FLUSHALL, REC_GOT, REC_HEADER, REC_HEADER_SIZE,
    REC_JOB_ROWS, REC_JOB_ROWS_V2, REC_JOBS, REC_JOBS_V2, REC_NACK, REC_RELEASED, REC_REQUEUE,
    REC_TIME, RECORD_NAMES, VERSION, AOFError,
    BadHeader, CorruptAOF, Scanner, TornTail, decode_ids, decode_jobs, decode_time,
    encode_job_columns, encode_job_rows, encode_record, encode_time, file_header,
)
from disquette.aof_codec import column as _column


MAX_JOBS_PER_RECORD = 1024
MIN_JOBS_FOR_COLUMNS = 16
MAX_BODY_BYTES_PER_RECORD = 8 * 1024 * 1024
MAX_IDS_PER_RECORD = 65536

# Flags that only describe an exchange in flight; a loaded job starts afresh.
_KEPT_FLAGS = FLAG_DELIVERED | FLAG_DUMMY_ACK | FLAG_HELD | FLAG_KEY_ANSWERED

SHARDS_COUNT = SHARDS
shard_of = job_shard        # the node's job shard of an id


# ----------------------------------------------------------------- encoding
def _encode_segment(jobs: list) -> bytes:
    records = list(map(job_to_fields, jobs))
    if len(jobs) < MIN_JOBS_FOR_COLUMNS:
        return encode_job_rows(records)
    return encode_job_columns(records)


def encode_jobs(jobs: list) -> bytes:
    """Job records for these jobs: rows for a few, columns for more (several
    records when there are many or big bodies)."""
    if len(jobs) <= 64:
        return _encode_segment(jobs)
    out = []
    start = 0
    size = 0
    for i, j in enumerate(jobs):
        size += len(j.body)
        if i - start >= MAX_JOBS_PER_RECORD or size > MAX_BODY_BYTES_PER_RECORD:
            if i > start:
                out.append(_encode_segment(jobs[start:i]))
            start = i
            size = len(j.body)
    out.append(_encode_segment(jobs[start:]))
    return b"".join(out)


def encode_ids(kind: int, ids: list) -> bytes:
    """D, A or R records for these job ids."""
    prefix = bytes((kind,))
    if len(ids) <= MAX_IDS_PER_RECORD:
        return encode_record(prefix + b"".join(ids))
    return b"".join(encode_record(prefix + b"".join(ids[i:i + MAX_IDS_PER_RECORD]))
                    for i in range(0, len(ids), MAX_IDS_PER_RECORD))


def encode_flushall() -> bytes:
    return encode_record(b"F")


# Items queued by the writer between flushes: a Job (creation, encoded when
# flushed so that it carries the job's latest state), or (kind, id).
def encode_items(items: list) -> bytes:
    """Encode the writer's pending items in order, batching runs of one kind."""
    out = []
    run: list = []
    run_kind = None
    for it in items:
        if it.__class__ is Job:
            kind = REC_JOBS
            value = it
        else:
            kind, value = it
        if kind != run_kind:
            if run:
                out.append(_encode_run(run_kind, run))
            run = []
            run_kind = kind
        run.append(value)
    if run:
        out.append(_encode_run(run_kind, run))
    return b"".join(out)


def _encode_run(kind: int, values: list) -> bytes:
    if kind == REC_JOBS:
        return encode_jobs(values)
    if kind == REC_FLUSHALL:
        return encode_flushall() * len(values)
    return encode_ids(kind, values)


def item_shard(item) -> int | None:
    """The job shard a pending item is about (None for FLUSHALL)."""
    if item.__class__ is Job:
        return shard_of(item.id)
    if item[0] == REC_FLUSHALL:
        return None
    return shard_of(item[1])


# ------------------------------------------------------------------ loading
class Loader:
    """Rebuilds a node's jobs from AOF bytes (SPEC section 7).

    ``feed(data)`` any number of times, then ``finish()`` (returns a TornTail or
    None). Loaded jobs come back ``active`` with their requeue timers: the one
    recorded if it is still ahead, else ``now + retry``. RETRY 0 jobs get no
    requeue timer (they are never queued again by a load), except a DELAY not yet
    elapsed. With ``enqueue_once`` (aof-enqueue-jobs-once) jobs recorded as queued
    go straight back into their queues, except RETRY 0 jobs already delivered.
    Acked jobs are not live: dropped, unless other nodes hold a copy (the cluster
    then finishes the ack GC). Expired jobs are dropped. (ext) Held jobs come
    back held, with no timer but their TTL, until a U record releases them.

    The loader decodes; broker/lifecycle.py's ``restore*`` functions register
    (a whole record's jobs in one call: one Python call per job saved is what
    makes a million jobs load in a couple of seconds); nothing is logged back.
    """

    def __init__(self, node, now: int, enqueue_once: bool = False) -> None:
        self.node = node
        self.now = now
        self.enqueue_once = enqueue_once
        self.scanner = Scanner()
        self.to_queue: list = []
        self.keyed: list = []       # (ext) jobs with an IDEMPOTENCY key, mapped at the end
        self.etimes: dict = {}      # int interning: jobs share expire-time objects
        self.stats = {"records": 0, "jobs": 0, "deleted": 0, "acked": 0,
                      "expired": 0, "flushall": 0}

    @property
    def good_offset(self) -> int:
        return self.scanner.good_offset

    def feed(self, data) -> None:
        for offset, payload in self.scanner.feed(data):
            kind = payload[0]
            try:
                if kind in JOB_RECORDS:
                    self._apply_jobs(decode_jobs(payload))
                elif kind in HISTORY_ONLY:
                    pass        # the history's records (aof-history): not a node's state
                elif kind == REC_DEL or kind == REC_EXPIRED:
                    self._apply_del(decode_ids(payload))
                elif kind == REC_ACK:
                    self._apply_ack(decode_ids(payload))
                elif kind == REC_DELIVERED:
                    self._apply_delivered(decode_ids(payload))
                elif kind == REC_FLUSHALL:
                    self._apply_flushall()
                elif kind == REC_RELEASED:
                    self._apply_released(decode_ids(payload))
                else:
                    raise ValueError(f"unknown record type {kind!r}")
            except CorruptAOF:
                raise
            except Exception as e:
                raise CorruptAOF(offset, f"undecodable record ({e.__class__.__name__}: {e})") from None
            self.stats["records"] += 1

    def finish(self):
        torn = self.scanner.finish()
        self._install()
        return torn

    # -- records: decoded here, applied by broker/lifecycle.py -----------------
    def _apply_jobs(self, cols: list) -> None:
        now = self.now
        ids = cols[field.ID]
        n = len(ids)
        queues = cols[field.QUEUE]
        bodies = cols[field.BODY]
        state = cols[field.STATE]
        etime = cols[field.ETIME]
        ctime = cols[field.CTIME]
        if len(bodies) != n or len(state) != n or len(etime) != n or len(ctime) != n:
            raise ValueError("column length mismatch")
        repl = _column(cols[field.REPLICATE], n)
        if (cols[field.REPLICATE] != 0 and n
                and not 0 <= min(repl) <= max(repl) <= field.REPLICATE_MAX):
            raise ValueError("REPLICATE out of range")     # a narrow C int of the Job
        delay = _column(cols[field.DELAY], n)
        retry = _column(cols[field.RETRY], n)
        requeue_time = _column(cols[field.REQUEUE_TIME], n)
        etimes = self.etimes
        etime = [etimes.setdefault(e, e) for e in etime]
        has_acked = ACKED in state
        has_held = HELD in state        # (ext) held jobs come back held
        states = ([s if s == ACKED or s == HELD else ACTIVE for s in state]
                  if has_acked or has_held else repeat(ACTIVE, n))
        jobs = list(map(Job, ids, queues, bodies, states, repl, etime, ctime, delay, retry))
        flags = cols[field.FLAGS]
        if flags != 0 and any(flags):
            for j, v in zip(jobs, _column(flags, n)):
                j.flags = v & _KEPT_FLAGS
                if v & FLAG_HELD and j.state == ACTIVE:
                    # (ext) Logged while its ADDJOB ... HOLD still waited for
                    # copies (wait-repl): held, as its copies are.
                    j.state = HELD
                    has_held = True
        nacks = cols[field.NACKS]
        if nacks != 0 and any(nacks):
            for j, v in zip(jobs, _column(nacks, n)):
                j.nacks = v
        additional = cols[field.ADDITIONAL_DELIVERIES]
        if additional != 0 and any(additional):
            for j, v in zip(jobs, _column(additional, n)):
                j.additional_deliveries = v
        nodes = cols[field.NODES_DELIVERED]
        if nodes is not None:
            if len(nodes) != n:
                raise ValueError("column length mismatch")
            holders = self.node.holders
            for j, nd in zip(jobs, nodes):
                if nd:
                    j.nodes_delivered = holders.of(nd)
        if len(cols) > field.IDEMPOTENCY_KEY:
            keys = cols[field.IDEMPOTENCY_KEY]
            if len(keys) != n:
                raise ValueError("column length mismatch")
            for j, k in zip(jobs, keys):
                if k is not None:
                    if type(k) is not bytes:
                        raise ValueError("bad idempotency key")
                    j.idem_key = k
                    self.keyed.append(j)
        if self.enqueue_once and QUEUED in state:
            self.to_queue.extend(j for j, s in zip(jobs, state) if s == QUEUED)
        plain = (nodes is None and not has_acked and not has_held
                 and (not n or min(etime) > now))
        if not plain:
            self.stats["acked"] += sum(1 for j in jobs if j.state == ACKED and j.etime > now)
        self.stats["expired"] += lifecycle.restore(self.node, jobs, requeue_time, now, plain)
        self.stats["jobs"] += n

    def _apply_del(self, ids: list) -> None:
        for jid in ids:
            if lifecycle.restore_delete(self.node, jid):
                self.stats["deleted"] += 1

    def _apply_ack(self, ids: list) -> None:
        for jid in ids:
            if lifecycle.restore_ack(self.node, jid, self.now):
                self.stats["acked"] += 1

    def _apply_delivered(self, ids: list) -> None:
        for jid in ids:
            lifecycle.restore_delivered(self.node, jid)

    def _apply_released(self, ids: list) -> None:
        for jid in ids:
            job = lifecycle.restore_released(self.node, jid, self.now)
            if job is not None and self.enqueue_once and not job.delay:
                self.to_queue.append(job)   # released: queued, as a job added unheld

    def _apply_flushall(self) -> None:
        lifecycle.flush_all(self.node, record=False)
        self.to_queue.clear()
        self.stats["flushall"] += 1

    def _install(self) -> None:
        if self.to_queue:
            lifecycle.restore_queued(self.node, self.to_queue, self.now)
            self.to_queue = []
        # (ext) The keys of the jobs this load kept (not of jobs deleted later
        # in the log: a failed add's copies among them).
        for job in self.keyed:
            if self.node.is_registered(job):
                lifecycle.remember_key(self.node, job, self.now)
        self.keyed = []
        self.etimes = {}


def load_bytes(node, data: bytes, now: int, enqueue_once: bool = False):
    """Load a whole AOF image into ``node``; returns (loader, torn tail or None)."""
    loader = Loader(node, now, enqueue_once)
    loader.feed(data)
    return loader, loader.finish()


class Summary:
    """What ``check`` found: counts, the format version, the damage if any."""

    def __init__(self) -> None:
        self.size = 0
        self.version = None
        self.records = {k: 0 for k in RECORD_NAMES}
        self.jobs = 0           # job copies in job records
        self.live = 0           # ids alive at the end of the log
        self.good_offset = 0
        self.torn = None
        self.corrupt = None


def check_chunks(chunks) -> Summary:
    """Validate an AOF read as a sequence of byte chunks (decoding every record,
    tracking which ids are alive) without a node: the check tool's engine."""
    s = Summary()
    sc = Scanner()
    alive: set = set()
    try:
        for chunk in chunks:
            s.size += len(chunk)
            for offset, payload in sc.feed(chunk):
                kind = payload[0]
                try:
                    if kind in JOB_RECORDS:
                        cols = decode_jobs(payload)
                        ids = cols[field.ID]
                        n = len(ids)
                        if len(list(cols[field.QUEUE])) != n:
                            raise ValueError("column length mismatch")
                        for k in (field.BODY, field.STATE, field.ETIME, field.CTIME):
                            if len(cols[k]) != n:
                                raise ValueError("column length mismatch")
                        if any(len(i) != JOB_ID_LEN for i in ids):
                            raise ValueError("bad job id length")
                        s.jobs += n
                        alive.update(ids)
                    elif kind in (REC_DEL, REC_ACK, REC_EXPIRED):
                        alive.difference_update(decode_ids(payload))
                    elif kind in (REC_DELIVERED, REC_GOT, REC_NACK, REC_REQUEUE, REC_RELEASED):
                        decode_ids(payload)
                    elif kind == REC_TIME:
                        decode_time(payload)
                    elif kind == REC_FLUSHALL:
                        alive.clear()
                    else:
                        raise ValueError(f"unknown record type {kind!r}")
                except Exception as e:
                    raise CorruptAOF(offset, f"undecodable record ({e})") from None
                s.records[kind] += 1
            s.version = sc.version
        s.torn = sc.finish()
    except CorruptAOF as e:
        s.corrupt = e
    s.version = sc.version
    s.good_offset = sc.good_offset
    s.live = len(alive)
    return s
