"""The append-only file: writer, fsync policies, background rewrite, loading.

This is the I/O shell around broker/aof_format.py (the record format and the
loader, sans-IO). One ``AppendOnlyFile`` exists while ``appendonly`` is on; the
Node's records (broker/records.py, its outputs) reach it through the output
driver (server/driver.py: ``append``), which calls ``flush()`` once per
event-loop turn before any reply or bus message of that turn leaves (the Redis
"beforeSleep" rule: a client never sees an id whose record was not at least
written), so with ``appendfsync always`` every acknowledged job is on disk, and
with ``everysec`` a kill -9 loses nothing already written (only an OS crash can
lose the last second).

Rewrite (BGREWRITEAOF, automatic, ``CONFIG SET appendonly yes``): the job shards
are walked in order, a few milliseconds per event-loop turn, into a temporary
file, while the live log goes on. A record logged meanwhile is also kept for the
new file if its job's shard was already walked (the walk sees the others as they
are when it gets there). When the walk is done the kept records are appended,
the file is fsync'ed and renamed over the old one (os.replace: atomic).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from broker import aof_format as fmt
from broker import lifecycle
from broker.dispatch import CommandError
from broker.job import ACKED

log = logging.getLogger("server.aof")

LOAD_CHUNK = 1 << 20                    # bytes read per event-loop turn while loading
REWRITE_SLICE = 0.004                   # seconds of rewrite work per event-loop turn
INCREMENTAL_FSYNC = 32 * 1024 * 1024    # aof-rewrite-incremental-fsync
CRON_INTERVAL = 1.0                     # everysec fsync, rewrite retries
FREEZE_AFTER_LOAD = 100_000             # gc.freeze() after loading this many jobs

_fdatasync = getattr(os, "fdatasync", os.fsync)


class AOFLoadError(Exception):
    """The AOF cannot be loaded; the message says why and what to do."""


def _fsync_dir(path: str) -> None:
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


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])


class AppendOnlyFile:
    """The AOF of one node: see the module docstring. It reads the node's jobs
    (rewrite, load) and tells it its write status (``node.aof_error``:
    MISCONF); the node never holds it."""

    def __init__(self, node, config, loop, exit_on_fatal=True) -> None:
        self.node = node
        self.config = config
        self.loop = loop
        self.exit_on_fatal = exit_on_fatal
        self.path = config.appendfilename
        self.fd = None
        self.state = "off"              # loading | on | wait_rewrite | off
        self.pending: list = []         # records (broker/records.py), in order
        self.outbuf = b""               # encoded but not written (write error)
        self.current_size = 0
        self.base_size = 0
        self.unsynced = False
        self.last_fsync = time.monotonic()
        self.fsync_future = None
        self.delayed_fsync = 0
        # fsync latency (GET /metrics, INFO): count, total ns, and a histogram
        # by bit length of the duration in ns (as the commands' in broker/node.py).
        self.fsyncs = 0
        self.fsync_ns = 0
        self.fsync_latency = [0] * 64
        self.last_write_status = "ok"
        self.last_write_error = ""      # strerror of the failing write (MISCONF)
        self.last_write_error_log = 0.0
        self.last_bgrewrite_status = "ok"
        self.last_rewrite_time = -1
        self.rewrite = None             # the Rewrite in progress
        self.rewrite_retry_at = None
        self.bio = ThreadPoolExecutor(1, thread_name_prefix="aof-bio")
        self.cron_handle = None
        self.loading_start = 0
        self.loading_total = 0
        self.loading_done = 0
        self.loaded_jobs = 0

    # ----------------------------------------------------- the driver's input
    def append(self, records: list) -> None:
        """The node's records of one turn (written by the next ``flush``)."""
        self.pending.extend(records)

    # ------------------------------------------------------------- writing
    def flush(self, fsync: bool = False) -> None:
        """Encode what is pending and write it; fsync too under ``always`` (or
        when asked). Called by the server before replies are sent."""
        if self.state == "loading" or self.state == "off":
            return
        if self.pending:
            items, self.pending = self.pending, []
            data = fmt.encode_items(items)
            if self.rewrite is not None:
                self.rewrite.capture(items, data)
            if self.fd is not None:
                self._write(data)
        elif self.outbuf and self.fd is not None:
            self._write(b"")
        if self.fd is not None and self.unsynced:
            if fsync or (self.config.appendfsync == "always" and not (
                    self.rewrite is not None and self.config.no_appendfsync_on_rewrite)):
                self._fsync_now()
        if self.rewrite is None and self.state == "on":
            self._maybe_auto_rewrite()

    def _write(self, data: bytes) -> None:
        if self.outbuf:
            data = self.outbuf + data
            self.outbuf = b""
        if not data:
            return
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                done += os.write(self.fd, view[done:])
        except OSError as e:
            if done:
                # Take back a partial record so the file stays a sequence of records.
                try:
                    os.ftruncate(self.fd, self.current_size)
                    done = 0
                except OSError:
                    self.current_size += done
            self.outbuf = bytes(view[done:])
            self._write_failed(e)
            return
        self.current_size += done
        self.unsynced = True
        if self.last_write_status != "ok":
            log.warning("AOF write error looks solved, Disquette can write again.")
            self.last_write_status = "ok"
            self.node.aof_error = None

    def _write_failed(self, e: OSError) -> None:
        self.last_write_status = "err"
        self.last_write_error = e.strerror or str(e)
        self.node.aof_error = self.last_write_error
        if self.config.appendfsync == "always":
            # As Redis: acknowledged writes can no longer be guaranteed.
            log.warning("Can't write to the append-only file: %s (appendfsync always): "
                        "exiting.", e.strerror)
            self._fatal()
            return
        now = time.monotonic()
        if now - self.last_write_error_log > 30:
            self.last_write_error_log = now
            log.warning("Error writing to the AOF file: %s; will retry.", e.strerror)

    def _fatal(self) -> None:
        if self.exit_on_fatal:
            logging.shutdown()
            os._exit(1)
        raise OSError("fatal AOF error")

    def _timed_fdatasync(self, fd: int) -> None:
        """fdatasync, timed (runs in the main thread or the bio thread)."""
        start = time.perf_counter_ns()
        _fdatasync(fd)
        ns = time.perf_counter_ns() - start
        self.fsyncs += 1
        self.fsync_ns += ns
        self.fsync_latency[min(ns.bit_length(), 63)] += 1

    def _fsync_now(self) -> None:
        try:
            self._timed_fdatasync(self.fd)
        except OSError as e:
            log.warning("Can't fsync the append-only file: %s", e.strerror)
            if self.config.appendfsync == "always":
                self._fatal()
            return
        self.unsynced = False
        self.last_fsync = time.monotonic()

    def _bio_fsync(self) -> None:
        fd = self.fd
        self.unsynced = False
        self.last_fsync = time.monotonic()
        self.fsync_future = self.bio.submit(self._timed_fdatasync, fd)

    def fsync_in_progress(self) -> bool:
        f = self.fsync_future
        if f is None:
            return False
        if f.done():
            self.fsync_future = None
            exc = f.exception()
            if exc is not None:
                log.warning("Background AOF fsync failed: %s", exc)
            return False
        return True

    def cron(self) -> None:
        """Once a second: everysec fsync in the background thread, retries."""
        self.cron_handle = self.loop.call_later(CRON_INTERVAL, self.cron)
        if self.state == "off" or self.state == "loading":
            return
        if self.outbuf and self.fd is not None:
            self._write(b"")
        if (self.fd is not None and self.unsynced and self.config.appendfsync == "everysec"
                and not (self.rewrite is not None and self.config.no_appendfsync_on_rewrite)):
            if self.fsync_in_progress():
                self.delayed_fsync += 1
            else:
                self._bio_fsync()
        if (self.rewrite is None and self.rewrite_retry_at is not None
                and time.monotonic() >= self.rewrite_retry_at):
            self.rewrite_retry_at = None
            self._start_rewrite()

    def _maybe_auto_rewrite(self) -> None:
        pct = self.config.auto_aof_rewrite_percentage
        if not pct or self.current_size <= self.config.auto_aof_rewrite_min_size:
            return
        base = self.base_size or 1
        if (self.current_size * 100 // base) - 100 >= pct:
            log.info("Starting automatic rewriting of AOF on %d%% growth",
                     (self.current_size * 100 // base) - 100)
            self._start_rewrite()

    # ----------------------------------------------------------- lifecycle
    def _open_append(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.current_size = self.base_size = os.fstat(self.fd).st_size

    def _create_empty(self) -> None:
        """A new AOF holding just the header, made atomically."""
        tmp = f"temp-newaof-{os.getpid()}.aof"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, fmt.file_header())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.path)

    def start_cron(self) -> None:
        if self.cron_handle is None:
            self.cron_handle = self.loop.call_later(CRON_INTERVAL, self.cron)

    def enable_at_runtime(self) -> None:
        """CONFIG SET appendonly yes: log from now on, into a rewrite of the
        current jobs that becomes the AOF when done (aof_state wait_rewrite)."""
        self.state = "wait_rewrite"
        self.start_cron()
        self._start_rewrite(raise_errors=True)

    def stop(self) -> None:
        """CONFIG SET appendonly no: write and fsync what is pending, close."""
        if self.rewrite is not None:
            self.rewrite.abort()
        if self.state == "on":
            self.flush(fsync=True)
        self._close()

    def _close(self) -> None:
        if self.cron_handle is not None:
            self.cron_handle.cancel()
            self.cron_handle = None
        fd, self.fd = self.fd, None
        if fd is not None:
            self.bio.submit(os.close, fd)
        self.bio.shutdown(wait=True)
        self.state = "off"

    def shutdown(self, mode) -> None:
        """SHUTDOWN/SIGTERM: flush and fsync; ``rewrite-aof`` first rewrites the
        file from the jobs in memory, so a controlled restart keeps queues exactly."""
        if self.state == "loading" or self.state == "off":
            self._close()
            return
        if self.rewrite is not None:
            self.rewrite.abort()
        try:
            if mode == "rewrite-aof" or self.state == "wait_rewrite":
                self.rewrite_now()
            else:
                self.flush(fsync=True)
        except OSError as e:
            log.warning("Error writing the AOF at shutdown: %s", e)
        self._close()

    # ------------------------------------------------------------ rewrite
    def start_rewrite(self) -> str:
        """BGREWRITEAOF."""
        if self.state == "loading":
            raise CommandError("LOADING Disque is loading the dataset in memory")
        if self.rewrite is not None:
            raise CommandError("ERR Background append only file rewriting already in progress")
        self._start_rewrite(raise_errors=True)
        return "Background append only file rewriting started"

    def _start_rewrite(self, raise_errors: bool = False) -> None:
        try:
            self.rewrite = Rewrite(self)
        except OSError as e:
            self.last_bgrewrite_status = "err"
            log.warning("Can't start the AOF rewrite: %s", e)
            self.rewrite_retry_at = time.monotonic() + 5 if self.state == "wait_rewrite" else None
            if raise_errors:
                raise CommandError(f"ERR Can't rewrite the append only file: {e.strerror}") from None
            return
        log.info("Background append only file rewriting started")
        self.rewrite.schedule()

    def _rewrite_done(self, rw: "Rewrite") -> None:
        """Swap the rewritten file in (in the event loop, synchronously)."""
        self.flush()        # whatever is pending goes to the old file and the rewrite
        try:
            rw.write_captured()
            if self.config.appendfsync == "always":
                os.fsync(rw.fd)
            os.replace(rw.tmp, self.path)
            new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            rw.abort()
            self._rewrite_failed(e)
            return
        old_fd, self.fd = self.fd, new_fd
        tmp_fd = rw.fd
        rw.fd = None
        self.bio.submit(_fsync_close_dir, tmp_fd, old_fd, self.path)
        self.rewrite = None
        self.outbuf = b""       # those records were captured by the rewrite
        self.current_size = self.base_size = rw.size
        self.unsynced = False
        self.last_bgrewrite_status = "ok"
        self.last_rewrite_time = int(time.monotonic() - rw.started)
        was = self.state
        self.state = "on"
        if was == "wait_rewrite":
            log.info("AOF rewrite done: the append only file is now on (%d bytes)", rw.size)
        else:
            log.info("Background AOF rewrite finished successfully (%d bytes)", rw.size)

    def _rewrite_failed(self, e: Exception) -> None:
        self.rewrite = None
        self.last_bgrewrite_status = "err"
        log.warning("Background AOF rewrite failed: %s", e)
        if self.state == "wait_rewrite":
            self.rewrite_retry_at = time.monotonic() + 5

    def rewrite_now(self) -> None:
        """A synchronous rewrite (SHUTDOWN REWRITE-AOF)."""
        if self.rewrite is not None:
            self.rewrite.abort()
        self.flush()
        tmp = f"temp-rewriteaof-{os.getpid()}.aof"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size = 0
            for chunk in snapshot_chunks(self.node, 0, fmt.SHARDS_COUNT, header=True):
                _write_all(fd, chunk)
                size += len(chunk)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.path)
        if self.fd is not None:
            os.close(self.fd)
        self._open_append()
        self.outbuf = b""
        self.unsynced = False
        self.state = "on"
        self.last_rewrite_time = 0
        log.info("Append only file rewritten (%d bytes)", size)

    # ------------------------------------------------------------- loading
    def _loader(self, now: int):
        return fmt.Loader(self.node, now, self.config.aof_enqueue_jobs_once)

    async def load(self) -> None:
        """Load the AOF at start, a chunk per event-loop turn (clients get
        -LOADING meanwhile), then open it for appending. Raises AOFLoadError."""
        self.state = "loading"
        self.node.loading = True
        self.loading_start = int(time.time())
        started = time.monotonic()
        try:
            if os.path.exists(self.path):
                loader = self._loader(self.node.clock())
                gc_was = gc.isenabled()
                gc.disable()
                try:
                    with open(self.path, "rb") as f:
                        self.loading_total = os.fstat(f.fileno()).st_size
                        while True:
                            chunk = f.read(LOAD_CHUNK)
                            if not chunk:
                                break
                            loader.feed(chunk)
                            self.loading_done += len(chunk)
                            await asyncio.sleep(0)
                    torn = loader.finish()
                finally:
                    if loader.stats["jobs"] >= FREEZE_AFTER_LOAD:
                        # Loaded jobs live long and form no cycles: keep the cyclic
                        # GC from walking millions of them on every full collection.
                        # Frozen before the GC is back on, or its first pass (right
                        # away: a million new objects) walks them all once.
                        gc.freeze()
                    if gc_was:
                        gc.enable()
                self._after_load(loader, torn)
            else:
                log.info("No append only file %s yet: starting with an empty one", self.path)
                self._create_empty()
            self._open_append()
        except fmt.CorruptAOF as e:
            raise AOFLoadError(self._corrupt_message(e)) from None
        except OSError as e:
            raise AOFLoadError(f"Can't open the append only file {self.path}: {e}") from None
        self.state = "on"
        self.node.loading = False
        self._reset_enqueue_once()
        self.start_cron()
        log.info("DB loaded from append only file: %.3f seconds (%d jobs)",
                 time.monotonic() - started, self.node.job_count)

    def _corrupt_message(self, e: fmt.CorruptAOF) -> str:
        if isinstance(e, fmt.BadHeader):
            return f"Bad file format reading the append only file {self.path}: {e}"
        return (f"Bad file format reading the append only file {self.path}: {e}. "
                f"Make a backup of it, then run disquette-check-aof --fix {self.path} "
                f"(or investigate: the damage is not a torn last record)")

    def _after_load(self, loader, torn) -> None:
        st = loader.stats
        self.loaded_jobs = self.node.job_count
        if torn is None and not loader.scanner.header_ok:     # an empty file
            self._create_empty()
        if torn is not None:
            if not self.config.aof_load_truncated:
                raise AOFLoadError(
                    f"The append only file {self.path} ends with a {torn}. "
                    f"Start with aof-load-truncated yes, or run "
                    f"disquette-check-aof --fix {self.path}")
            log.warning("!!! Warning: the append only file %s ends with a %s. "
                        "Truncating it to %d bytes (aof-load-truncated yes).",
                        self.path, torn, torn.offset)
            if torn.offset < fmt.FILE_HEADER_SIZE:
                self._create_empty()
            else:
                os.truncate(self.path, torn.offset)
        log.info("AOF %s: %d records, %d job records, %d deleted, %d acked, %d expired",
                 self.path, st["records"], st["jobs"], st["deleted"], st["acked"], st["expired"])

    def _reset_enqueue_once(self) -> None:
        """aof-enqueue-jobs-once applies to one load: reset it, in memory and (so that
        a later restart does not queue everything again) in the config file."""
        cfg = self.config
        if not cfg.aof_enqueue_jobs_once:
            return
        cfg.aof_enqueue_jobs_once = False
        log.info("Jobs were put back in their queues (aof-enqueue-jobs-once): "
                 "the option is now reset to no")
        if cfg.config_file:
            try:
                self.node.host.rewrite_config()
            except OSError as e:
                log.warning("Could not rewrite the config file to reset "
                            "aof-enqueue-jobs-once: %s", e)

    def debug_loadaof(self) -> None:
        """DEBUG LOADAOF: write and fsync, drop every job, load the file again."""
        if self.state == "loading":
            raise CommandError("LOADING Disque is loading the dataset in memory")
        if self.rewrite is not None:
            self.rewrite.abort()
        if self.state == "wait_rewrite":
            self.rewrite_now()
        self.append(self.node.take_records())   # this turn's, not taken by the driver yet
        self.flush(fsync=True)
        node = self.node
        lifecycle.flush_all(node, record=False)
        loader = self._loader(node.clock())
        try:
            with open(self.path, "rb") as f:
                while True:
                    chunk = f.read(LOAD_CHUNK)
                    if not chunk:
                        break
                    loader.feed(chunk)
            torn = loader.finish()
            self._after_load(loader, torn)
        except (fmt.CorruptAOF, AOFLoadError, OSError) as e:
            msg = self._corrupt_message(e) if isinstance(e, fmt.CorruptAOF) else str(e)
            log.warning("DEBUG LOADAOF: %s", msg)
            raise CommandError(f"ERR Error loading the append only file: {msg}") from None
        if torn is not None:    # truncated: reopen at the new end
            os.close(self.fd)
            self._open_append()
        self._reset_enqueue_once()

    # ---------------------------------------------------------------- INFO
    def info_fields(self) -> list:
        rw = self.rewrite
        state = {"on": "on", "wait_rewrite": "wait_rewrite", "loading": "on"}.get(self.state, "off")
        fields = [
            ("aof_enabled", 1),
            ("aof_state", state),
            ("aof_rewrite_in_progress", int(rw is not None)),
            ("aof_rewrite_scheduled", int(self.rewrite_retry_at is not None)),
            ("aof_last_rewrite_time_sec", self.last_rewrite_time),
            ("aof_current_rewrite_time_sec",
             int(time.monotonic() - rw.started) if rw is not None else -1),
            ("aof_last_bgrewrite_status", self.last_bgrewrite_status),
            ("aof_last_write_status", self.last_write_status),
            ("aof_fsync_policy", self.config.appendfsync),
            ("aof_current_size", self.current_size),
            ("aof_base_size", self.base_size),
            ("aof_pending_rewrite", 0),
            ("aof_buffer_length", len(self.outbuf)),
            ("aof_pending_records", len(self.pending)),
            ("aof_rewrite_buffer_length", rw.captured_len if rw is not None else 0),
            ("aof_rewrite_progress_shards", rw.cursor if rw is not None else 0),
            ("aof_pending_bio_fsync", int(self.fsync_in_progress())),
            ("aof_delayed_fsync", self.delayed_fsync),
            ("aof_loaded_jobs", self.loaded_jobs),
            ("aof_fsyncs", self.fsyncs),                    # (ext)
            ("aof_fsync_usec", self.fsync_ns // 1000),      # (ext)
        ]
        if self.state == "loading":
            total = self.loading_total or 1
            elapsed = max(1, int(time.time()) - self.loading_start)
            done = self.loading_done
            eta = int((self.loading_total - done) * elapsed / done) if done else 1
            fields += [
                ("loading_start_time", self.loading_start),
                ("loading_total_bytes", self.loading_total),
                ("loading_loaded_bytes", done),
                ("loading_loaded_perc", f"{done * 100 / total:.2f}"),
                ("loading_eta_seconds", eta),
            ]
        return fields


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_close_dir(tmp_fd, old_fd, path) -> None:
    """Background part of a rewrite swap: make the new file and the rename
    durable, close the old descriptor."""
    try:
        os.fsync(tmp_fd)
    except OSError as e:
        log.warning("fsync of the rewritten AOF failed: %s", e)
    os.close(tmp_fd)
    if old_fd is not None:
        os.close(old_fd)
    _fsync_dir(path)


def snapshot_chunks(node, start: int, stop: int, now: int | None = None,
                    header: bool = False):
    """J records for the live (not acked, not expired) jobs of shards
    [start, stop), after the file header if ``header``."""
    if header:
        yield fmt.file_header()
    if now is None:
        now = node.clock()
    batch = []
    shards = node.job_shards
    for i in range(start, stop):
        for job in shards[i].values():
            if job.state != ACKED and job.etime > now:
                batch.append(job)
        if len(batch) >= fmt.MAX_JOBS_PER_RECORD:
            yield fmt.encode_jobs(batch)
            batch = []
    if batch:
        yield fmt.encode_jobs(batch)


class Rewrite:
    """One background rewrite: walks the job shards into a temporary file a
    slice at a time, keeping the records logged meanwhile for walked shards."""

    def __init__(self, aof: AppendOnlyFile) -> None:
        self.aof = aof
        self.tmp = f"temp-rewriteaof-bg-{os.getpid()}.aof"
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.started = time.monotonic()
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
        _write_all(self.fd, data)
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
        os.ftruncate(self.fd, fmt.FILE_HEADER_SIZE)
        os.lseek(self.fd, fmt.FILE_HEADER_SIZE, os.SEEK_SET)
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
        deadline = time.perf_counter() + REWRITE_SLICE
        now = node.clock()
        try:
            cursor = self.cursor
            shards = node.job_shards
            batch = []
            while cursor < fmt.SHARDS_COUNT:
                for job in shards[cursor].values():
                    if job.state != ACKED and job.etime > now:
                        batch.append(job)
                cursor += 1
                if len(batch) >= fmt.MAX_JOBS_PER_RECORD:
                    self._write(fmt.encode_jobs(batch))
                    batch = []
                if time.perf_counter() > deadline:
                    break
            if batch:
                self._write(fmt.encode_jobs(batch))
            self.cursor = cursor
            if (aof.config.aof_rewrite_incremental_fsync
                    and self.size - self.synced_size >= INCREMENTAL_FSYNC):
                self.synced_size = self.size
                aof.bio.submit(os.fsync, self.fd)
            if cursor < fmt.SHARDS_COUNT:
                self.handle = aof.loop.call_soon(self.step)
                return
            # Walk done: write what was kept so far, fsync in the background,
            # then swap in the event loop.
            self.write_captured()
            fut = aof.bio.submit(os.fsync, self.fd)
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
                self.aof.bio.submit(os.close, fd)
            except RuntimeError:        # executor already shut down
                os.close(fd)
        _unlink(self.tmp)
        if self.aof.rewrite is self:
            self.aof.rewrite = None
