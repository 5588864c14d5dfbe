"""One task of a ``disquette-aof`` read: the records of a file range as rows,
in Arrow record batches (Spark takes them as they are).

One row per job of a job record (``add``), per id of an id record
(``deliver``, ``nack``, ``requeue``, ``ack``, ``delete``, ``expire``), one
per ``flushall``, and, when damage is skipped, one ``damaged`` row per
damaged stretch (``offset`` where it starts, ``error`` why). Time marks give
the ``time`` of the rows after them. The records are decoded by the AOF codec
the node loads with (disquette/aof_codec.py), checksums verified.
"""

from __future__ import annotations

import os
from itertools import accumulate, repeat
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from disquette import job_record as field
from disquette.aof_codec import (
    ID_LEN, JOB_RECORDS, REC_ACK, REC_DEL, REC_DELIVERED, REC_EXPIRED, REC_FLUSHALL, REC_GOT,
    REC_HEADER_SIZE, REC_NACK, REC_RELEASED, REC_REQUEUE, REC_TIME, CorruptAOF,
    Scanner, decode_ids, decode_jobs, decode_time, record_length,
)

from .aof_files import AOFReadError, FileRange, resync

READ_CHUNK = 4 << 20
BATCH_ROWS = 1 << 16            # rows per Arrow batch at most...
BATCH_BYTES = 256 << 20         # ...and body bytes (offsets are 32-bit)

# The record types, as the ``record`` column names them.
# ("release": a held job released, ext ADDJOB ... HOLD.)
RECORDS = ("add", "deliver", "nack", "requeue", "ack", "delete", "expire", "flushall", "damaged",
           "release")
(_ADD, _DELIVER, _NACK, _REQUEUE, _ACK, _DELETE, _EXPIRE, _FLUSHALL, _DAMAGED,
 _RELEASE) = range(len(RECORDS))
ID_RECORD = {REC_DELIVERED: _DELIVER, REC_GOT: _DELIVER, REC_NACK: _NACK,
             REC_REQUEUE: _REQUEUE, REC_ACK: _ACK, REC_DEL: _DELETE, REC_EXPIRED: _EXPIRE,
             REC_RELEASED: _RELEASE}
# A job's state as its record stores it (broker/job.py's codes; a code this
# reader does not know shows as its number).
STATES = ("wait-repl", "active", "queued", "acked", "held")
STATE_NAMES = pa.array([*STATES, *map(str, range(len(STATES), 128))], pa.string())
RECORD_NAMES = pa.array(RECORDS, pa.string())

TIMESTAMP = pa.timestamp("us", tz="UTC")

# The job's integer fields a job record gives, as columns: (name, field of the
# record (disquette/job_record.py), Arrow type). A new one is one more field here.
JOB_INTS = tuple((field.NAMES[i], i, pa.int32())
                 for i in (field.DELAY, field.RETRY, field.REPLICATE, field.NACKS,
                           field.ADDITIONAL_DELIVERIES))


def arrow_schema(binary_body: bool) -> pa.Schema:
    return pa.schema([
        ("time", TIMESTAMP), ("node", pa.string()), ("record", pa.string()),
        ("id", pa.string()), ("queue", pa.string()),
        ("body", pa.binary() if binary_body else pa.string()),
        ("state", pa.string()), ("ctime", TIMESTAMP), ("expires", TIMESTAMP),
        *((name, t) for name, _, t in JOB_INTS),
        ("file", pa.string()), ("offset", pa.int64()), ("error", pa.string()),
    ])


def _ints(values: list, dtype: Any) -> pa.Array:
    """Python ints as an Arrow array, through numpy (several times faster than
    pa.array over a list)."""
    return pa.array(np.fromiter(values, dtype, len(values)))


