"""The AOF policy, sans-IO: when to fsync, when to rewrite, which jobs a
rewrite keeps, what a failed write does (SPEC section 7; redis.conf's
``appendfsync``, ``no-appendfsync-on-rewrite``, ``auto-aof-rewrite-*``).

The writer (server/aof.py) asks this object, in the process and in the
simulator (where it writes to a simulated disk: server/sim/), so every
simulated seed tests the decisions production makes. It reads
the Config at each decision (a CONFIG SET applies at once) and is told the time
(ms) and the file sizes: it never reads a clock or touches a file.
"""

from __future__ import annotations

from broker.directives import AppendFsync
from broker.job import ACKED

EVERYSEC_MS = 1000      # appendfsync everysec: at most this long between fsyncs


class AOFPolicy:
    def __init__(self, config) -> None:
        self.config = config

    # ------------------------------------------------------------------ fsync
    def fsync_paused(self, rewriting: bool) -> bool:
        """no-appendfsync-on-rewrite: no fsync while a rewrite runs (its own
        writes compete for the disk)."""
        return rewriting and self.config.no_appendfsync_on_rewrite

    def fsync_before_replies(self, rewriting: bool) -> bool:
        """appendfsync always: what a turn wrote is fsynced before any reply or
        bus message of that turn leaves, so nothing acknowledged is lost."""
        return (self.config.appendfsync is AppendFsync.ALWAYS
                and not self.fsync_paused(rewriting))

    def fsync_due(self, now: int, last_fsync: int, rewriting: bool) -> bool:
        """appendfsync everysec: fsync once a second has passed since the last
        one (a crash loses at most the last second). ``no``: never (the OS
        writes back when it likes)."""
        return (self.config.appendfsync is AppendFsync.EVERYSEC
                and now - last_fsync >= EVERYSEC_MS
                and not self.fsync_paused(rewriting))

    # ----------------------------------------------------------- write errors
    def write_failed(self, node, reason: str) -> bool:
        """A write to the AOF failed: the node refuses new jobs with -MISCONF
        (``node.aof_error``) while the writer retries. Returns True when the
        process must exit instead: under ``always`` an acknowledged write could
        no longer be guaranteed (as Redis). A failed fsync is fatal likewise."""
        node.aof_error = reason
        return self.errors_are_fatal()

    def errors_are_fatal(self) -> bool:
        """Whether a failed write or fsync stops the process (``always``)."""
        return self.config.appendfsync is AppendFsync.ALWAYS

    @staticmethod
    def write_succeeded(node) -> bool:
        """A write worked: clear -MISCONF. Returns True if it was set (the
        error is solved)."""
        was = node.aof_error is not None
        node.aof_error = None
        return was

    # ---------------------------------------------------------------- rewrite
    def growth_percent(self, current_size: int, base_size: int) -> int:
        """How much the file grew since the last rewrite (or load), in percent."""
        return current_size * 100 // (base_size or 1) - 100

    def rewrite_due(self, current_size: int, base_size: int) -> bool:
        """auto-aof-rewrite-percentage (0: never) of growth over the size after
        the last rewrite, once the file is over auto-aof-rewrite-min-size."""
        cfg = self.config
        pct = cfg.auto_aof_rewrite_percentage
        return bool(pct and current_size > cfg.auto_aof_rewrite_min_size
                    and self.growth_percent(current_size, base_size) >= pct)

    @staticmethod
    def live_jobs(jobs, now: int) -> list:
        """The jobs a rewrite keeps: neither acked nor expired."""
        return [j for j in jobs if j.state != ACKED and j.etime > now]
