"""The append-only file writer: one ``AppendOnlyFile`` while ``appendonly`` is on.

The Node's records (broker/records.py, its outputs) reach it through the output
driver (server/driver.py: ``append``), which calls ``flush()`` once per
event-loop turn before any reply or bus message of that turn leaves (the Redis
"beforeSleep" rule: a client never sees an id whose record was not at least
written), so with ``appendfsync always`` every acknowledged job is on disk, and
with ``everysec`` a kill -9 loses nothing already written (only an OS crash can
lose the last second).

This module writes, fsyncs (in the background under everysec), swaps a
rewritten file in and reports the INFO persistence fields. The rest is
elsewhere: when to fsync or rewrite, which jobs a rewrite keeps and what a
failed write does in broker/aof_policy.py; the record format in
broker/aof_format.py; the rewrite engine in server/aof_rewrite.py; reading the
file at start in server/aof_load.py.

What it runs on is injected (server/aof_runtime.py): the process's file
system, background thread, event loop and clocks, or the simulator's simulated
disk and virtual time (server/sim/), so the simulator's seeds run this writer.
"""

from __future__ import annotations

import asyncio
import logging
import os

from broker import aof_format as fmt
from broker import lifecycle
from broker.aof_policy import AOFPolicy
from broker.dispatch import CommandError
from server import aof_load
from server.aof_load import AOFLoadError, LoadProgress  # noqa: F401  (AOFLoadError: re-exported)
from server.aof_rewrite import Rewrite, fsync_close_dir, rewrite_file
from server.aof_runtime import AOFRuntime, process_runtime

log = logging.getLogger("server.aof")

# The everysec fsync is due a second after the previous one: checked at every
# flush and ten times a second (as Redis's serverCron), with rewrite retries.
CRON_INTERVAL = 0.1
REWRITE_RETRY = 5.0                     # seconds before a failed wait_rewrite starts again
# For tests only (the chaos suite's power-loss fault, chaos/disk.py): see SyncedSizeNote.
SYNCED_SIZE_ENV = "DISQUETTE_TEST_SYNCED_SIZE"
SYNCED_SUFFIX = ".synced"


