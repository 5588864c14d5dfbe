"""Loading the AOF: at start, a chunk per event-loop turn (clients get -LOADING
meanwhile, INFO shows the progress), or at once (DEBUG LOADAOF). The bytes go
to broker/aof_format.py's Loader; this module reads the file, deals with a torn
tail (aof-load-truncated) and says what is wrong when the file cannot load."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time

from broker import aof_format as fmt
from server.aof_files import create_empty
from server.disque_import import disque_aof_hint

log = logging.getLogger("server.aof")

LOAD_CHUNK = 1 << 20                    # bytes read per event-loop turn while loading
FREEZE_AFTER_LOAD = 100_000             # gc.freeze() after loading this many jobs


class AOFLoadError(Exception):
    """The AOF cannot be loaded; the message says why and what to do."""


class LoadProgress:
    """How far the load at start is (INFO loading_* fields)."""

    def __init__(self) -> None:
        self.start = 0          # unix time (s)
        self.total = 0          # bytes
        self.done = 0

    def info_fields(self) -> list:
        total = self.total or 1
        elapsed = max(1, int(time.time()) - self.start)
        done = self.done
        eta = int((self.total - done) * elapsed / done) if done else 1
        return [
            ("loading_start_time", self.start),
            ("loading_total_bytes", self.total),
            ("loading_loaded_bytes", done),
            ("loading_loaded_perc", f"{done * 100 / total:.2f}"),
            ("loading_eta_seconds", eta),
        ]


async def read_file(path: str, loader: fmt.Loader, progress: LoadProgress):
    """Feed the file to ``loader`` a chunk per event-loop turn; returns the
    torn tail or None. The cyclic GC is off meanwhile (millions of new objects,
    none in a cycle)."""
    gc_was = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as f:
            progress.total = os.fstat(f.fileno()).st_size
            while True:
                chunk = f.read(LOAD_CHUNK)
                if not chunk:
                    break
                loader.feed(chunk)
                progress.done += len(chunk)
                await asyncio.sleep(0)
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


def read_file_now(path: str, loader: fmt.Loader):
    """Feed the whole file to ``loader`` at once; returns the torn tail or None."""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(LOAD_CHUNK)
            if not chunk:
                break
            loader.feed(chunk)
    return loader.finish()


def corrupt_message(path: str, e: fmt.CorruptAOF) -> str:
    if isinstance(e, fmt.BadHeader):
        hint = disque_aof_hint(path)
        return (f"Bad file format reading the append only file {path}: {e}"
                + (f". {hint}" if hint else ""))
    return (f"Bad file format reading the append only file {path}: {e}. "
            f"Make a backup of it, then run disquette-check-aof --fix {path} "
            f"(or investigate: the damage is not a torn last record)")


def settle(path: str, loader: fmt.Loader, torn, load_truncated: bool) -> None:
    """After a load: an empty file gets its header; a torn tail is cut off if
    aof-load-truncated allows (else AOFLoadError)."""
    st = loader.stats
    if torn is None and not loader.scanner.header_ok:     # an empty file
        create_empty(path)
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
            create_empty(path)
        else:
            os.truncate(path, torn.offset)
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
