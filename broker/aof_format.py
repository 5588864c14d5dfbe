"""The append-only file format and its loader, sans-IO (SPEC section 7).

Nothing here opens a file or reads a clock: the encoders return bytes, the
``Scanner`` and the ``Loader`` are fed bytes and told the time. server/aof.py
writes the bytes to the disk and server/aof_load.py reads them back (the
simulator's server/disk_aof.py writes them to a simulated disk);
server/check_aof.py uses the same Scanner to check and repair a file.

File layout
-----------
A 16-byte file header, then records, back to back::

    file header   8s magic  b"\\x89DSQAOF\\n"
                  u16 format version (1), u16 flags (0),
                  u32 CRC32C of the 12 bytes before it
    record        u32 payload length (>= 1)
                  u32 CRC32C of the payload
                  u32 CRC32C of the 8 bytes before it (guards the length)
                  payload: one type byte, then the body

All integers are little endian. Record types:

    J  job creations: msgpack of a column list (below); a batch of 16..1024 jobs
    j  job creations, a few (1..15): msgpack of a list of rows, one per job:
       [id, queue, body, state, flags, repl, etime, ctime, delay, retry, nacks,
        additional-deliveries, requeue-time, nodes-delivered (list or None)]
       and, when a job of the record has an IDEMPOTENCY key (ext), one more
       field in every row: the key or None
    D  deletions (evictions of any kind): job ids, 40 bytes each, back to back
    A  acknowledgements: job ids, as D
    R  deliveries of RETRY 0 jobs (never to be queued again): job ids, as D
    F  DEBUG FLUSHALL: no body
    E  (ext) held jobs released (ENQUEUE, here or on another holder): job ids, as D

A ``J`` body is a msgpack list of columns, one entry per job in each column::

    [ids, queue-names, queue-index, bodies, state, flags, repl, etime, ctime,
     delay, retry, nacks, additional-deliveries, requeue-time, nodes]

and, when a job of the batch has an IDEMPOTENCY key (ext), one more column:
the key or None per job. Records of jobs without keys keep the layout above.

``queue-names`` lists each distinct queue once and ``queue-index`` points into it
(0 when every job is in the first queue); an all-zero integer column is stored as
the integer 0; ``nodes`` is None or ``[node-id table, [index list or None per
job]]`` for nodes-delivered. Columns instead of one list per job make both sides
cheap: the writer gathers one attribute at a time, the loader lets msgpack's C
decoder build every id, body and integer and creates the Job objects with one
``map`` call. Rows cost less to write for the few jobs of a quiet event-loop turn.

What the writer guarantees and the loader relies on: records are appended in
the order things happened; a later J record for an id replaces the earlier one
(a rewrite may log a job twice); D/A/R records for unknown ids are ignored.

Damage
------
A *torn tail* (what a crash in the middle of a write leaves) is: fewer bytes
than a record header at the end of the file; a record whose header is valid but
whose payload runs past the end of the file; the last record of the file with a
valid header and a payload checksum mismatch (a write that did not fully reach
the disk); or only zero bytes from some record boundary to the end of the file
(a file system that grew the file but lost the data). The loader reports it
(``TornTail``) with the offset where the good data ends, and the caller
truncates it when ``aof-load-truncated`` allows. Anything else - a record header
checksum mismatch, a payload checksum mismatch with more data after it, a record
that does not decode - is corruption: ``CorruptAOF`` names the byte offset of
the record that failed, and the node refuses to start.
"""

from __future__ import annotations

import struct
from itertools import repeat

import msgpack
from crc32c import crc32c

from broker import lifecycle
from broker.job import ACKED, ACTIVE, FLAG_DELIVERED, FLAG_DUMMY_ACK, JOB_ID_LEN, QUEUED, SHARDS, Job, job_shard
from broker.job import FLAG_HELD, HELD
from broker.job import FLAG_KEY_ANSWERED  # (ext) kept by a load: see broker/lifecycle.py
from broker.records import (  # noqa: F401  (part of this module's interface)
    REC_ACK, REC_DEL, REC_DELIVERED, REC_FLUSHALL, REC_JOB_ROWS, REC_JOBS, RECORD_NAMES,
)
from broker.records import REC_RELEASED

MAGIC = b"\x89DSQAOF\n"
VERSION = 1
FILE_HEADER = struct.Struct("<8sHHI")
FILE_HEADER_SIZE = FILE_HEADER.size            # 16
REC_HEADER = struct.Struct("<III")
REC_HEADER_SIZE = REC_HEADER.size              # 12
_LEN_CRC = struct.Struct("<II")


