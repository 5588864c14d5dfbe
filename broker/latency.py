"""The latency monitor: LATENCY LATEST | HISTORY | RESET | GRAPH | DOCTOR, as
Disque 1.0-rc1's latency.c answers them (sans-IO: the samples' times are the
node's clock, in seconds, handed in).

An event is a named source of latency, recorded when it took at least
``latency-monitor-threshold`` ms (0: nothing is recorded, nothing measured):
``command`` and ``fast-command`` (a command's execution, measured by the
Node), ``aof-write``, ``aof-fsync-always``, ``aof-rewrite-diff-write`` and
``aof-rename`` (measured by the AOF writer, server/aof.py). Each event keeps
its last 160 samples, one per second (a second sample in the same second
keeps the larger), and its all-time maximum. Events are listed in the order
they first happened (Disque lists them in its hash table's order).
"""

from __future__ import annotations

SAMPLES = 160               # Disque's LATENCY_TS_LEN
GRAPH_COLUMNS = 80
GRAPH_ROWS = 4


class Series:
    """One event's samples: a ring of [unix seconds, ms] (time 0: empty)."""

    __slots__ = ("idx", "max", "samples")

    def __init__(self) -> None:
        self.idx = 0
        self.max = 0
        self.samples = [[0, 0] for _ in range(SAMPLES)]

    def add(self, ms: int, now: int) -> None:
        prev = self.samples[(self.idx + SAMPLES - 1) % SAMPLES]
        if prev[0] == now:
            if ms > prev[1]:
                prev[1] = ms
            return
        self.samples[self.idx] = [now, ms]
        if ms > self.max:
            self.max = ms
        self.idx = (self.idx + 1) % SAMPLES

    def in_order(self) -> list:
        """The samples, oldest first."""
        ring = self.samples[self.idx:] + self.samples[:self.idx]
        return [s for s in ring if s[0]]

    def latest(self) -> list:
        return self.samples[(self.idx + SAMPLES - 1) % SAMPLES]


