"""A simulated host's disk (server/sim/simulation.py gives each host one): a
small file system with the operations the AOF writer uses (server/aof_files.py's,
by the same names), so the server's own writer, rewrite and load run on it.

Each file has the bytes its readers see (the page cache) and the bytes a crash
leaves (what was fsynced): a crash (``crash``: the host loses power) puts every
file back to its last fsync. Directory entries (creations, renames, unlinks)
are durable at once: a rename needs no fsync of the directory here. Writes can
be made to fail (``fail_writes``: a full disk), and the chaos suite's disk
faults can be done to a stopped host's AOF (``truncate``, ``flip_bit``,
``duplicate``, ``torn_write``), repaired as ``disquette-check-aof --fix`` does
(``check_aof_fix``).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from broker.aof_format import (
    FILE_HEADER_SIZE, REC_HEADER_SIZE, REC_JOB_ROWS, REC_JOBS, BadHeader, CorruptAOF, Scanner,
    check_chunks, decode_jobs,
)
from broker.directives import DIRECTIVES
from server.aof_files import Files

AOF = DIRECTIVES["appendfilename"].default      # the file the damage helpers act on


class JobIndex:
    """The ids of the job records of a byte string that grows by appends,
    each byte scanned once; ``lineage`` changes when the string was changed
    otherwise (then it is scanned again)."""

    def __init__(self) -> None:
        self.lineage = -1
        self.scanned = 0
        self.scanner = Scanner()
        self.ids: set = set()

    def ids_of(self, data, lineage: int) -> set:
        if lineage != self.lineage or len(data) < self.scanned:
            self.__init__()
            self.lineage = lineage
        if len(data) > self.scanned:
            try:
                for _offset, payload in self.scanner.feed(bytes(data[self.scanned:])):
                    if payload[0] == REC_JOBS or payload[0] == REC_JOB_ROWS:
                        self.ids.update(decode_jobs(payload)[0])
            except CorruptAOF:
                pass        # damaged: the ids before the damage
            self.scanned = len(data)
        return self.ids


class SimFile:
    """``data``: what reads see; ``durable``: what a crash leaves. ``lineage``
    counts the changes that were not appends (both strings grow by appends
    between two)."""

    __slots__ = ("data", "durable", "lineage", "durable_lineage", "index", "durable_index")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = b""
        self.lineage = 0
        self.durable_lineage = 0
        self.index = JobIndex()
        self.durable_index = JobIndex()

    def sync(self) -> None:
        self.durable = bytes(self.data)
        self.durable_lineage = self.lineage

    def overwrite(self, image: bytes) -> None:
        """New contents, durable (damage done to a stopped host's file)."""
        self.data = bytearray(image)
        self.lineage += 1
        self.sync()

    def job_ids(self, synced_only: bool) -> set:
        if synced_only:
            return self.durable_index.ids_of(self.durable, self.durable_lineage)
        return self.index.ids_of(self.data, self.lineage)


class SimDisk(Files):
    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.fds: dict[int, list] = {}      # fd -> [file, position, O_APPEND]
        self.next_fd = 3
        self.fail_writes = False

    # -- the file system's operations (os.open, os.write... as OSFiles has them)
    def _file(self, fd: int) -> list:
        try:
            return self.fds[fd]
        except KeyError:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF)) from None

    def _named(self, path: str) -> SimFile:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None

    def open(self, path: str, flags: int, mode: int = 0o777) -> int:
        f = self.files.get(path)
        if f is None:
            if not flags & os.O_CREAT:
                self._named(path)
            f = self.files[path] = SimFile()
        elif flags & os.O_TRUNC:
            del f.data[:]
            f.lineage += 1
        fd = self.next_fd
        self.next_fd += 1
        self.fds[fd] = [f, 0, bool(flags & os.O_APPEND)]
        return fd

    def _write_at(self, f: SimFile, pos: int, data) -> int:
        if self.fail_writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = len(data)
        if pos == len(f.data):
            f.data += data
        else:
            if pos > len(f.data):
                f.data += bytes(pos - len(f.data))
            f.data[pos:pos + n] = data
            f.lineage += 1
        return n

    def write(self, fd: int, data) -> int:
        entry = self._file(fd)
        f = entry[0]
        pos = len(f.data) if entry[2] else entry[1]
        n = self._write_at(f, pos, data)
        entry[1] = pos + n
        return n

    def pwrite(self, fd: int, data, offset: int) -> int:
        return self._write_at(self._file(fd)[0], offset, data)

    def read(self, fd: int, n: int) -> bytes:
        entry = self._file(fd)
        pos = entry[1]
        data = bytes(entry[0].data[pos:pos + n])
        entry[1] = pos + len(data)
        return data

    def lseek(self, fd: int, pos: int, how: int) -> int:
        entry = self._file(fd)
        entry[1] = pos + (len(entry[0].data) if how == os.SEEK_END else
                          entry[1] if how == os.SEEK_CUR else 0)
        return entry[1]

    def _truncate(self, f: SimFile, size: int) -> None:
        if size < len(f.data):
            del f.data[size:]
            f.lineage += 1
        else:
            f.data += bytes(size - len(f.data))

    def ftruncate(self, fd: int, size: int) -> None:
        self._truncate(self._file(fd)[0], size)

    def truncate(self, path: str, size: int) -> None:
        self._truncate(self._named(path), size)

    def fsync(self, fd: int) -> None:
        self._file(fd)[0].sync()

    fdatasync = fsync

    def close(self, fd: int) -> None:
        self._file(fd)
        del self.fds[fd]

    def replace(self, src: str, dst: str) -> None:
        self.files[dst] = self._named(src)
        del self.files[src]

    def unlink(self, path: str) -> None:
        self._named(path)
        del self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files

    def size(self, fd: int) -> int:
        return len(self._file(fd)[0].data)

    def fsync_dir(self, path: str) -> None:
        """Nothing to do: directory entries are durable at once."""

    def getpid(self) -> int:
        return 1

    # -- the host ---------------------------------------------------------------------
    def crash(self) -> None:
        """The host goes down: every file back to its last fsync, no file open."""
        for f in self.files.values():
            if len(f.data) != len(f.durable) or f.lineage != f.durable_lineage:
                f.data = bytearray(f.durable)
                f.lineage += 1
                f.durable_lineage = f.lineage
        self.fds.clear()

    def holds(self, job_id, synced_only: bool, path: str = AOF) -> bool:
        """Whether the file has a job record for job_id (fsynced, if asked)."""
        f = self.files.get(path)
        return f is not None and job_id in f.job_ids(synced_only)

    def image(self, path: str = AOF) -> bytes:
        """The file as a process reads it (b"": none)."""
        f = self.files.get(path)
        return bytes(f.data) if f is not None else b""

    def put(self, image: bytes, path: str = AOF) -> None:
        """A file with these contents, durable."""
        f = self.files.get(path)
        if f is None:
            f = self.files[path] = SimFile()
        f.overwrite(image)

    def unsynced(self, path: str = AOF) -> int:
        """How many bytes of the file a crash would lose."""
        f = self.files.get(path)
        return len(f.data) - len(f.durable) if f is not None else 0

    # -- damage: what a disk does to a stopped host's file (the chaos suite's
    # aof-truncate, aof-bitflip and power-loss faults, chaos/disk.py). Offsets
    # are the file's (header included); damage stays past the file header.

    def records(self, path: str = AOF) -> list:
        """(offset, end) of each whole record of the file, in order."""
        out = []
        scanner = Scanner()
        for offset, payload in scanner.feed(self.image(path)):
            out.append((offset, offset + REC_HEADER_SIZE + len(payload)))
        return out

    def truncate_at(self, offset: int, path: str = AOF) -> None:
        """The file cut at ``offset`` (a crash mid-write, a lost tail)."""
        self.put(self.image(path)[:max(offset, FILE_HEADER_SIZE)], path)

    def flip_bit(self, bit: int, path: str = AOF) -> None:
        """Bit ``bit`` of the file inverted (a disk's silent corruption)."""
        image = bytearray(self.image(path))
        image[bit // 8] ^= 1 << (bit % 8)
        self.put(bytes(image), path)

    def duplicate(self, start: int, end: int, path: str = AOF) -> None:
        """The bytes ``start:end`` (a record) written twice in a row."""
        image = self.image(path)
        self.put(image[:end] + image[start:end] + image[end:], path)

    def torn_write(self, keep: int, path: str = AOF) -> None:
        """A power cut in the middle of writing back the unsynced data: its
        first ``keep`` bytes reached the disk (the next ``crash`` drops the rest)."""
        f = self._named(path)
        f.durable = bytes(f.data[:len(f.durable) + keep])

    def check_aof_fix(self, force: bool, path: str = AOF) -> Any:
        """``disquette-check-aof --fix [--force]`` on this file: a torn tail
        (and, with ``force``, corruption) cut off. Returns the check's Summary."""
        summary = check_chunks([self.image(path)])
        damage = summary.corrupt if force and summary.corrupt is not None else summary.torn
        if damage is not None and not isinstance(damage, BadHeader):
            self.truncate_at(damage.offset, path)
        return summary