MAX_JOBS_PER_RECORD = 1024
MIN_JOBS_FOR_COLUMNS = 16
MAX_BODY_BYTES_PER_RECORD = 8 * 1024 * 1024
MAX_IDS_PER_RECORD = 65536

# Flags that only describe an exchange in flight; a loaded job starts afresh.
_KEPT_FLAGS = FLAG_DELIVERED | FLAG_DUMMY_ACK | FLAG_HELD | FLAG_KEY_ANSWERED

SHARDS_COUNT = SHARDS
shard_of = job_shard        # the node's job shard of an id


# ----------------------------------------------------------------- encoding
def file_header(version: int = VERSION) -> bytes:
    head = struct.pack("<8sHH", MAGIC, version, 0)
    return head + struct.pack("<I", crc32c(head))


def encode_record(payload: bytes) -> bytes:
    head = _LEN_CRC.pack(len(payload), crc32c(payload))
    return head + struct.pack("<I", crc32c(head)) + payload


def _col(values: list):
    return values if any(values) else 0


def _encode_job_batch(jobs: list) -> bytes:
    qnames: dict = {}
    setq = qnames.setdefault
    qidx = [setq(j.queue, len(qnames)) for j in jobs]
    nodes = None
    if any(j.nodes_delivered for j in jobs):
        table: dict = {}
        sett = table.setdefault
        per = [[sett(n, len(table)) for n in j.nodes_delivered] if j.nodes_delivered else None
               for j in jobs]
        nodes = [list(table), per]
    cols = [
        [j.id for j in jobs],
        list(qnames),
        qidx if len(qnames) > 1 else 0,
        [j.body for j in jobs],
        [j.state for j in jobs],
        _col([j.flags for j in jobs]),
        [j.repl for j in jobs],
        [j.etime for j in jobs],
        [j.ctime for j in jobs],
        _col([j.delay for j in jobs]),
        _col([j.retry for j in jobs]),
        _col([j.nacks for j in jobs]),
        _col([j.additional_deliveries for j in jobs]),
        _col([j.requeue_time for j in jobs]),
        nodes,
    ]
    if any(j.idem_key is not None for j in jobs):
        cols.append([j.idem_key for j in jobs])
    return encode_record(b"J" + msgpack.packb(cols))


def _encode_job_rows(jobs: list) -> bytes:
    rows = [[j.id, j.queue, j.body, j.state, j.flags, j.repl, j.etime, j.ctime, j.delay,
             j.retry, j.nacks, j.additional_deliveries, j.requeue_time,
             list(j.nodes_delivered) if j.nodes_delivered else None] for j in jobs]
    if any(j.idem_key is not None for j in jobs):
        for row, j in zip(rows, jobs):
            row.append(j.idem_key)
    return encode_record(b"j" + msgpack.packb(rows))


def _encode_segment(jobs: list) -> bytes:
    if len(jobs) < MIN_JOBS_FOR_COLUMNS:
        return _encode_job_rows(jobs)
    return _encode_job_batch(jobs)


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


