"""The effects and facts the core asks of the process (broker/node.py Host),
carried out for real: shutdown, CONFIG REWRITE's file, DEBUG SLEEP/CRASH/
RESTART, INFO's memory and CPU figures, the AOF commands, and the run-time
reconfiguration a CONFIG SET asks for (server/reconfigure.py)."""

from __future__ import annotations

import ctypes
import gc
import os
import time

from broker.commands.server import COMPILED_CORE
from broker.dispatch import CommandError
from broker.node import Host
from protocol.resp import READER
from server import reconfigure
from server.aof_files import OSFiles
from server.aof_rewrite import rewrite_file

try:    # glibc: hand the free pages inside the heap back to the system
    _malloc_trim = ctypes.CDLL(None).malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None

# Up to this many live jobs, release_memory runs a full collection first. It
# walks the lists that hold the jobs (2.3 ms per 100,000 compiled) and, in the
# pure build, the jobs themselves (44 ms per 100,000): beyond that the few MB
# it gives back are not worth the stall.
FREE_LISTS_MAX_JOBS = 100_000 if COMPILED_CORE == "yes" else 10_000


class ServerHost(Host):
    """The effects the Node may ask for, on the running Server
    (server/process.py)."""

    def __init__(self, server) -> None:
        self.server = server
        self.pid = os.getpid()

    def config_changed(self, name: str) -> None:
        """A directive changed (CONFIG SET): apply it to the process; raising
        ConfigError refuses the change."""
        reconfigure.config_changed(self.server, name)

    def shutdown(self, mode: str) -> None:
        self.server.request_shutdown(mode)

    def close_client(self, client) -> None:
        if client.conn is not None:
            client.conn.close()

    def rewrite_config(self) -> None:
        cfg = self.server.config
        path = cfg.config_file
        try:
            with open(path, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        new = cfg.rewrite(old)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)   # DEBUG SLEEP blocks the whole server, as in Redis

    def crash(self) -> None:
        os.abort()

    def restart(self) -> None:
        self.server.restart()

    @property
    def multiplexing_api(self) -> str:
        loop = self.server.loop
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"

    @property
    def resp_parser(self) -> str:
        return READER

    def release_memory(self, jobs: int) -> None:
        if jobs <= FREE_LISTS_MAX_JOBS:
            # A full collection also empties the interpreter's free lists
            # (tuples, lists, dicts, floats): they hold the objects freed last,
            # during the drain, among the jobs, each keeping a 1 MiB arena of
            # the allocator resident (about 15 MB after a million jobs).
            gc.collect()
        if _malloc_trim is not None:
            _malloc_trim(0)

    def rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    def cpu(self) -> tuple[float, float]:
        t = os.times()
        return t.system, t.user

    def aof_info(self):
        aof = self.server.aof
        return aof.info_fields() if aof is not None else None

    def bgrewriteaof(self) -> str:
        aof = self.server.aof
        if aof is None:
            # As Disque: with the AOF off, BGREWRITEAOF still writes the file
            # (appendfilename, in dir: our working directory) from the jobs
            # held now. Done before the reply: there is no log to follow.
            try:
                rewrite_file(OSFiles(), self.server.node, self.server.config.appendfilename)
            except OSError as e:
                raise CommandError(
                    f"ERR Can't rewrite the append only file: {e.strerror}") from None
            return "Background append only file rewriting started"
        return aof.start_rewrite()

    def debug_loadaof(self) -> None:
        aof = self.server.aof
        if aof is None:
            raise CommandError("ERR AOF is not enabled")
        aof.debug_loadaof()
