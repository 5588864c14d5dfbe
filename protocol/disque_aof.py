"""Disque 1.0-rc1's append-only file, read: the way in from Disque (sans-IO).

A Disque AOF is a stream of Redis-protocol commands, two kinds of them:

    *2 $7 LOADJOB $<n> <serialized job>    a job created, received as a copy,
                                           or kept by a rewrite
    *2 $6 DELJOB  $40  <job id>            a job acked or evicted

A serialized job (Disque's job.c ``serializeJob``, SER_STORAGE) is, little
endian::

    u32 length of what follows
    40s id
    u8  state (low 4 bits: 0 wait-repl, 1 active, 2 queued, 3 acked) and
        gc-retry (high 4 bits)
    u8  flags (bit 2: delivered; bits 0 and 1: broadcasts in flight)
    u16 REPLICATE
    u32 expire time, unix seconds
    u64 ctime (ms * 1,000,000 + a per-ms counter, as ours)
    u32 DELAY, u32 RETRY (seconds)
    u16 nacks, u16 additional deliveries
    u32 + bytes  queue name
    u32 + bytes  body
    u32 count + count * 40s  node ids that may hold a copy

``read`` yields what the file says, in order, and refuses anything else with
the byte offset of the command that failed (``DisqueAOFError``); a file cut
in the middle of its last command is ``truncated`` (a crash mid-write), told
apart from damage elsewhere as Disque's own loader does. Nothing here opens a
file: server/check_aof.py reads it and writes the jobs as Disquette's AOF.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

LOADJOB = b"LOADJOB"
DELJOB = b"DELJOB"
ID_LEN = 40
NODE_ID_LEN = 40
# id, state and gc-retry, flags, repl, etime, ctime, delay, retry, nacks, deliveries
_STRUCT = struct.Struct("<40sBBHIQIIHH")
_U32 = struct.Struct("<I")
DISQUE_STATES = ("wait-repl", "active", "queued", "acked")
FLAG_DELIVERED = 4          # Disque's JOB_FLAG_DELIVERED
MAX_ARGS = 16               # a command of the file has 2; more is damage
MAX_BULK = 1 << 31


class DisqueJob(NamedTuple):
    """A job as Disque serialized it (its own units: expire time in unix
    seconds; flags are Disque's bits)."""

    id: bytes
    state: int
    flags: int
    repl: int
    etime: int
    ctime: int
    delay: int
    retry: int
    nacks: int
    additional_deliveries: int
    queue: bytes
    body: bytes
    nodes_delivered: tuple[str, ...]


class DisqueAOFError(ValueError):
    """The file is not a Disque AOF from ``offset`` on; ``truncated``: only
    because it ends in the middle of its last command."""

    def __init__(self, offset: int, why: str, truncated: bool = False) -> None:
        super().__init__(f"{why} at offset {offset}")
        self.offset = offset
        self.why = why
        self.truncated = truncated


class _Truncated(Exception):
    pass


def _line(data: bytes, pos: int, kind: int) -> tuple[int, int]:
    """A ``<kind><integer>\\r\\n`` line at pos: its integer and where the next
    thing starts."""
    if pos >= len(data):
        raise _Truncated
    if data[pos] != kind:
        raise ValueError(f"expected {chr(kind)!r}, found {bytes(data[pos:pos + 1])!r}")
    end = data.find(b"\r\n", pos + 1, pos + 24)
    if end < 0:
        if len(data) - pos < 24:
            raise _Truncated
        raise ValueError("a length line that does not end")
    digits = bytes(data[pos + 1:end])
    if not digits.isdigit():
        raise ValueError(f"bad length {digits!r}")
    return int(digits), end + 2


def _command(data: bytes, pos: int) -> tuple[list[bytes], int]:
    argc, pos = _line(data, pos, ord("*"))
    if not 0 < argc <= MAX_ARGS:
        raise ValueError(f"a command of {argc} arguments")
    args = []
    for _ in range(argc):
        n, pos = _line(data, pos, ord("$"))
        if n > MAX_BULK:
            raise ValueError(f"an argument of {n} bytes")
        end = pos + n
        if end + 2 > len(data):
            raise _Truncated
        if data[end:end + 2] != b"\r\n":
            raise ValueError("an argument not followed by CRLF")
        args.append(bytes(data[pos:end]))
        pos = end + 2
    return args, pos


def parse_job(blob: bytes) -> DisqueJob:
    """One serialized job (LOADJOB's argument); ValueError if it is not one."""
    if len(blob) < 4 + _STRUCT.size + 12:
        raise ValueError("a serialized job shorter than its fixed part")
    (length,) = _U32.unpack_from(blob, 0)
    if length != len(blob) - 4:
        raise ValueError(f"a serialized job of {len(blob) - 4} bytes says {length}")
    (jid, state, flags, repl, etime, ctime, delay, retry, nacks,
     deliveries) = _STRUCT.unpack_from(blob, 4)
    pos = 4 + _STRUCT.size
    fields = []
    for what in ("queue name", "body"):
        (n,) = _U32.unpack_from(blob, pos)
        pos += 4
        if pos + n > len(blob):
            raise ValueError(f"a {what} running past the job")
        fields.append(blob[pos:pos + n])
        pos += n
    if pos + 4 > len(blob):
        raise ValueError("no node count")
    (count,) = _U32.unpack_from(blob, pos)
    pos += 4
    if pos + count * NODE_ID_LEN != len(blob):
        raise ValueError(f"{count} node ids do not fill the job's last "
                         f"{len(blob) - pos} bytes")
    nodes = tuple(blob[pos + i * NODE_ID_LEN:pos + (i + 1) * NODE_ID_LEN].decode("latin-1")
                  for i in range(count))
    if not _is_job_id(jid):
        raise ValueError(f"a job id {jid!r} of the wrong shape")
    state &= 0x0F
    if state >= len(DISQUE_STATES):
        raise ValueError(f"unknown job state {state}")
    return DisqueJob(jid, state, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
                     fields[0], fields[1], nodes)


def _is_job_id(jid: bytes) -> bool:
    """Disque's validateJobID: D-<8>-<24>-<4>, 40 bytes."""
    return (len(jid) == ID_LEN and jid[:2] == b"D-" and jid[10:11] == b"-"
            and jid[35:36] == b"-")


def read(data: bytes) -> Iterator[tuple[int, bytes, DisqueJob | bytes]]:
    """(offset, LOADJOB, DisqueJob) and (offset, DELJOB, job id), in the
    file's order; DisqueAOFError at the first command that is not one of
    them, or where the file ends in the middle of one (``truncated``)."""
    pos = 0
    while pos < len(data):
        start = pos
        try:
            args, pos = _command(data, pos)
            name = args[0].upper()
            if name == LOADJOB and len(args) == 2:
                value: DisqueJob | bytes = parse_job(args[1])
            elif name == DELJOB and len(args) == 2 and _is_job_id(args[1]):
                value = args[1]
            else:
                raise ValueError(f"unexpected command {args[0][:32]!r} of {len(args)} "
                                 "arguments (a Disque AOF holds LOADJOB and DELJOB)")
        except _Truncated:
            raise DisqueAOFError(start, "the file ends in the middle of a command",
                                 truncated=True) from None
        except (ValueError, struct.error) as e:
            raise DisqueAOFError(start, f"not a Disque AOF command ({e})") from None
        yield start, name, value


def live_jobs(data: bytes) -> list[DisqueJob]:
    """The jobs a Disque node loading this file would hold, in the order of
    their last LOADJOB: a later LOADJOB of an id replaces the earlier one, a
    DELJOB forgets it (expired jobs are the importer's to drop: it knows the
    time)."""
    jobs: dict[bytes, DisqueJob] = {}
    for _, name, value in read(data):
        if name == LOADJOB:
            assert isinstance(value, DisqueJob)
            jobs.pop(value.id, None)
            jobs[value.id] = value
        else:
            assert isinstance(value, bytes)
            jobs.pop(value, None)
    return list(jobs.values())


def looks_like_disque_aof(head: bytes) -> bool:
    """Whether a file starting with these bytes is a Disque AOF (a command
    array) rather than a Disquette one (whose magic starts with 0x89)."""
    return head[:1] == b"*"