# ------------------------------------------------------------------ reading
class AOFError(Exception):
    """A problem with an AOF; ``offset`` is the byte offset it was found at."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at byte offset {offset}")
        self.offset = offset
        self.reason = reason


class CorruptAOF(AOFError):
    """Damage that is not a torn tail: the file cannot be loaded as is."""


class BadHeader(CorruptAOF):
    """Not a Disquette AOF, or a format version this code does not know."""


class TornTail:
    """The file ends inside its last record. Everything before ``offset`` is
    good; ``size - offset`` bytes after it are to be truncated."""

    def __init__(self, offset: int, size: int, reason: str) -> None:
        self.offset = offset
        self.size = size
        self.reason = reason

    def __str__(self) -> str:
        return (f"torn last record at byte offset {self.offset}: {self.reason} "
                f"({self.size - self.offset} bytes to truncate)")

    def __repr__(self) -> str:
        return f"<TornTail {self}>"


class Scanner:
    """Incremental record framing: ``feed(data)`` yields ``(offset, payload)`` for
    each complete, checksummed record (payload is a memoryview, valid until the
    next feed); ``finish()`` at the end of the file returns a TornTail or None.
    Raises CorruptAOF/BadHeader as soon as the damage is certain."""

    def __init__(self) -> None:
        self.buf = b""
        self.base = 0            # file offset of buf[0]
        self.header_ok = False
        self.version = None
        self.records = 0
        # A record bigger than what is buffered: chunks are kept aside until it is
        # complete, so a huge record is joined once, not once per chunk.
        self.need = 0
        self.parts: list = []
        self.parts_len = 0
        # Damage that is a torn tail if nothing but (zero) bytes follow:
        # (offset, reason, zeros_only)
        self.suspect = None

    @property
    def good_offset(self) -> int:
        """File offset just after the last good record (or the file header)."""
        return self.base

    def feed(self, data):
        if self.suspect is not None:
            self._feed_suspect(data)
            return
        if self.need:
            self.parts.append(data)
            self.parts_len += len(data)
            if self.parts_len < self.need:
                return
            data = b"".join(self.parts)
            self.need = 0
            self.parts = []
            self.parts_len = 0
        buf = self.buf + data if self.buf else bytes(data)
        self.buf = buf
        if not self.header_ok:
            if len(buf) < FILE_HEADER_SIZE:
                self._check_header_prefix(buf)
                return
            self._check_header(buf[:FILE_HEADER_SIZE])
            self.header_ok = True
            pos = FILE_HEADER_SIZE
        else:
            pos = 0
        mv = memoryview(buf)
        end_buf = len(buf)
        base = self.base
        unpack = REC_HEADER.unpack_from
        while end_buf - pos >= REC_HEADER_SIZE:
            length, pcrc, hcrc = unpack(buf, pos)
            if crc32c(mv[pos:pos + 8]) != hcrc:
                if buf.count(0, pos) == end_buf - pos:
                    self.suspect = (base + pos, "zero bytes instead of a record", True)
                    break
                raise CorruptAOF(base + pos, "record header checksum mismatch")
            if length == 0:
                raise CorruptAOF(base + pos, "empty record")
            end = pos + REC_HEADER_SIZE + length
            if end > end_buf:
                if end - end_buf > 1 << 20:
                    self.need = end - end_buf
                break
            payload = mv[pos + REC_HEADER_SIZE:end]
            if crc32c(payload) != pcrc:
                if end < end_buf:
                    raise CorruptAOF(base + pos, "record checksum mismatch")
                self.suspect = (base + pos, "record checksum mismatch", False)
                break
            self.records += 1
            yield base + pos, payload
            pos = end
        self.buf = buf[pos:]
        self.base = base + pos

    def _feed_suspect(self, data) -> None:
        offset, reason, zeros_only = self.suspect
        if not data:
            return
        if zeros_only and data.count(0) == len(data):
            return
        raise CorruptAOF(offset, reason)

    def _check_header_prefix(self, buf: bytes) -> None:
        n = min(len(buf), len(MAGIC))
        if buf[:n] != MAGIC[:n]:
            raise BadHeader(0, "not a Disquette AOF file (bad magic)")

    def _check_header(self, head: bytes) -> None:
        magic, version, _flags, crc = FILE_HEADER.unpack(head)
        if magic != MAGIC:
            raise BadHeader(0, "not a Disquette AOF file (bad magic)")
        if crc32c(head[:12]) != crc:
            raise CorruptAOF(0, "file header checksum mismatch")
        if version != VERSION:
            raise BadHeader(0, f"AOF format version {version} is not supported "
                               f"(this server reads version {VERSION})")
        self.version = version

    def finish(self):
        """End of file: None if the file ends on a record boundary, else TornTail."""
        if self.parts:
            self.buf += b"".join(self.parts)
            self.parts = []
        size = self.base + len(self.buf)
        if self.suspect is not None:
            offset, reason, _ = self.suspect
            return TornTail(offset, size, reason)
        if not self.header_ok:
            if not self.buf:
                return None          # an empty file is an empty AOF
            return TornTail(0, size, "incomplete file header")
        if not self.buf:
            return None
        if len(self.buf) < REC_HEADER_SIZE:
            return TornTail(self.base, size, f"incomplete record header "
                                             f"({len(self.buf)} of {REC_HEADER_SIZE} bytes)")
        length = REC_HEADER.unpack_from(self.buf, 0)[0]
        return TornTail(self.base, size, f"record of {length} bytes, only "
                                         f"{len(self.buf) - REC_HEADER_SIZE} present")


def decode_jobs(payload) -> list:
    """The columns of a J or j payload (type byte included): ids, queues, bodies,
    state, flags, repl, etime, ctime, delay, retry, nacks, additional-deliveries,
    requeue-time (lists, tuples or iterators; an all-zero column may be the int 0),
    nodes-delivered (None, or a list of node-id lists/None per job), and when the
    record has them the IDEMPOTENCY keys (a key or None per job)."""
    data = msgpack.unpackb(payload[1:])
    if payload[0] == REC_JOB_ROWS:
        if (not isinstance(data, list) or not data or len(data[0]) not in (14, 15)
                or any(len(r) != len(data[0]) for r in data)):
            raise ValueError("bad job rows layout")
        cols = list(zip(*data))
        nodes = cols[13]
        cols[13] = None if not any(nodes) else list(nodes)
        return cols
    if not isinstance(data, list) or len(data) not in (15, 16):
        raise ValueError("bad job record layout")
    ids = data[0]
    n = len(ids)
    qnames = data[1]
    data[1] = repeat(qnames[0], n) if data[2] == 0 else map(qnames.__getitem__, data[2])
    del data[2]
    nodes = data[13]
    if nodes is not None:
        table, per = nodes
        if len(per) != n:
            raise ValueError("column length mismatch")
        data[13] = [[table[i] for i in idx] if idx else None for idx in per]
    return data


def decode_ids(payload) -> list:
    body = bytes(payload[1:])
    if len(body) % JOB_ID_LEN:
        raise ValueError("id list length is not a multiple of 40")
    return [body[i:i + JOB_ID_LEN] for i in range(0, len(body), JOB_ID_LEN)]


def _column(v, n: int):
    if v == 0:
        return repeat(0, n)
    if len(v) != n:
        raise ValueError("column length mismatch")
    return v


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
    back held, with no timer but their TTL, until an E record releases them.

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
                if kind == REC_JOBS or kind == REC_JOB_ROWS:
                    self._apply_jobs(decode_jobs(payload))
                elif kind == REC_DEL:
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
        ids = cols[0]
        n = len(ids)
        queues = cols[1]
        bodies = cols[2]
        state = cols[3]
        etime = cols[6]
        ctime = cols[7]
        if len(bodies) != n or len(state) != n or len(etime) != n or len(ctime) != n:
            raise ValueError("column length mismatch")
        repl = _column(cols[5], n)
        delay = _column(cols[8], n)
        retry = _column(cols[9], n)
        requeue_time = _column(cols[12], n)
        etimes = self.etimes
        etime = [etimes.setdefault(e, e) for e in etime]
        has_acked = ACKED in state
        has_held = HELD in state        # (ext) held jobs come back held
        states = ([s if s == ACKED or s == HELD else ACTIVE for s in state]
                  if has_acked or has_held else repeat(ACTIVE, n))
        jobs = list(map(Job, ids, queues, bodies, states, repl, etime, ctime, delay, retry))
        if cols[4] != 0 and any(cols[4]):
            for j, v in zip(jobs, _column(cols[4], n)):
                j.flags = v & _KEPT_FLAGS
        if cols[10] != 0 and any(cols[10]):
            for j, v in zip(jobs, _column(cols[10], n)):
                j.nacks = v
        if cols[11] != 0 and any(cols[11]):
            for j, v in zip(jobs, _column(cols[11], n)):
                j.additional_deliveries = v
        nodes = cols[13]
        if nodes is not None:
            if len(nodes) != n:
                raise ValueError("column length mismatch")
            for j, nd in zip(jobs, nodes):
                if nd:
                    j.nodes_delivered = set(nd)
        if len(cols) > 14:
            keys = cols[14]
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
        self.jobs = 0           # job copies in J records
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
                    if kind == REC_JOBS or kind == REC_JOB_ROWS:
                        cols = decode_jobs(payload)
                        ids = cols[0]
                        n = len(ids)
                        if len(list(cols[1])) != n:
                            raise ValueError("column length mismatch")
                        for k in (2, 3, 6, 7):
                            if len(cols[k]) != n:
                                raise ValueError("column length mismatch")
                        if any(len(i) != JOB_ID_LEN for i in ids):
                            raise ValueError("bad job id length")
                        s.jobs += n
                        alive.update(ids)
                    elif kind in (REC_DEL, REC_ACK):
                        alive.difference_update(decode_ids(payload))
                    elif kind == REC_DELIVERED or kind == REC_RELEASED:
                        decode_ids(payload)
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
