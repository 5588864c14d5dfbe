"""A simulated host's disk, holding its AOF (server/sim/simulation.py gives each
host one): what was written survives a crash only once fsynced, writes can be
made to fail, and the chaos suite's disk faults can be done to it.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any

from broker.aof_format import (
    FILE_HEADER_SIZE, REC_HEADER_SIZE, BadHeader, Scanner, check_chunks, file_header,
)


@dataclass(eq=False)
class SimDisk:
    """A host's disk, holding its AOF: chunks written (``write``) are durable once
    fsynced; a crash loses the rest. ``fail_writes`` makes writes fail (disk
    full); ``fatal`` is set by a writer that must stop the process (a failed
    write under appendfsync always): the simulator then crashes the host."""

    synced: list = field(default_factory=list)
    unsynced: list = field(default_factory=list)
    synced_ids: set = field(default_factory=set)
    unsynced_ids: set = field(default_factory=set)
    fail_writes: bool = False
    fatal: bool = False

    def write(self, data: bytes, job_ids=()) -> None:
        if self.fail_writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.unsynced.append(data)
        self.unsynced_ids.update(job_ids)

    def fsync(self) -> None:
        if self.unsynced:
            self.synced += self.unsynced
            self.synced_ids |= self.unsynced_ids
            self.unsynced = []
            self.unsynced_ids = set()

    def replace(self, data: bytes, job_ids=()) -> None:
        """An AOF rewrite: the new contents, fsynced, renamed over the old."""
        self.synced = [data] if data else []
        self.synced_ids = set(job_ids)
        self.unsynced = []
        self.unsynced_ids = set()

    def crash(self) -> None:
        self.unsynced = []
        self.unsynced_ids = set()
        self.fatal = False

    def holds(self, job_id, synced_only: bool) -> bool:
        """Whether a job record for job_id was written (fsynced, if asked)."""
        return job_id in self.synced_ids or (not synced_only and job_id in self.unsynced_ids)

    def image(self) -> bytes:
        """The file as a restarted process reads it (header added by the reader)."""
        data = self.synced + self.unsynced
        return file_header() + b"".join(data) if data else b""

    # -- damage: what a disk does to a stopped host's file (the chaos suite's
    # aof-truncate, aof-bitflip and power-loss faults, chaos/disk.py). Offsets
    # are the file's (header included); damage stays past the file header. The
    # ids written are kept as they were: ``holds`` then says what was written,
    # not what survived.

    def records(self) -> list:
        """(offset, end) of each whole record of the file, in order."""
        out = []
        scanner = Scanner()
        image = self.image()
        for offset, payload in scanner.feed(image):
            out.append((offset, offset + REC_HEADER_SIZE + len(payload)))
        return out

    def _set(self, image: bytes) -> None:
        body = image[FILE_HEADER_SIZE:]
        self.synced = [body] if body else []
        self.unsynced = []

    def truncate(self, offset: int) -> None:
        """The file cut at ``offset`` (a crash mid-write, a lost tail)."""
        self._set(self.image()[:max(offset, FILE_HEADER_SIZE)])

    def flip_bit(self, bit: int) -> None:
        """Bit ``bit`` of the file inverted (a disk's silent corruption)."""
        image = bytearray(self.image())
        image[bit // 8] ^= 1 << (bit % 8)
        self._set(bytes(image))

    def duplicate(self, start: int, end: int) -> None:
        """The bytes ``start:end`` (a record) written twice in a row."""
        image = self.image()
        self._set(image[:end] + image[start:end] + image[end:])

    def torn_write(self, keep: int) -> None:
        """A power cut in the middle of writing back the unsynced data: its
        first ``keep`` bytes reached the disk (the next ``crash`` drops the rest)."""
        data = b"".join(self.unsynced)[:keep]
        if data:
            self.synced.append(data)
        self.unsynced = []

    def check_aof_fix(self, force: bool) -> Any:
        """``disquette-check-aof --fix [--force]`` on this file: a torn tail
        (and, with ``force``, corruption) cut off. Returns the check's Summary."""
        summary = check_chunks([self.image()])
        damage = summary.corrupt if force and summary.corrupt is not None else summary.torn
        if damage is not None and not isinstance(damage, BadHeader):
            self.truncate(damage.offset)
        return summary
