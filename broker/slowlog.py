"""SLOWLOG entries: what a command slower than slowlog-log-slower-than leaves.

An entry keeps what Disque's slowlog.c keeps: at most 32 arguments, the last
one replaced by "... (N more arguments)" when there were more, each at most
128 bytes followed by "... (N more bytes)" when longer. It also keeps the
client's address and name (as Redis 4 does; an extension, docs/clients.md).

Each entry is one bytes object of at least 513 bytes, not a list of the
request's arguments. A command is slow mostly during a burst, and its entry
outlives the burst: small objects (a list, ints, the arguments the reader
made) sit among the burst's jobs in CPython's small-object arenas, which go
back to the system only when empty, so each entry would keep a 1 MiB arena
after the jobs are gone. An object above 512 bytes comes from the C allocator
instead, where it keeps a page at most (Host.release_memory hands back the
free pages around it). The Node keeps the entries in a deque, whose blocks
are above that size too.
"""

from __future__ import annotations

import struct
from typing import Final

MAX_ARGS: Final = 32            # Disque's SLOWLOG_ENTRY_MAX_ARGC
MAX_ARG_BYTES: Final = 128      # Disque's SLOWLOG_ENTRY_MAX_STRING
# Above CPython's small-object limit (512 bytes): see the module's docstring.
MIN_ENTRY_BYTES: Final = 513

_HEAD: Final = struct.Struct("<qqqI")   # id, unix time, duration us, fields that follow
_SIZE: Final = struct.Struct("<I")      # a field's length, before its bytes


def logged_args(argv: list) -> list[bytes]:
    """The arguments an entry keeps, cut as Disque's slowlogCreateEntry cuts them."""
    n = len(argv)
    kept = n if n <= MAX_ARGS else MAX_ARGS - 1
    args = []
    for a in argv[:kept]:
        a = bytes(a)
        if len(a) > MAX_ARG_BYTES:
            a = a[:MAX_ARG_BYTES] + b"... (%d more bytes)" % (len(a) - MAX_ARG_BYTES)
        args.append(a)
    if kept < n:
        args.append(b"... (%d more arguments)" % (n - kept))
    return args


def encode_entry(entry_id: int, unix_time: int, usec: int, args: list[bytes],
                 addr: bytes, name: bytes) -> bytes:
    """One entry as one bytes object (padded to MIN_ENTRY_BYTES)."""
    fields = [addr, name, *args]
    parts = [_HEAD.pack(entry_id, unix_time, usec, len(fields))]
    for f in fields:
        parts.append(_SIZE.pack(len(f)))
        parts.append(f)
    return b"".join(parts).ljust(MIN_ENTRY_BYTES, b"\0")


def entry_reply(entry: bytes) -> list:
    """SLOWLOG GET's reply for one entry: [id, time, duration, [args], addr, name]."""
    entry_id, unix_time, usec, n = _HEAD.unpack_from(entry)
    pos = _HEAD.size
    fields = []
    for _ in range(n):
        (size,) = _SIZE.unpack_from(entry, pos)
        pos += _SIZE.size
        fields.append(entry[pos:pos + size])
        pos += size
    addr, name, *args = fields
    return [entry_id, unix_time, usec, args, addr, name]