def _bytes_array(values: list, typ: pa.DataType, width: int = 0) -> pa.Array:
    """bytes values as a binary/string array, built from one joined buffer and
    its offsets (pa.array over bytes objects is several times slower);
    ``width``: every value is that long (job ids)."""
    n = len(values)
    data = b"".join(values)
    if width and len(data) == width * n:
        offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    else:
        offsets = np.empty(n + 1, np.int32)
        offsets[0] = 0
        np.cumsum(np.fromiter(map(len, values), np.int32, n), out=offsets[1:])
    arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                 pa.py_buffer(data)])
    if typ == pa.string():
        try:
            arr = arr.cast(pa.string())
        except pa.ArrowInvalid:        # not UTF-8: replaced, as bodyType=string says
            arr = pa.array([v.decode("utf-8", "replace") for v in values], pa.string())
    return arr


def _ms(values: list) -> pa.Array:
    """Unix times in ms (None: unknown) as timestamps."""
    arr = pa.array(values, pa.int64()) if None in values else _ints(values, np.int64)
    return pc.multiply(arr, 1000).cast(TIMESTAMP)


class Rows:
    """The columns of the rows decoded so far (lists), made a batch by ``take``.

    Rows that are not a job record's (id records, events) fill the job's
    columns with zeros, masked as nulls when the batch is made."""

    def __init__(self, fr: FileRange, binary_body: bool) -> None:
        self.fr = fr
        self.schema = arrow_schema(binary_body)
        self.body_type = pa.binary() if binary_body else pa.string()
        self._clear()

    def _clear(self) -> None:
        self.n = 0
        self.bytes = 0
        self.time: list = []
        self.record: list = []
        self.id: list = []
        self.queue: list = []
        self.body: list = []
        self.state: list = []
        self.ctime: list = []
        self.etime: list = []
        self.ints: list[list] = [[] for _ in JOB_INTS]
        self.offset: list = []
        self.no_job: list[tuple[int, int]] = []   # (first row, rows) without job fields
        self.errors: dict[int, str] = {}          # row -> why (damaged rows only)

    @property
    def full(self) -> bool:
        return self.n >= BATCH_ROWS or self.bytes >= BATCH_BYTES

    def add_jobs(self, time: int | None, offset: int, cols: list) -> None:
        ids = cols[field.ID]
        n = len(ids)
        self.n += n
        self.time.extend(repeat(time, n))
        self.record.extend(repeat(_ADD, n))
        self.id.extend(ids)
        self.queue.extend(cols[field.QUEUE])
        bodies = cols[field.BODY]
        self.bytes += sum(map(len, bodies))
        self.body.extend(bodies)
        self.state.extend(cols[field.STATE])
        self.ctime.extend(cols[field.CTIME])
        self.etime.extend(cols[field.ETIME])
        for out, (_, index, _t) in zip(self.ints, JOB_INTS):
            v = cols[index]
            out.extend(repeat(0, n) if v == 0 else v)
        self.offset.extend(repeat(offset, n))

    def add_ids(self, time: int | None, offset: int, record: int, ids: list) -> None:
        self._add_other(time, offset, record, ids, None)

    def add_event(self, time: int | None, offset: int, record: int, error: str | None) -> None:
        self._add_other(time, offset, record, [b""], error)

    def _add_other(self, time: int | None, offset: int, record: int, ids: list,
                   error: str | None) -> None:
        n = len(ids)
        if error is not None:
            self.errors[self.n] = error
        self.no_job.append((self.n, n))
        self.n += n
        self.time.extend(repeat(time, n))
        self.record.extend(repeat(record, n))
        self.id.extend(ids)
        for col in (self.queue, self.body):
            col.extend(repeat(b"", n))
        for col in (self.state, self.ctime, self.etime, *self.ints):
            col.extend(repeat(0, n))
        self.offset.extend(repeat(offset, n))

    def _error_column(self) -> pa.Array:
        if not self.errors:
            return pa.nulls(self.n, pa.string())
        errors = [None] * self.n
        for row, why in self.errors.items():
            errors[row] = why
        return pa.array(errors, pa.string())

    def take(self) -> pa.RecordBatch:
        n = self.n
        fr = self.fr
        job = [
            _bytes_array(self.queue, pa.string()),
            _bytes_array(self.body, self.body_type),
            STATE_NAMES.take(_ints(self.state, np.int8)),
            # ctime is ms * 1e6 + a counter: microseconds are ctime // 1000
            pc.divide(_ints(self.ctime, np.int64), 1000).cast(TIMESTAMP),
            _ms(self.etime),
            *(_ints(col, np.int32) for col in self.ints),
        ]
        ids = _bytes_array(self.id, pa.string(), width=ID_LEN)
        if self.no_job:
            has_job = np.ones(n, bool)
            for first, count in self.no_job:
                has_job[first:first + count] = False
            mask = pa.array(has_job)
            job = [pc.if_else(mask, a, pa.scalar(None, a.type)) for a in job]
            events = [first for first, count in self.no_job if self.record[first] >= _FLUSHALL]
            if events:          # flushall and damaged rows name no job
                valid = np.ones(n, bool)
                valid[events] = False
                ids = pc.if_else(pa.array(valid), ids, pa.scalar(None, pa.string()))
        arrays = [
            _ms(self.time),
            pa.repeat(pa.scalar(fr.node, pa.string()), n),
            RECORD_NAMES.take(_ints(self.record, np.int8)),
            ids,
            *job,
            pa.repeat(pa.scalar(fr.path, pa.string()), n),
            _ints(self.offset, np.int64),
            self._error_column(),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _open_range(fr: FileRange) -> int:
    fd = os.open(fr.path, os.O_RDONLY)
    st = os.fstat(fd)
    if st.st_ino != fr.inode or st.st_size < fr.size:
        os.close(fd)
        raise AOFReadError(f"disquette-aof: {fr.path} was replaced or truncated since the read "
                           f"was planned (an AOF rewrite?): read it again")
    return fd


def _chunks(fd: int, start: int, end: int) -> Iterator[bytes]:
    pos = start
    while pos < end:
        data = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not data:
            break
        pos += len(data)
        yield data


def read_range(fr: FileRange, binary_body: bool, skip_damage: bool) -> Iterator[pa.RecordBatch]:
    """The rows of one file range, in batches of BATCH_ROWS rows at most."""
    rows = Rows(fr, binary_body)
    fd = _open_range(fr)
    read: Callable[[int, int], bytes] = lambda offset, n: os.pread(fd, n, offset)
    try:
        time = fr.time
        pos = fr.start
        while pos < fr.end:
            scanner = Scanner(pos)
            damage: tuple[int, str] | None = None
            try:
                for chunk in _chunks(fd, pos, fr.end):
                    for offset, payload in scanner.feed(chunk):
                        try:
                            time = _decode(rows, time, offset, payload)
                        except Exception as e:
                            raise CorruptAOF(offset, f"undecodable record ({e})") from None
                        if rows.full:
                            yield rows.take()
                torn = scanner.finish()
                if torn is not None and fr.end < fr.size:
                    damage = (torn.offset, torn.reason)
                pos = fr.end        # a torn tail at the planned size: being written
            except CorruptAOF as e:
                damage = (e.offset, e.reason)
            if damage is None:
                break
            offset, reason = damage
            if not skip_damage:
                raise AOFReadError(f"disquette-aof: {fr.path}: {reason} at byte offset {offset} "
                                   f"(option onDamage=skip skips it)")
            rows.add_event(time, offset, _DAMAGED, reason)
            head = read(offset, REC_HEADER_SIZE)
            length = record_length(head, 0) if len(head) == REC_HEADER_SIZE else -1
            # A record whose header is sound ends where it says; else look for the next one.
            pos = (offset + REC_HEADER_SIZE + length if length >= 0
                   else resync(read, offset + 1, fr.size))
            if pos >= fr.end:
                break
        if rows.n:
            yield rows.take()
    finally:
        os.close(fd)


def _decode(rows: Rows, time: int | None, offset: int, payload: Any) -> int | None:
    kind = payload[0]
    if kind in JOB_RECORDS:
        rows.add_jobs(time, offset, decode_jobs(payload))
    elif kind == REC_TIME:
        return decode_time(payload)
    elif kind in ID_RECORD:
        rows.add_ids(time, offset, ID_RECORD[kind], decode_ids(payload))
    elif kind == REC_FLUSHALL:
        rows.add_event(time, offset, _FLUSHALL, None)
    else:
        raise ValueError(f"unknown record type {kind!r}")
    return time
