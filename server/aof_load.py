"""Loading the AOF: at start, a chunk at a time (the process serves a turn of
its event loop between two: clients get -LOADING meanwhile, INFO shows the
progress), or at once (DEBUG LOADAOF). The bytes go to broker/aof_format.py's
Loader; this module reads the file (through the writer's file system:
server/aof_files.py), deals with a torn tail (aof-load-truncated) and says what
is wrong when the file cannot load."""

from __future__ import annotations

import gc
import logging
import os

from broker import aof_format as fmt
from server.disque_import import disque_aof_hint

log = logging.getLogger("server.aof")

LOAD_CHUNK = 1 << 20                    # bytes read per event-loop turn while loading
FREEZE_AFTER_LOAD = 100_000             # gc.freeze() after loading this many jobs


class AOFLoadError(Exception):
    """The AOF cannot be loaded; the message says why and what to do."""


class LoadProgress:
    """How far the load at start is (INFO loading_* fields); ``clock``: the
    writer's (its ``time()``)."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.start = 0          # unix time (s)
        self.total = 0          # bytes
        self.done = 0

    def info_fields(self) -> list:
        total = self.total or 1
        elapsed = max(1, int(self.clock.time()) - self.start)
        done = self.done
        eta = int((self.total - done) * elapsed / done) if done else 1
        return [
            ("loading_start_time", self.start),
            ("loading_total_bytes", self.total),
            ("loading_loaded_bytes", done),
            ("loading_loaded_perc", f"{done * 100 / total:.2f}"),
            ("loading_eta_seconds", eta),
        ]


def read_file(files, path: str, loader: fmt.Loader, progress: LoadProgress):
    """Feed the file to ``loader`` a chunk at a time: a generator, yielding
    after each chunk, that returns the torn tail or None. The cyclic GC is off
    meanwhile (millions of new objects, none in a cycle)."""
    gc_was = gc.isenabled()
    gc.disable()
    try:
        fd = files.open(path, os.O_RDONLY)
        try:
            progress.total = files.size(fd)
            while True:
                chunk = files.read(fd, LOAD_CHUNK)
                if not chunk:
                    break
                loader.feed(chunk)
                progress.done += len(chunk)
                yield
        finally:
            files.close(fd)
        return loader.finish()
    finally:
        if loader.stats["jobs"] >= FREEZE_AFTER_LOAD:
            # Loaded jobs live long and form no cycles: keep the cyclic
            # GC from walking millions of them on every full collection.
            # Frozen before the GC is back on, or its first pass (right
            # away: a million new objects) walks them all once.
            gc.freeze()
        if gc_was:
            gc.enable()


def read_file_now(files, path: str, loader: fmt.Loader):
    """Feed the whole file to ``loader`` at once; returns the torn tail or None."""
    fd = files.open(path, os.O_RDONLY)
    try:
        while True:
            chunk = files.read(fd, LOAD_CHUNK)
            if not chunk:
                break
            loader.feed(chunk)
    finally:
        files.close(fd)
    return loader.finish()


def corrupt_message(files, path: str, e: fmt.CorruptAOF) -> str:
    if isinstance(e, fmt.BadHeader):
        hint = disque_aof_hint(path, read_head(files, path))
        return (f"Bad file format reading the append only file {path}: {e}"
                + (f". {hint}" if hint else ""))
    return (f"Bad file format reading the append only file {path}: {e}. "
            f"Make a backup of it, then run disquette-check-aof --fix {path} "
            f"(or investigate: the damage is not a torn last record)")


def read_head(files, path: str, size: int = 16) -> bytes:
    """The first bytes of ``path`` (empty if it cannot be read)."""
    try:
        fd = files.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return files.read(fd, size)
    except OSError:
        return b""
    finally:
        files.close(fd)


def settle(files, path: str, loader: fmt.Loader, torn, load_truncated: bool) -> None:
    """After a load: an empty file gets its header; a torn tail is cut off if
    aof-load-truncated allows (else AOFLoadError)."""
    st = loader.stats
    if torn is None and not loader.scanner.header_ok:     # an empty file
        files.create_empty(path)
    if torn is not None:
        if not load_truncated:
            raise AOFLoadError(
                f"The append only file {path} ends with a {torn}. "
                f"Start with aof-load-truncated yes, or run "
                f"disquette-check-aof --fix {path}")
        log.warning("!!! Warning: the append only file %s ends with a %s. "
                    "Truncating it to %d bytes (aof-load-truncated yes).",
                    path, torn, torn.offset)
        if torn.offset < fmt.FILE_HEADER_SIZE:
            files.create_empty(path)
        else:
            files.truncate(path, torn.offset)
    log.info("AOF %s: %d records, %d job records, %d deleted, %d acked, %d expired",
             path, st["records"], st["jobs"], st["deleted"], st["acked"], st["expired"])


def reset_enqueue_once(config, host) -> None:
    """aof-enqueue-jobs-once applies to one load: reset it, in memory and (so that
    a later restart does not queue everything again) in the config file."""
    if not config.aof_enqueue_jobs_once:
        return
    config.aof_enqueue_jobs_once = False
    log.info("Jobs were put back in their queues (aof-enqueue-jobs-once): "
             "the option is now reset to no")
    if config.config_file:
        try:
            host.rewrite_config()
        except OSError as e:
            log.warning("Could not rewrite the config file to reset "
                        "aof-enqueue-jobs-once: %s", e)
