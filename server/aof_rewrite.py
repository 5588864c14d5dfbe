"""The AOF rewrite engine: the background rewrite (BGREWRITEAOF, automatic,
``CONFIG SET appendonly yes``) and the synchronous one (SHUTDOWN REWRITE-AOF).

The background rewrite walks the job shards in order, a few milliseconds per
event-loop turn, into a temporary file while the live log goes on. A record
logged meanwhile is also kept for the new file if its job's shard was already
walked (the walk sees the others as they are when it gets there). When the walk
is done the kept records are appended and the file is fsynced; the writer
(server/aof.py) then renames it over the old one (os.replace: atomic). Which
jobs a rewrite keeps is the policy's (broker/aof_policy.py) ``live_jobs``. Its
files, background work, slices and clock are the writer's (server/aof_runtime.py).
"""

from __future__ import annotations

import logging
import os

from broker import aof_format as fmt
from broker.aof_policy import AOFPolicy

log = logging.getLogger("server.aof")

REWRITE_SLICE = 0.004                   # seconds of rewrite work per event-loop turn
INCREMENTAL_FSYNC = 32 * 1024 * 1024    # aof-rewrite-incremental-fsync


def snapshot_chunks(node, start: int, stop: int, now: int | None = None,
                    header: bool = False, live_jobs=AOFPolicy.live_jobs):
    """Job records for the jobs of shards [start, stop) that a rewrite keeps,
    after the file header if ``header``."""
    if header:
        yield fmt.file_header()
    if now is None:
        now = node.clock()
    batch = []
    shards = node.job_shards
    for i in range(start, stop):
        batch += live_jobs(shards[i].values(), now)
        if len(batch) >= fmt.MAX_JOBS_PER_RECORD:
            yield fmt.encode_jobs(batch)
            batch = []
    if batch:
        yield fmt.encode_jobs(batch)


def rewrite_file(files, node, path: str, live_jobs=AOFPolicy.live_jobs) -> int:
    """Rewrite the AOF at ``path`` from the node's jobs, now: a temporary file,
    fsynced, renamed over it. Returns its size."""
    tmp = f"temp-rewriteaof-{files.getpid()}.aof"
    fd = files.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        size = 0
        for chunk in snapshot_chunks(node, 0, fmt.SHARDS_COUNT, header=True,
                                     live_jobs=live_jobs):
            files.write_all(fd, chunk)
            size += len(chunk)
        files.fsync(fd)
    except BaseException:
        files.close(fd)
        files.unlink_quietly(tmp)
        raise
    files.close(fd)
    files.replace(tmp, path)
    files.fsync_dir(path)
    return size


def fsync_close_dir(files, tmp_fd, old_fd, path) -> None:
    """Background part of a rewrite swap: make the new file and the rename
    durable, close the old descriptor."""
    try:
        files.fsync(tmp_fd)
    except OSError as e:
        log.warning("fsync of the rewritten AOF failed: %s", e)
    files.close(tmp_fd)
    if old_fd is not None:
        files.close(old_fd)
    files.fsync_dir(path)


class Rewrite:
    """One background rewrite of ``aof`` (the AppendOnlyFile: its node,
    policy, files, scheduler, clock and background work; told
    ``_rewrite_done``/``_rewrite_failed``): walks the job shards into a
    temporary file a slice at a time, keeping the records logged meanwhile for
    walked shards."""

    def __init__(self, aof) -> None:
        self.aof = aof
        self.files = files = aof.files
        self.tmp = f"temp-rewriteaof-bg-{files.getpid()}.aof"
        self.fd = files.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.started = aof.clock.monotonic()
        self.cursor = 0             # next shard to walk
        self.captured: list = []
        self.captured_len = 0
        self.size = 0
        self.synced_size = 0
        self.handle = None
        self.done = False
        try:
            self._write(fmt.file_header())
        except OSError:
            self.abort()
            raise

    def _write(self, data: bytes) -> None:
        self.files.write_all(self.fd, data)
        self.size += len(data)

    def schedule(self) -> None:
        self.handle = self.aof.loop.call_soon(self.step)

    def capture(self, items: list, data: bytes) -> None:
        """Records just logged: keep those the walk will not see."""
        cursor = self.cursor
        if cursor >= fmt.SHARDS_COUNT:
            kept = data
        else:
            kept_items = []
            for it in items:
                shard = fmt.item_shard(it)
                if shard is None:       # FLUSHALL: start the walk again
                    self.restart()
                    cursor = 0
                    kept_items = []
                elif shard < cursor:
                    kept_items.append(it)
            if len(kept_items) == len(items):
                kept = data
            elif kept_items:
                kept = fmt.encode_items(kept_items)
            else:
                return
        self.captured.append(kept)
        self.captured_len += len(kept)

    def restart(self) -> None:
        self.files.ftruncate(self.fd, fmt.FILE_HEADER_SIZE)
        self.files.lseek(self.fd, fmt.FILE_HEADER_SIZE, os.SEEK_SET)
        self.size = fmt.FILE_HEADER_SIZE
        self.cursor = 0
        self.captured = []
        self.captured_len = 0

    def step(self) -> None:
        self.handle = None
        if self.done:
            return
        aof = self.aof
        node = aof.node
        live_jobs = aof.policy.live_jobs
        perf_counter = aof.clock.perf_counter
        deadline = perf_counter() + REWRITE_SLICE
        now = node.clock()
        try:
            cursor = self.cursor
            shards = node.job_shards
            batch = []
            while cursor < fmt.SHARDS_COUNT:
                batch += live_jobs(shards[cursor].values(), now)
                cursor += 1
                if len(batch) >= fmt.MAX_JOBS_PER_RECORD:
                    self._write(fmt.encode_jobs(batch))
                    batch = []
                if perf_counter() > deadline:
                    break
            if batch:
                self._write(fmt.encode_jobs(batch))
            self.cursor = cursor
            if (aof.config.aof_rewrite_incremental_fsync
                    and self.size - self.synced_size >= INCREMENTAL_FSYNC):
                self.synced_size = self.size
                aof.bio.submit(self.files.fsync, self.fd)
            if cursor < fmt.SHARDS_COUNT:
                self.handle = aof.loop.call_soon(self.step)
                return
            # Walk done: write what was kept so far, fsync in the background,
            # then swap in the event loop.
            self.write_captured()
            fut = aof.bio.submit(self.files.fsync, self.fd)
            fut.add_done_callback(self._synced_threadsafe)
        except OSError as e:
            self.abort()
            aof._rewrite_failed(e)

    def write_captured(self) -> None:
        if self.captured:
            data = b"".join(self.captured)
            self.captured = []
            self.captured_len = 0
            self._write(data)

    def _synced_threadsafe(self, fut) -> None:     # runs in the bio thread
        try:
            self.aof.loop.call_soon_threadsafe(self._synced, fut)
        except RuntimeError:    # the loop is gone (shutdown)
            pass

    def _synced(self, fut) -> None:
        if self.done:
            return
        exc = fut.exception()
        if exc is not None:
            self.abort()
            self.aof._rewrite_failed(exc)
            return
        self.done = True
        self.aof._rewrite_done(self)

    def abort(self) -> None:
        self.done = True
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                self.aof.bio.submit(self.files.close, fd)
            except RuntimeError:        # executor already shut down
                self.files.close(fd)
        self.files.unlink_quietly(self.tmp)
        if self.aof.rewrite is self:
            self.aof.rewrite = None
