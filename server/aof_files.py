"""The file system the AOF modules (server/aof.py, server/aof_rewrite.py,
server/aof_load.py) write and read through: ``OSFiles``, the process's, or the
simulator's disk (server/sim/disk.py), which has the same operations. ``Files``
holds what both build on those operations: whole writes, a new empty AOF made
atomically, an older file's header upgraded in place."""

from __future__ import annotations

import os

from broker import aof_format as fmt


class Files:
    """The helpers over a file system's operations (os.open, os.write...,
    each a method of the same name)."""

    def write_all(self, fd: int, data) -> None:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += self.write(fd, view[done:])

    def unlink_quietly(self, path: str) -> None:
        try:
            self.unlink(path)
        except OSError:
            pass

    def upgrade_header(self, path: str) -> None:
        """An older version's file (its records are a subset of this version's)
        gets this version's header, in place, before records of this version are
        appended: an older server then refuses it by its version."""
        fd = self.open(path, os.O_WRONLY)
        try:
            self.pwrite(fd, fmt.file_header(), 0)
            self.fsync(fd)
        finally:
            self.close(fd)

    def create_empty(self, path: str) -> None:
        """A new AOF at ``path`` holding just the file header, made atomically."""
        tmp = f"temp-newaof-{self.getpid()}.aof"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.write_all(fd, fmt.file_header())
            self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, path)
        self.fsync_dir(path)


class OSFiles(Files):
    """The real file system."""

    open = staticmethod(os.open)
    read = staticmethod(os.read)
    write = staticmethod(os.write)
    pwrite = staticmethod(os.pwrite)
    lseek = staticmethod(os.lseek)
    ftruncate = staticmethod(os.ftruncate)
    truncate = staticmethod(os.truncate)
    fsync = staticmethod(os.fsync)
    fdatasync = staticmethod(getattr(os, "fdatasync", os.fsync))
    close = staticmethod(os.close)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    exists = staticmethod(os.path.exists)
    getpid = staticmethod(os.getpid)

    @staticmethod
    def size(fd: int) -> int:
        return os.fstat(fd).st_size

    @staticmethod
    def fsync_dir(path: str) -> None:
        """fsync the directory holding ``path`` (best effort): a rename in it
        survives a crash."""
        try:
            fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
