"""The AOF files a ``disquette-aof`` read covers, and where its partitions
start: on the driver, before any task runs.

A path is a node's data directory (its ``*.aof`` files, not the temporary
ones of a rewrite), a file, or a glob. Each file is read up to the size it
had when the read was planned (a node may keep appending: the reader sees a
prefix of whole records). A file bigger than ``partition_bytes`` is split at
record boundaries: the records' headers are walked (their lengths, guarded by
their own checksum) without reading the payloads, except the time marks,
whose time a partition starting after them needs.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Callable

from disquette.aof_codec import (
    FILE_HEADER_SIZE, REC_HEADER_SIZE, REC_TIME, BadHeader, CorruptAOF, Scanner, decode_time,
    record_length, whole_record_at,
)

WALK_WINDOW = 1 << 16           # bytes read at a time while walking headers
TEMP_PREFIXES = ("temp-",)      # a rewrite in progress (server/aof_rewrite.py)


class AOFReadError(Exception):
    """An AOF the reader cannot read as asked; the message names the file and,
    for damage, the byte offset."""


@dataclass
class FileRange:
    """Bytes ``start``..``end`` of ``path``: whole records, the first one at
    ``start``. ``size`` is the file's size when the read was planned (the
    records past it are not read); ``time`` the time mark in force at
    ``start`` (None before the first one); ``node`` the node that wrote it."""

    path: str
    start: int
    end: int
    size: int
    inode: int
    node: str | None
    time: int | None = None


def list_files(paths: list[str]) -> list[str]:
    """The AOF files named by ``paths`` (directories, files, globs), sorted,
    each once; AOFReadError when a path names none."""
    found: list[str] = []
    for path in paths:
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
        files: list[str] = []
        for m in matches:
            if os.path.isdir(m):
                files += [os.path.join(m, f) for f in sorted(os.listdir(m))
                          if f.endswith(".aof") and not f.startswith(TEMP_PREFIXES)]
            elif os.path.isfile(m):
                files.append(m)
        if not files:
            raise AOFReadError(f"disquette-aof: no AOF file at {path!r} (a node's data "
                               f"directory, an .aof file or a glob)")
        found += files
    return list(dict.fromkeys(os.path.abspath(f) for f in found))


def node_of(path: str) -> str | None:
    """The id of the node that writes ``path``: the ``myself`` line of the
    nodes.conf beside it (None if there is none)."""
    try:
        with open(os.path.join(os.path.dirname(path), "nodes.conf"), encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and "myself" in parts[2].split(","):
                    return parts[0]
    except OSError:
        pass
    return None


def _reader(fd: int) -> Callable[[int, int], bytes]:
    return lambda offset, n: os.pread(fd, n, offset)


def resync(read: Callable[[int, int], bytes], pos: int, size: int) -> int:
    """After damage at ``pos - 1``: the first offset >= ``pos`` (below
    ``size``) where a whole record with valid checksums starts and is followed
    by a valid record header (or the end), else ``size``. Deterministic on the
    file's bytes, so the driver and a task agree on it."""
    while pos + REC_HEADER_SIZE <= size:
        window = read(pos, min(WALK_WINDOW, size - pos))
        last = len(window) - REC_HEADER_SIZE
        for i in range(last + 1):
            length = record_length(window, i)
            if length < 0:
                continue
            end = pos + i + REC_HEADER_SIZE + length
            if end > size:
                continue
            rec = window if end - pos <= len(window) else read(pos, end - pos)
            if whole_record_at(rec, i) < 0:
                continue
            if size - end < REC_HEADER_SIZE or record_length(read(end, REC_HEADER_SIZE), 0) >= 0:
                return pos + i
        pos += last + 1
    return size


def _zeros_to(read: Callable[[int, int], bytes], pos: int, size: int) -> bool:
    """Only zero bytes from ``pos`` to ``size``?"""
    while pos < size:
        chunk = read(pos, min(WALK_WINDOW, size - pos))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True


def check_header(read: Callable[[int, int], bytes], path: str, size: int) -> None:
    scanner = Scanner()
    try:
        for _ in scanner.feed(read(0, min(size, FILE_HEADER_SIZE))):
            pass
    except BadHeader as e:
        raise AOFReadError(f"disquette-aof: {path}: {e}") from None
    except CorruptAOF as e:
        raise AOFReadError(f"disquette-aof: {path}: damaged file header: {e}") from None


def plan_file(path: str, partition_bytes: int, skip_damage: bool) -> list[FileRange]:
    """The ranges of one file, each about ``partition_bytes`` long."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        size = st.st_size
        read = _reader(f.fileno())
        node = node_of(path)
        if size < FILE_HEADER_SIZE:
            return []       # empty, or a header still being written
        check_header(read, path, size)
        if size - FILE_HEADER_SIZE <= partition_bytes:
            return [FileRange(path, FILE_HEADER_SIZE, size, size, st.st_ino, node)]
        return _walk(path, read, size, st.st_ino, node, partition_bytes, skip_damage)


def _walk(path: str, read: Callable[[int, int], bytes], size: int, inode: int,
          node: str | None, partition_bytes: int, skip_damage: bool) -> list[FileRange]:
    ranges: list[FileRange] = []
    start, start_time = FILE_HEADER_SIZE, None
    cut = start + partition_bytes
    pos = start
    time = None
    wbase, window = 0, b""
    while pos + REC_HEADER_SIZE <= size:
        # The header and a time mark's payload (21 bytes) must be in the window.
        if pos + 32 > wbase + len(window) and wbase + len(window) < size:
            wbase, window = pos, read(pos, min(WALK_WINDOW, size - pos))
        i = pos - wbase
        length = record_length(window, i)
        if length < 0:
            if _zeros_to(read, pos, size):
                break           # a zero-filled tail: what a crash can leave, not damage
            if not skip_damage:
                raise AOFReadError(f"disquette-aof: {path}: record header checksum mismatch "
                                   f"at byte offset {pos}")
            pos = resync(read, pos + 1, size)
            window = b""
            continue
        end = pos + REC_HEADER_SIZE + length
        if end > size:
            break               # being written: past the prefix this read sees
        if length == 9 and window[i + REC_HEADER_SIZE] == REC_TIME:
            try:
                time = decode_time(window[i + REC_HEADER_SIZE:i + REC_HEADER_SIZE + 9])
            except ValueError:
                pass            # the task reports it
        pos = end
        if pos >= cut and pos < size:
            ranges.append(FileRange(path, start, pos, size, inode, node, start_time))
            start, start_time = pos, time
            cut = pos + partition_bytes
    ranges.append(FileRange(path, start, size, size, inode, node, start_time))
    return ranges


def plan(paths: list[str], partition_bytes: int, skip_damage: bool) -> list[FileRange]:
    out: list[FileRange] = []
    for path in list_files(paths):
        out += plan_file(path, partition_bytes, skip_damage)
    return out
