"""The AOF's bytes, without a job object or a file: the file header, record
framing and checksums, and a job record's rows and columns, both ways (SPEC
section 7).

Shared by the node (broker/aof_format.py: its records from Job objects, and
the loader) and by readers of the job history that are not nodes (the
``disquette-aof`` Spark data source, disquette/spark/aof_source.py): one copy
of the format. Nothing here opens a file or reads a clock.

File layout
-----------
A 16-byte file header, then records, back to back::

    file header   8s magic  b"\x89DSQAOF\n"
                  u16 format version (3; versions 1 and 2 load too),
                  u16 flags (0),
                  u32 CRC32C of the 12 bytes before it
    record        u32 payload length (>= 1)
                  u32 CRC32C of the payload
                  u32 CRC32C of the 8 bytes before it (guards the length)
                  payload: one type byte, then the body

All integers are little endian. Record types:

    C  job creations: msgpack of a column list (below); a batch of 16..1024 jobs
    c  job creations, a few (1..15): msgpack of a list of rows, one per job:
       the job's record (disquette/job_record.py, as the bus carries it):
       [id, queue, body, state, flags, replicate, etime, ctime, delay, retry,
        nacks, additional-deliveries, nodes-delivered (list or None),
        requeue-time]
       and, when a job of the record has an IDEMPOTENCY key (ext), one more
       field in every row: the key or None
    J, j  the same as C and c with the fields in ORDER_V2 (requeue-time
       before nodes-delivered): what versions 1 and 2 wrote; still read
    D  deletions (evictions of any kind): job ids, 40 bytes each, back to back
    A  acknowledgements: job ids, as D
    R  deliveries of RETRY 0 jobs (never to be queued again): job ids, as D
    F  DEBUG FLUSHALL: no body
    U  (ext) held jobs released (ENQUEUE, here or on another holder): job ids, as D

With ``aof-history yes`` (ext) the node also writes the records below, for
whoever reads the job history (disquette/spark/aof_source.py); the node's
loader needs none of them but E (an eviction, as D) and skips the others
without decoding them:

    T  time mark: u64 unix time in ms; the records after it were written at
       that time (one per write, before its records, when the ms changed)
    E  expirations (TTL): job ids, as D (written instead of D)
    G  deliveries (GETJOB) of jobs with RETRY > 0: job ids, as D (RETRY 0
       deliveries are R records, written with or without the history)
    N  NACKs: job ids, as D
    Q  requeues (the RETRY timer, or ENQUEUE, put the job back in its queue):
       job ids, as D

Version 2 added T, E, G, N and Q. Version 3 writes a job's fields in the
record's order (C and c instead of J and j); its other records are version
2's. A file of an older version gets this version's header, in place, when a
node opens it for appending (server/aof_files.py upgrade_header: an older
server then refuses it by its version instead of calling it corrupt). Its
records stay as they were, and each job record says its layout by its type
byte: J and j records before the upgrade, C and c after it, read each in its
own order (also by a reader that starts in the middle of the file, as the
Spark reader's partitions do, without the file header).

A ``C`` body is a msgpack list of columns, one entry per job in each column,
in the record's order, the queue as two columns::

    [ids, queue-names, queue-index, bodies, state, flags, replicate, etime,
     ctime, delay, retry, nacks, additional-deliveries, nodes, requeue-time]

and, when a job of the batch has an IDEMPOTENCY key (ext), one more column:
the key or None per job. Records of jobs without keys keep the layout above.
A ``J`` body is the same with the columns in ORDER_V2 (requeue-time before
nodes).

``queue-names`` lists each distinct queue once and ``queue-index`` points into it
(0 when every job is in the first queue); an all-zero column of ZERO_COLUMNS is
stored as the integer 0; ``nodes`` is None or ``[node-id table, [index list or
None per job]]`` for nodes-delivered. Columns instead of one list per job make
both sides cheap: the loader lets msgpack's C decoder build every id, body and
integer and creates the Job objects with one ``map`` call. Rows cost less to
write for the few jobs of a quiet event-loop turn.

Records are appended in the order things happened (what broker/aof_format.py's
loader relies on, and what a history read shows).

Damage
------
A *torn tail* (what a crash in the middle of a write leaves) is: fewer bytes
than a record header at the end of the file; a record whose header is valid but
whose payload runs past the end of the file; the last record of the file with a
valid header and a payload checksum mismatch (a write that did not fully reach
the disk); or only zero bytes from some record boundary to the end of the file
(a file system that grew the file but lost the data). The ``Scanner`` reports
it (``TornTail``) with the offset where the good data ends. Anything else - a
record header checksum mismatch, a payload checksum mismatch with more data
after it, a record that does not decode - is corruption: ``CorruptAOF`` names
the byte offset of the record that failed.
"""

from __future__ import annotations

import struct
from itertools import repeat

import msgpack
from crc32c import crc32c

from . import job_record as field