class AppendOnlyFile:
    """The AOF of one node: see the module docstring. It reads the node's jobs
    (rewrite, load) and tells it its write status (``node.aof_error``:
    MISCONF); the node never holds it. ``synced_note``: tests only (see
    SyncedSizeNote)."""

    def __init__(self, node, config, runtime: AOFRuntime, policy: AOFPolicy | None = None,
                 synced_note: "SyncedSizeNote | None" = None) -> None:
        self.node = node
        self.config = config
        self.files = runtime.files
        self.bio = runtime.background
        self.loop = runtime.loop
        self.clock = runtime.clock
        self.exit = runtime.exit
        self.policy = policy if policy is not None else AOFPolicy(config)
        self.path = config.appendfilename
        self.fd = None
        self.state = "off"              # loading | on | wait_rewrite | off
        self.pending: list = []         # records (broker/records.py), in order
        self.outbuf = b""               # encoded but not written (write error)
        self.current_size = 0
        self.base_size = 0
        self.unsynced = False
        self.last_fsync = self._now_ms()
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
        self.rewrite: Rewrite | None = None     # the background rewrite in progress
        self.rewrite_retry_at = None
        self.cron_handle = None
        self.progress = LoadProgress(self.clock)
        self.loaded_jobs = 0
        self.last_time_mark = -1        # aof-history: the ms of the last T record
        self.synced_note = synced_note

    @classmethod
    def in_process(cls, node, config, loop) -> "AppendOnlyFile":
        """The process's writer: real files, a background thread, the event
        loop, the time module (and the tests' SyncedSizeNote when asked for)."""
        return cls(node, config, process_runtime(loop),
                   synced_note=SyncedSizeNote.from_env(config.appendfilename))

    def _now_ms(self) -> int:
        return self.clock.monotonic_ns() // 1_000_000

    # ----------------------------------------------------- the driver's input
    def append(self, records: list) -> None:
        """The node's records of one turn (written by the next ``flush``)."""
        self.pending.extend(records)

    # ------------------------------------------------------------- writing
    def flush(self, fsync: bool = False) -> None:
        """Encode what is pending and write it; fsync as the policy says (or
        when asked). Called by the server before replies are sent."""
        if self.state == "loading" or self.state == "off":
            return
        if self.pending:
            items, self.pending = self.pending, []
            data = fmt.encode_items(items)
            if self.node.persist_history:
                data = self._time_mark() + data
            if self.rewrite is not None:
                self.rewrite.capture(items, data)
            if self.fd is not None:
                self._write(data)
        elif self.outbuf and self.fd is not None:
            self._write(b"")
        if self.fd is not None and self.unsynced:
            rewriting = self.rewrite is not None
            if fsync or self.policy.fsync_before_replies(rewriting):
                started = self._latency_start()
                self._fsync_now()
                if not fsync:
                    self._latency_end("aof-fsync-always", started)
            else:
                self._fsync_if_due(rewriting)
        if (self.rewrite is None and self.state == "on"
                and self.policy.rewrite_due(self.current_size, self.base_size)):
            log.info("Starting automatic rewriting of AOF on %d%% growth",
                     self.policy.growth_percent(self.current_size, self.base_size))
            self._start_rewrite()

    def _time_mark(self) -> bytes:
        """aof-history: a T record before this write's records, when the ms changed."""
        now = self.node.clock()
        if now == self.last_time_mark:
            return b""
        self.last_time_mark = now
        return fmt.encode_time(now)

    def _write(self, data: bytes) -> None:
        if self.outbuf:
            data = self.outbuf + data
            self.outbuf = b""
        if not data:
            return
        view = memoryview(data)
        done = 0
        started = self._latency_start()
        try:
            while done < len(view):
                done += self.files.write(self.fd, view[done:])
        except OSError as e:
            if done:
                # Take back a partial record so the file stays a sequence of records.
                try:
                    self.files.ftruncate(self.fd, self.current_size)
                    done = 0
                except OSError:
                    self.current_size += done
            self.outbuf = bytes(view[done:])
            self._write_failed(e)
            return
        self._latency_end("aof-write", started)
        self.current_size += done
        self.unsynced = True
        if self.policy.write_succeeded(self.node):
            log.warning("AOF write error looks solved, Disquette can write again.")
        self.last_write_status = "ok"

    # LATENCY's events (broker/latency.py), timed only while the monitor is on.
    def _latency_start(self) -> int:
        return self.clock.monotonic_ns() if self.node.latency_threshold_ns else 0

    def _latency_end(self, event: str, started: int) -> None:
        if started:
            self.node.latency_sample(event, (self.clock.monotonic_ns() - started) // 1_000_000)

    def _write_failed(self, e: OSError) -> None:
        self.last_write_status = "err"
        self.last_write_error = e.strerror or str(e)
        if self.policy.write_failed(self.node, self.last_write_error):
            log.warning("Can't write to the append-only file: %s (appendfsync always): "
                        "exiting.", e.strerror)
            self._fatal()
            return
        now = self.clock.monotonic()
        if now - self.last_write_error_log > 30:
            self.last_write_error_log = now
            log.warning("Error writing to the AOF file: %s; will retry.", e.strerror)

    def _fatal(self) -> None:
        self.exit()

    def _timed_fdatasync(self, fd: int, size: int = -1) -> None:
        """fdatasync, timed (runs in the main thread or the background);
        ``size``: the file's size when it was asked for (the test hook's)."""
        perf_counter_ns = self.clock.perf_counter_ns
        start = perf_counter_ns()
        self.files.fdatasync(fd)
        ns = perf_counter_ns() - start
        self.fsyncs += 1
        self.fsync_ns += ns
        self.fsync_latency[min(ns.bit_length(), 63)] += 1
        if self.synced_note is not None:
            self.synced_note.synced(size)

    def _fsync_now(self) -> None:
        try:
            self._timed_fdatasync(self.fd, self.current_size)
        except OSError as e:
            log.warning("Can't fsync the append-only file: %s", e.strerror)
            if self.policy.errors_are_fatal():
                self._fatal()
            return
        self.unsynced = False
        self.last_fsync = self._now_ms()

    def _fsync_if_due(self, rewriting: bool) -> None:
        """everysec: an fsync in the background thread once the policy says
        it is due (none while the previous one still runs: aof_delayed_fsync)."""
        now = self._now_ms()
        if not self.policy.fsync_due(now, self.last_fsync, rewriting):
            return
        self.last_fsync = now
        if self.fsync_in_progress():
            self.delayed_fsync += 1         # the disk is slow: try again in a second
            return
        self.unsynced = False
        self.fsync_future = self.bio.submit(self._timed_fdatasync, self.fd, self.current_size)

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
        """Ten times a second: the everysec fsync, write and rewrite retries."""
        self.cron_handle = self.loop.call_later(CRON_INTERVAL, self.cron)
        if self.state == "off" or self.state == "loading":
            return
        if self.outbuf and self.fd is not None:
            self._write(b"")
        if self.fd is not None and self.unsynced:
            self._fsync_if_due(self.rewrite is not None)
        if (self.rewrite is None and self.rewrite_retry_at is not None
                and self.clock.monotonic() >= self.rewrite_retry_at):
            self.rewrite_retry_at = None
            self._start_rewrite()

    # ----------------------------------------------------------- lifecycle
    def _open_append(self) -> None:
        self.fd = self.files.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.current_size = self.base_size = self.files.size(self.fd)
        if self.synced_note is not None:
            self.synced_note.opened(self.current_size)

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
            self.bio.submit(self.files.close, fd)
        self.bio.shutdown(wait=True)
        if self.synced_note is not None:
            self.synced_note.close()
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
            self.rewrite_retry_at = (self.clock.monotonic() + REWRITE_RETRY
                                     if self.state == "wait_rewrite" else None)
            if raise_errors:
                raise CommandError(f"ERR Can't rewrite the append only file: {e.strerror}") from None
            return
        log.info("Background append only file rewriting started")
        self.rewrite.schedule()

    def _rewrite_done(self, rw: Rewrite) -> None:
        """Swap the rewritten file in (in the event loop, synchronously)."""
        self.flush()        # whatever is pending goes to the old file and the rewrite
        files = self.files
        try:
            started = self._latency_start()
            rw.write_captured()
            self._latency_end("aof-rewrite-diff-write", started)
            if self.policy.fsync_before_replies(rewriting=False):
                files.fsync(rw.fd)
            started = self._latency_start()
            files.replace(rw.tmp, self.path)
            self._latency_end("aof-rename", started)
            new_fd = files.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            rw.abort()
            self._rewrite_failed(e)
            return
        old_fd, self.fd = self.fd, new_fd
        tmp_fd = rw.fd
        rw.fd = None
        self.bio.submit(fsync_close_dir, files, tmp_fd, old_fd, self.path)
        if self.synced_note is not None:    # tests only: once the fsync above is done
            self.bio.submit(self.synced_note.synced, rw.size)
        self.rewrite = None
        self.last_time_mark = -1
        self.outbuf = b""       # those records were captured by the rewrite
        self.current_size = self.base_size = rw.size
        self.unsynced = False
        self.last_bgrewrite_status = "ok"
        self.last_rewrite_time = int(self.clock.monotonic() - rw.started)
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
            self.rewrite_retry_at = self.clock.monotonic() + REWRITE_RETRY

    def rewrite_now(self) -> None:
        """A synchronous rewrite (SHUTDOWN REWRITE-AOF)."""
        if self.rewrite is not None:
            self.rewrite.abort()
        self.flush()
        size = rewrite_file(self.files, self.node, self.path, self.policy.live_jobs)
        if self.fd is not None:
            self.files.close(self.fd)
        self._open_append()
        self.outbuf = b""
        self.unsynced = False
        self.last_time_mark = -1        # the new file's first write gets a time mark
        self.state = "on"
        self.last_rewrite_time = 0
        log.info("Append only file rewritten (%d bytes)", size)

    # ------------------------------------------------------------- loading
    def _loader(self, now: int):
        return fmt.Loader(self.node, now, self.config.aof_enqueue_jobs_once)

    async def load(self) -> None:
        """Load the AOF at start, a chunk per event-loop turn (clients get
        -LOADING meanwhile), then open it for appending. Raises AOFLoadError."""
        steps = self._load()
        try:
            for _ in steps:
                await asyncio.sleep(0)
        finally:
            steps.close()

    def load_now(self) -> None:
        """``load``, at once (the simulator's nodes, which start in one step)."""
        for _ in self._load():
            pass

    def _load(self):
        """The load: a generator, yielding after each chunk of the file."""
        self.state = "loading"
        self.node.loading = True
        self.progress.start = int(self.clock.time())
        started = self.clock.monotonic()
        files = self.files
        try:
            if files.exists(self.path):
                loader = self._loader(self.node.clock())
                torn = yield from aof_load.read_file(files, self.path, loader, self.progress)
                self._after_load(loader, torn)
                if loader.scanner.version is not None and loader.scanner.version < fmt.VERSION:
                    files.upgrade_header(self.path)
            else:
                log.info("No append only file %s yet: starting with an empty one", self.path)
                files.create_empty(self.path)
            self._open_append()
        except fmt.CorruptAOF as e:
            raise AOFLoadError(aof_load.corrupt_message(self.files, self.path, e)) from None
        except OSError as e:
            raise AOFLoadError(f"Can't open the append only file {self.path}: {e}") from None
        self.state = "on"
        self.node.loading = False
        aof_load.reset_enqueue_once(self.config, self.node.host)
        self.start_cron()
        log.info("DB loaded from append only file: %.3f seconds (%d jobs)",
                 self.clock.monotonic() - started, self.node.job_count)

    def _after_load(self, loader, torn) -> None:
        self.loaded_jobs = self.node.job_count
        aof_load.settle(self.files, self.path, loader, torn, self.config.aof_load_truncated)

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
            torn = aof_load.read_file_now(self.files, self.path, loader)
            self._after_load(loader, torn)
        except (fmt.CorruptAOF, AOFLoadError, OSError) as e:
            msg = (aof_load.corrupt_message(self.files, self.path, e) if isinstance(e, fmt.CorruptAOF)
                   else str(e))
            log.warning("DEBUG LOADAOF: %s", msg)
            raise CommandError(f"ERR Error loading the append only file: {msg}") from None
        if torn is not None:    # truncated: reopen at the new end
            self.files.close(self.fd)
            self._open_append()
        aof_load.reset_enqueue_once(self.config, self.node.host)

    # ---------------------------------------------------------------- INFO
    def info_fields(self) -> list:
        """INFO persistence: the writer's, the rewrite's and (while loading)
        the load's fields."""
        rw = self.rewrite
        state = {"on": "on", "wait_rewrite": "wait_rewrite", "loading": "on"}.get(self.state, "off")
        fields = [
            ("aof_enabled", 1),
            ("aof_state", state),
            ("aof_rewrite_in_progress", int(rw is not None)),
            ("aof_rewrite_scheduled", int(self.rewrite_retry_at is not None)),
            ("aof_last_rewrite_time_sec", self.last_rewrite_time),
            ("aof_current_rewrite_time_sec",
             int(self.clock.monotonic() - rw.started) if rw is not None else -1),
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
            fields += self.progress.info_fields()
        return fields


class SyncedSizeNote:
    """For tests only: with ``DISQUETTE_TEST_SYNCED_SIZE=1`` in the environment,
    the AOF's size at its last fsync is kept in ``<appendfilename>.synced``
    (one decimal number), so a test can cut the file there after kill -9 and
    lose what a power cut would lose (the page cache survives a process kill:
    chaos/disk.py's power-loss fault). It only records; it decides nothing."""

    def __init__(self, path: str) -> None:
        self.path = path + SYNCED_SUFFIX
        existed = os.path.exists(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.known = existed            # a previous process's note stands

    @classmethod
    def from_env(cls, aof_path: str) -> "SyncedSizeNote | None":
        return cls(aof_path) if os.environ.get(SYNCED_SIZE_ENV) else None

    def opened(self, size: int) -> None:
        """The file as opened at start: durable (a new file is created and
        fsynced) unless a previous process's note says less."""
        if not self.known:
            self.synced(size)

    def synced(self, size: int) -> None:
        if size >= 0:
            os.pwrite(self.fd, b"%20d\n" % size, 0)
            self.known = True

    def close(self) -> None:
        os.close(self.fd)
