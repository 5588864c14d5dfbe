"""What an AOF writer (server/aof.py) runs on, injected: the file system, the
executor of its background work (fsyncs, closes), the scheduler of its cron and
rewrite slices, its clock, and how the process exits when a write must stop it.
The process's are the real ones (``process_runtime``); the simulator's run the
same writer over a simulated disk, in virtual time (server/sim/inprocess.py)."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple, NoReturn

from server.aof_files import OSFiles


class AOFRuntime(NamedTuple):
    # os.open, os.write, os.fsync... as methods (server/aof_files.py)
    files: Any
    # submit(fn, *args) -> a concurrent.futures.Future (done, exception,
    # add_done_callback); shutdown(wait)
    background: Any
    # call_soon, call_later(seconds), call_soon_threadsafe -> handles with cancel()
    loop: Any
    # monotonic(), monotonic_ns(), perf_counter(), perf_counter_ns(), time()
    clock: Any
    exit: Callable[[], NoReturn]


def exit_process() -> NoReturn:
    logging.shutdown()
    os._exit(1)


def process_runtime(loop, exit: Callable[[], NoReturn] = exit_process) -> AOFRuntime:
    """The real file system, one background thread, the event loop, the time
    module's clocks."""
    return AOFRuntime(OSFiles(), ThreadPoolExecutor(1, thread_name_prefix="aof-bio"),
                      loop, time, exit)
