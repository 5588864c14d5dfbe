"""File operations the AOF modules share (server/aof.py, server/aof_rewrite.py,
server/aof_load.py): whole writes, a new empty AOF made atomically, and the
directory fsync that makes a rename durable."""

from __future__ import annotations

import os

from broker import aof_format as fmt

fdatasync = getattr(os, "fdatasync", os.fsync)


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])


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


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def upgrade_header(path: str) -> None:
    """An older version's file (its records are a subset of this version's)
    gets this version's header, in place, before records of this version are
    appended: an older server then refuses it by its version."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, fmt.file_header(), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def create_empty(path: str) -> None:
    """A new AOF at ``path`` holding just the file header, made atomically."""
    tmp = f"temp-newaof-{os.getpid()}.aof"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, fmt.file_header())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path)