REC_JOBS = 0x43         # 'C'  job creations (a batch, in columns)
REC_JOB_ROWS = 0x63     # 'c'  job creations (a few, in rows)
REC_JOBS_V2 = 0x4A      # 'J'  job creations in columns, the fields in ORDER_V2
REC_JOB_ROWS_V2 = 0x6A  # 'j'  job creations in rows, the fields in ORDER_V2
REC_DEL = 0x44          # 'D'  deletions (evictions of any kind)
REC_ACK = 0x41          # 'A'  acknowledgements
REC_DELIVERED = 0x52    # 'R'  RETRY 0 jobs delivered: never to be queued again
REC_FLUSHALL = 0x46     # 'F'  DEBUG FLUSHALL
REC_RELEASED = 0x55     # 'U'  (ext) held jobs released (ENQUEUE here or on another holder)
# The history (aof-history yes): the loader applies E as D and skips the rest.
REC_TIME = 0x54         # 'T'  time mark (unix ms)
REC_EXPIRED = 0x45      # 'E'  expirations (TTL), instead of D
REC_GOT = 0x47          # 'G'  deliveries of RETRY > 0 jobs
REC_NACK = 0x4E         # 'N'  NACKs
REC_REQUEUE = 0x51      # 'Q'  requeues (RETRY timer, ENQUEUE)
RECORD_NAMES = {REC_JOBS: "job batches", REC_JOB_ROWS: "job rows",
                REC_JOBS_V2: "job batches (v2)", REC_JOB_ROWS_V2: "job rows (v2)",
                REC_DEL: "deletions",
                REC_ACK: "acks", REC_DELIVERED: "deliveries", REC_FLUSHALL: "flushall",
                REC_TIME: "time marks", REC_EXPIRED: "expirations",
                REC_GOT: "deliveries (history)", REC_NACK: "nacks", REC_REQUEUE: "requeues",
                REC_RELEASED: "releases"}
HISTORY_ONLY = (REC_TIME, REC_GOT, REC_NACK, REC_REQUEUE)   # what a loader may skip
JOB_RECORDS = (REC_JOBS, REC_JOB_ROWS, REC_JOBS_V2, REC_JOB_ROWS_V2)   # decode_jobs's

MAGIC = b"\x89DSQAOF\n"
VERSION = 3                     # what is written
READ_VERSIONS = (1, 2, 3)       # what loads
FILE_HEADER = struct.Struct("<8sHHI")
FILE_HEADER_SIZE = FILE_HEADER.size            # 16
REC_HEADER = struct.Struct("<III")
REC_HEADER_SIZE = REC_HEADER.size              # 12
_LEN_CRC = struct.Struct("<II")
_TIME = struct.Struct("<Q")
ID_LEN = 40                     # a job id's length (broker/job.py JOB_ID_LEN)

# The fields of a job in J and j records (format versions 1 and 2, and the
# records of a file upgraded from one): the record's (disquette/job_record.py)
# with the requeue time before the holders. By name: each field's position there.
ORDER_V2 = ("id", "queue", "body", "state", "flags", "replicate", "etime", "ctime", "delay",
            "retry", "nacks", "additional_deliveries", "requeue_time", "nodes_delivered",
            "idempotency_key")
_FROM_V2 = tuple(ORDER_V2.index(name) for name in field.NAMES)
_TO_V2 = tuple(field.NAMES.index(name) for name in ORDER_V2)
# The integer columns a batch stores as the int 0 when every job's value is 0.
ZERO_COLUMNS = (field.FLAGS, field.DELAY, field.RETRY, field.NACKS, field.ADDITIONAL_DELIVERIES,
                field.REQUEUE_TIME)


# ----------------------------------------------------------------- encoding
def file_header(version: int = VERSION) -> bytes:
    head = struct.pack("<8sHH", MAGIC, version, 0)
    return head + struct.pack("<I", crc32c(head))


def encode_record(payload: bytes) -> bytes:
    head = _LEN_CRC.pack(len(payload), crc32c(payload))
    return head + struct.pack("<I", crc32c(head)) + payload


def encode_job_rows(records: list, version: int = VERSION) -> bytes:
    """A c record of these jobs' records (disquette/job_record.py's lists, as
    broker/job.py job_to_fields makes them): one row each; when one has an
    IDEMPOTENCY key, every row has the key field (None for the others).
    ``version`` 2: a j record, the fields in ORDER_V2 (disquette-check-aof
    --to-version 2)."""
    rows = _same_length(records)
    if version < 3:
        return encode_record(b"j" + msgpack.packb([[r[i] for i in _TO_V2[:len(r)]]
                                                   for r in rows]))
    return encode_record(b"c" + msgpack.packb(rows))


def encode_job_columns(records: list, version: int = VERSION) -> bytes:
    """A C record of these jobs' records (as encode_job_rows's): a column per
    field (see the module's docstring); ``version`` 2: a J record."""
    cols: list = list(zip(*_same_length(records)))
    qnames: dict = {}
    setq = qnames.setdefault
    qidx = [setq(q, len(qnames)) for q in cols[field.QUEUE]]
    holders = cols[field.NODES_DELIVERED]
    if any(holders):
        table: dict = {}
        sett = table.setdefault
        per = [[sett(n, len(table)) for n in h] if h else None for h in holders]
        cols[field.NODES_DELIVERED] = [list(table), per]
    else:
        cols[field.NODES_DELIVERED] = None
    for i in ZERO_COLUMNS:
        if not any(cols[i]):
            cols[i] = 0
    if version < 3:
        cols = [cols[i] for i in _TO_V2[:len(cols)]]
    cols[field.QUEUE:field.QUEUE + 1] = [list(qnames), qidx if len(qnames) > 1 else 0]
    return encode_record((b"C" if version >= 3 else b"J") + msgpack.packb(cols))