class LatencyMonitor:
    """The node's events (Node.latency)."""

    def __init__(self) -> None:
        self.events: dict[str, Series] = {}

    def add(self, event: str, ms: int, now: int) -> None:
        """A sample of ``ms`` milliseconds at unix second ``now``."""
        series = self.events.get(event)
        if series is None:
            series = self.events[event] = Series()
        series.add(ms, now)

    def reset(self, names: list[str] | None = None) -> int:
        """Forget these events (all without names; case-insensitive, as
        Disque); how many were forgotten."""
        if names is None:
            count = len(self.events)
            self.events.clear()
            return count
        count = 0
        for name in names:
            for event in [e for e in self.events if e.lower() == name.lower()]:
                del self.events[event]
                count += 1
        return count

    def latest_reply(self) -> list:
        return [[event.encode(), *s.latest(), s.max] for event, s in self.events.items()]

    def history_reply(self, event: str) -> list:
        s = self.events.get(event)
        return [] if s is None else [list(x) for x in s.in_order()]

    def graph(self, event: str, now: int) -> str | None:
        """LATENCY GRAPH's text, or None when the event has no samples."""
        s = self.events.get(event)
        if s is None:
            return None
        samples = s.in_order()
        values = [ms for _, ms in samples]
        labels = [_ago(now - t) for t, _ in samples]
        lo = min(values) if values else 0
        hi = max(values) if values else 0
        head = (f"{event} - high {hi} ms, low {lo} ms (all time high {s.max} ms)\n"
                + "-" * GRAPH_COLUMNS + "\n")
        return head + _sparkline(values, labels)

    def doctor(self, now: int, threshold: int, slowlog_slower_than: int,
               fsync_always: bool, hz: int) -> str:
        """LATENCY DOCTOR's report, word for word Disque's."""
        if not self.events and threshold == 0:
            return (
                "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this "
                "Disque instance. You may use \"CONFIG SET latency-monitor-threshold "
                "<milliseconds>.\" in order to enable it. If we weren't in a deep space "
                "mission I'd suggest to take a look at "
                "http://disque.io/topics/latency-monitor.\n")
        out = []
        advise: set[str] = set()
        advices = 0
        for num, (event, s) in enumerate(self.events.items(), 1):
            if num == 1:
                out.append("Dave, I have observed latency spikes in this Disque instance. "
                           "You don't mind talking about it, do you Dave?\n\n")
            samples, avg, mad, period = _stats(s, now)
            out.append(f"{num}. {event}: {samples} latency spikes (average {avg}ms, mean "
                       f"deviation {mad}ms, period {period / samples if samples else 0:.2f} "
                       f"sec). Worst all time event {s.max}ms.")
            name = event.lower()
            if name == "command":
                if slowlog_slower_than == 0:
                    advise.add("slowlog_enabled")
                    advices += 1
                elif slowlog_slower_than // 1000 > threshold:
                    advise.add("slowlog_tuning")
                    advices += 1
                advise.update(("slowlog_inspect", "large_objects"))
                advices += 2
            elif name == "fast-command":
                advise.add("scheduler")
                advices += 1
            elif name == "aof-write-pending-fsync":
                advise.update(("local_disk", "disk_contention", "ssd", "data_writeback"))
                advices += 4
            elif name == "aof-write-active-child":
                advise.update(("no_appendfsync", "data_writeback", "ssd"))
                advices += 3
            elif name == "aof-write-alone":
                advise.update(("local_disk", "data_writeback", "ssd"))
                advices += 3
            elif name == "aof-fsync-always":
                advise.add("relax_fsync_policy")
                advices += 1
            elif name in ("aof-fstat", "rdb-unlik-temp-file"):
                advise.update(("disk_contention", "local_disk"))
                advices += 2
            elif name in ("aof-rewrite-diff-write", "aof-rename"):
                advise.update(("write_load_info", "data_writeback", "ssd", "local_disk"))
                advices += 4
            elif name == "expire-cycle":
                advise.update(("hz", "large_objects"))
                advices += 2
            elif name == "eviction-cycle":
                advise.add("large_objects")
                advices += 1
            out.append("\n")
        if not self.events:
            out.append("Dave, no latency spike was observed during the lifetime of this "
                       "Disque instance, not in the slightest bit. I honestly think you "
                       "ought to sit down calmly, take a stress pill, and think things "
                       "over.\n")
        elif advices == 0:
            out.append("\nWhile there are latency events logged, I'm not able to suggest any "
                       "easy fix. Please use the Disque community to get some help, "
                       "providing this report in your help request.\n")
        else:
            out.append("\nI have a few advices for you:\n\n")
            for key, text in _ADVICES:
                if key not in advise:
                    continue
                if key == "relax_fsync_policy" and not fsync_always:
                    continue
                if key == "hz" and hz >= 100:
                    continue
                out.append(text.replace("%llu", str(threshold * 1000)))
        return "".join(out)


def _stats(s: Series, now: int) -> tuple[int, int, int, int]:
    """Disque's analyzeLatencyForEvent: samples, average, mean absolute
    deviation (ms, integer division as its uint32s), period (seconds)."""
    live = [x for x in s.samples if x[0]]
    if not live:
        return 0, 0, 0, 0
    avg = sum(ms for _, ms in live) // len(live)
    period = (now - min(t for t, _ in live)) or 1
    mad = sum(abs(avg - ms) for _, ms in live) // len(live)
    return len(live), avg, mad, period


def _ago(elapsed: int) -> str:
    if elapsed < 60:
        return f"{elapsed}s"
    if elapsed < 3600:
        return f"{elapsed // 60}m"
    if elapsed < 3600 * 24:
        return f"{elapsed // 3600}h"
    return f"{elapsed // (3600 * 24)}d"


def _sparkline(values: list, labels: list) -> str:
    """Disque's sparkline.c (filled, linear scale): rows of bars, then the
    labels written downwards, 80 columns at a time."""
    charset = "_o#"
    out = []
    lo, hi = (min(values), max(values)) if values else (0, 0)
    relmax = (hi - lo) or 1
    steps = len(charset) * GRAPH_ROWS
    for start in range(0, len(values), GRAPH_COLUMNS):
        if start:
            out.append("\n")
        vals = values[start:start + GRAPH_COLUMNS]
        labs = labels[start:start + GRAPH_COLUMNS]
        row = 0
        while True:
            chars = [" "] * len(vals)
            more = False
            for j, v in enumerate(vals):
                step = int(int((v - lo) * steps) / relmax)
                step = min(max(step, 0), steps - 1)
                if row < GRAPH_ROWS:
                    more = True
                    idx = step - (GRAPH_ROWS - row - 1) * len(charset)
                    if 0 <= idx < len(charset):
                        chars[j] = charset[idx]
                    elif idx >= len(charset):
                        chars[j] = "|"
                else:
                    if row - GRAPH_ROWS < 1:        # a blank line above the labels
                        more = True
                        break
                    k = row - GRAPH_ROWS - 1
                    if len(labs[j]) > k:
                        more = True
                        chars[j] = labs[j][k]
            if not more:
                break
            row += 1
            out.append("".join(chars) + "\n")
    return "".join(out)


