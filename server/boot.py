"""What the process does around its run: the pidfile, daemonizing, the garbage
collector's schedule."""

from __future__ import annotations

import gc
import os

from broker.config import Config


def write_pidfile(config: Config) -> None:
    if config.pidfile:
        with open(config.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")


def remove_pidfile(config: Config) -> None:
    if config.pidfile:
        try:
            os.unlink(config.pidfile)
        except OSError:
            pass


def tune_gc() -> None:
    """Jobs are long-lived GC-tracked objects, millions of them. With CPython's
    default schedule (a young collection every 700 allocations, a full one each
    time the heap grew 25%) the collector re-traverses every job about four
    times over its life: more than the job's own bookkeeping. Collect less
    often (jobs hold no reference cycles: they are freed by refcount whatever
    the schedule), and keep what exists at start-up (modules, config) out of
    every collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 20)


def daemonize() -> None:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