def _same_length(records: list) -> list:
    """The records, each with the key field if one has it."""
    if all(len(r) == field.FIELDS for r in records):
        return records
    return [r if len(r) > field.FIELDS else [*r, None] for r in records]


def encode_time(ms: int) -> bytes:
    """A T record: what follows was written at ``ms`` (unix time)."""
    return encode_record(b"T" + _TIME.pack(ms))


# ------------------------------------------------------------------ framing
def record_length(buf, pos: int) -> int:
    """The payload length of the record header at ``pos`` in ``buf`` (12 bytes
    there), or -1 when its checksum does not match (not a record boundary, or
    damage)."""
    length, _pcrc, hcrc = REC_HEADER.unpack_from(buf, pos)
    if length == 0 or crc32c(memoryview(buf)[pos:pos + 8]) != hcrc:
        return -1
    return length


def whole_record_at(buf, pos: int) -> int:
    """The offset just past the record at ``pos`` if a whole record with valid
    checksums starts there, else -1."""
    if len(buf) - pos < REC_HEADER_SIZE:
        return -1
    length = record_length(buf, pos)
    end = pos + REC_HEADER_SIZE + length
    if length < 0 or end > len(buf):
        return -1
    pcrc = REC_HEADER.unpack_from(buf, pos)[1]
    if crc32c(memoryview(buf)[pos + REC_HEADER_SIZE:end]) != pcrc:
        return -1
    return end


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

    def __init__(self, start: int = 0) -> None:
        self.buf = b""
        # file offset of buf[0]; a reader may start at a record boundary
        # ``start`` past the file header (a partition of the file).
        self.base = start
        self.header_ok = start > 0
        self.version: int | None = None
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
        if version not in READ_VERSIONS:
            raise BadHeader(0, f"AOF format version {version} is not supported "
                               f"(this code reads versions {READ_VERSIONS[0]} to {VERSION})")
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
    """The columns of a job record (a payload of JOB_RECORDS, type byte
    included), one per field of the record in its order (disquette/job_record.py,
    whatever the record's): lists, tuples or iterators, an all-zero column may
    be the int 0; nodes-delivered is None or a list of node-id lists/None per
    job; and when the record has them the IDEMPOTENCY keys (ext: a key or None
    per job)."""
    kind = payload[0]
    data = msgpack.unpackb(payload[1:])
    if kind == REC_JOB_ROWS or kind == REC_JOB_ROWS_V2:
        if (not isinstance(data, list) or not data
                or len(data[0]) not in (field.FIELDS, field.KEYED_FIELDS)
                or any(len(r) != len(data[0]) for r in data)):
            raise ValueError("bad job rows layout")
        cols: list = list(zip(*data))
        if kind == REC_JOB_ROWS_V2:
            cols = [cols[i] for i in _FROM_V2[:len(cols)]]
        holders = cols[field.NODES_DELIVERED]
        cols[field.NODES_DELIVERED] = None if not any(holders) else list(holders)
        return cols
    # The queue is two columns (names, index), the first after the ids in
    # either order.
    if not isinstance(data, list) or len(data) not in (field.FIELDS + 1, field.KEYED_FIELDS + 1):
        raise ValueError("bad job record layout")
    n = len(data[field.ID])
    qnames = data[field.QUEUE]
    qidx = data[field.QUEUE + 1]
    data[field.QUEUE:field.QUEUE + 2] = [repeat(qnames[0], n) if qidx == 0
                                         else map(qnames.__getitem__, qidx)]
    if kind == REC_JOBS_V2:
        data = [data[i] for i in _FROM_V2[:len(data)]]
    nodes = data[field.NODES_DELIVERED]
    if nodes is not None:
        table, per = nodes
        if len(per) != n:
            raise ValueError("column length mismatch")
        data[field.NODES_DELIVERED] = [[table[i] for i in idx] if idx else None for idx in per]
    return data


def decode_ids(payload) -> list:
    """The job ids of a D, A, R, E, G, N, Q or U payload (type byte included)."""
    body = bytes(payload[1:])
    if len(body) % ID_LEN:
        raise ValueError("id list length is not a multiple of 40")
    return [body[i:i + ID_LEN] for i in range(0, len(body), ID_LEN)]


def decode_time(payload) -> int:
    """The unix time in ms of a T payload (type byte included)."""
    if len(payload) != 9:
        raise ValueError("time mark of the wrong size")
    return _TIME.unpack_from(payload, 1)[0]


def column(v, n: int):
    """A column of n values: an all-zero column is stored as the int 0."""
    if v == 0:
        return repeat(0, n)
    if len(v) != n:
        raise ValueError("column length mismatch")
    return v