_ADVICES = (
    ("better_vm", "- If you are using a virtual machine, consider upgrading it with a faster "
     "one using an hypervisior that provides less latency during fork() calls. Xen is known "
     "to have poor fork() performance. Even in the context of the same VM provider, certain "
     "kinds of instances can execute fork faster than others.\n"),
    ("slowlog_enabled", "- There are latency issues with potentially slow commands you are "
     "using. Try to enable the Slow Log Disque feature using the command 'CONFIG SET "
     "slowlog-log-slower-than %llu'. If the Slow log is disabled Disque is not able to log "
     "slow commands execution for you.\n"),
    ("slowlog_tuning", "- Your current Slow Log configuration only logs events that are "
     "slower than your configured latency monitor threshold. Please use 'CONFIG SET "
     "slowlog-log-slower-than %llu'.\n"),
    ("slowlog_inspect", "- Check your Slow Log to understand what are the commands you are "
     "running which are too slow to execute. Please check "
     "http://disque.io/commands/slowlog for more information.\n"),
    ("scheduler", "- The system is slow to execute Disque code paths not containing system "
     "calls. This usually means the system does not provide Disque CPU time to run for long "
     "periods. You should try to:\n"
     "  1) Lower the system load.\n"
     "  2) Use a computer / VM just for Disque if you are running other softawre in the same "
     "system.\n"
     "  3) Check if you have a \"noisy neighbour\" problem.\n"
     "  4) Check with 'disque-cli --intrinsic-latency 100' what is the intrinsic latency in "
     "your system.\n"
     "  5) Check if the problem is allocator-related by recompiling Disque with MALLOC=libc, "
     "if you are using Jemalloc. However this may create fragmentation problems.\n"),
    ("local_disk", "- It is strongly advised to use local disks for persistence, especially "
     "if you are using AOF. Remote disks provided by platform-as-a-service providers are "
     "known to be slow.\n"),
    ("ssd", "- SSD disks are able to reduce fsync latency, and total time needed for "
     "snapshotting and AOF log rewriting (resulting in smaller memory usage and smaller final "
     "AOF rewrite buffer flushes). With extremely high write load SSD disks can be a good "
     "option. However Disque should perform reasonably with high load using normal disks. Use "
     "this advice as a last resort.\n"),
    ("data_writeback", "- Mounting ext3/4 filesystems with data=writeback can provide a "
     "performance boost compared to data=ordered, however this mode of operation provides "
     "less guarantees, and sometimes it can happen that after a hard crash the AOF file will "
     "have an half-written command at the end and will require to be repaired before Disque "
     "restarts.\n"),
    ("disk_contention", "- Try to lower the disk contention. This is often caused by other "
     "disk intensive processes running in the same computer (including other Disque "
     "instances).\n"),
    ("no_appendfsync", "- Assuming from the point of view of data safety this is viable in "
     "your environment, you could try to enable the 'no-appendfsync-on-rewrite' option, so "
     "that fsync will not be performed while there is a child rewriting the AOF file or "
     "producing an RDB file (the moment where there is high disk contention).\n"),
    ("relax_fsync_policy", "- Your fsync policy is set to 'always'. It is very hard to get "
     "good performances with such a setup, if possible try to relax the fsync policy to "
     "'onesec'.\n"),
    ("write_load_info", "- Latency during the AOF atomic rename operation or when the final "
     "difference is flushed to the AOF file at the end of the rewrite, sometimes is caused "
     "by very high write load, causing the AOF buffer to get very large. If possible try to "
     "send less commands to accomplish the same work, or use Lua scripts to group multiple "
     "operations into a single EVALSHA call.\n"),
    ("hz", "- In order to make the Disque keys expiring process more incremental, try to set "
     "the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n"),
    ("large_objects", "- Deleting, expiring or evicting (because of maxmemory policy) large "
     "objects is a blocking operation. If you have very large objects that are often "
     "deleted, expired, or evicted, try to fragment those objects into multiple smaller "
     "objects.\n"),
)
