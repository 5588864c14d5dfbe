# compiled: mypyc (setup.py builds each module whose first line this is)
"""The Node: one Disquette node's jobs, queues and clients, sans-IO.

Inputs: ``handle_command(client, argv)``, ``tick()`` (and, with the cluster, bus
messages). Outputs: the reply returned by handle_command (or BLOCKED, answered
later), replies for other clients in ``outbox``, AOF records in ``records``
(broker/records.py), bus messages in the cluster's queue, and effects or
queries asked of the ``host`` (Host below). server/driver.py carries them all.
Time comes from the injected ``clock`` (integer ms), randomness from the
injected ``rng``: nothing here reads the real clock, a socket or a file, so a
whole cluster can run in one thread under test.

A job's states and times change only in broker/lifecycle.py. The commands reach
the Node as a table (``commands``, from broker/commands/), so the core imports
none of them. An exception in our own code is a bug (``internal_error``): with
``strict`` (tests, the simulator) it propagates and fails the run; otherwise it
is logged with its traceback, counted (INFO ``internal_errors``) and the node
keeps serving.
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from heapq import heappop, heappush
from typing import Callable, Final

from mypy_extensions import mypyc_attr

from broker import lifecycle, slowlog
from broker.client import Client
from broker.dispatch import (
    F_DENYOOM, F_FAST, F_LOADING, F_NOAUTH, Command, CommandError, dispatch_error,
)
from broker.job import ACKED, ACTIVE, FLAG_DELIVERED, SHARDS, Job
from broker.latency import LatencyMonitor
from broker.queue import PAUSED_OUT, Queue
from broker.registry import Registry
from protocol.resp import NULL_ARRAY, Error, Status

log = logging.getLogger("broker.node")

# Returned by handle_command when the reply will come later through the outbox.
BLOCKED: Final = object()

QUEUE_IDLE_GC_MS: Final = 300_000      # empty queues collected after 300 s idle
CRON_INTERVAL_MS: Final = 100          # housekeeping (queue GC, eviction) at 10 Hz
BASE_MEMORY: Final = 2 * 1024 * 1024   # accounted fixed cost of a node
QUEUE_OVERHEAD: Final = 1024
# A dict never shrinks as keys are deleted: a job shard whose table holds this
# many bytes per live job (and is not tiny) is rebuilt at its size, a bounded
# number of shards per cron run (SPEC section 9: memory follows the live jobs).
SHARD_BYTES_PER_JOB: Final = 128
SHARD_MIN_BYTES: Final = 1024
# An empty shard that still holds a table of its own (rebuilt small while its
# last jobs left, or too small for the rule above) gets the shared empty table
# back: about 700 such tables after a million jobs, allocated among the jobs,
# each kept an allocator arena (1 MiB) or a heap page resident after the drain.
EMPTY_SHARD_BYTES: Final = sys.getsizeof({})
SHARDS_PER_CRON: Final = 256           # all 4096 in 1.6 s
# Once the jobs' accounted memory fell this much below its peak and stopped
# falling (one cron run), the host is asked to give freed memory back to the
# system (Host.release_memory): once after a drain, not at every step of it.
RELEASE_MEMORY_DROP: Final = 32 * 1024 * 1024
# That release first finishes shrink_job_shards's pass over every shard: at
# the cron's pace it took 1.6 s more, and the tables it freed after the
# release stayed resident. The pass stops once it moved this many jobs (a few
# ms, once per drain); the shards left get the cron's pace.
SHRINK_JOBS_AT_RELEASE: Final = 50_000


@mypyc_attr(allow_interpreted_subclasses=True)   # server/host.py subclasses it
class Host:
    """Effects and facts the core asks of whatever runs it (the process, or the
    simulator). The defaults do nothing, which is what a unit test wants;
    server/process.py carries them out for real."""

    pid = 0
    # What runs the core, for INFO server: the event loop and the RESP parser.
    multiplexing_api = "none"
    resp_parser = "python"

    def shutdown(self, mode: str) -> None: ...
    def close_client(self, client: Client) -> None: ...
    def rewrite_config(self) -> None:
        raise OSError("no config file to rewrite")
    def sleep(self, seconds: float) -> None: ...
    def crash(self) -> None: ...
    def restart(self) -> None: ...
    def rss(self) -> int: return 0
    # Give memory freed by deleted jobs back to the system (the allocator keeps
    # it otherwise); the Node asks after a large drop of its live jobs, saying
    # how many are left.
    def release_memory(self, jobs: int) -> None: ...
    def cpu(self) -> tuple[float, float]: return (0.0, 0.0)
    # The AOF file (server/aof.py): INFO persistence, BGREWRITEAOF, DEBUG LOADAOF.
    def aof_info(self) -> list | None: return None     # INFO fields; None: AOF off
    def bgrewriteaof(self) -> str:
        raise CommandError("ERR AOF is not enabled")
    def debug_loadaof(self) -> None:
        raise CommandError("ERR AOF is not enabled")
    # CONFIG SET changed directive `name` (Node.config_changed): apply it, or
    # raise ConfigError to refuse it (every value of the SET is put back).
    def config_changed(self, name: str) -> None: ...


class CommandStats:
    """One command's counters on one node (INFO commandstats, GET /metrics), in
    typed fields: nanoseconds (INFO shows usec: no division per command) and a
    latency histogram in powers of two (latency[b] counts the commands whose
    duration in ns has bit length b: took less than 2**b ns).

    Every command's counters are made with the node: made on a command's
    first call during a burst, they kept an allocator arena each once the
    burst's jobs were gone. (The histogram's counts above 256 are new int
    objects per command and may keep one too; an array of C integers cost
    about 550 instructions more per command, for no gain measured.)"""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.calls = 0
        self.ns = 0
        self.latency: list[int] = [0] * 64

    def reset(self) -> None:
        self.calls = 0
        self.ns = 0
        self.latency = [0] * 64


class Node(Registry):
    """A Registry (broker/registry.py: the jobs and queues, as the lifecycle
    changes them) with its clients, commands, timers and housekeeping."""

    def __init__(self, config, clock, rng, host: Host | None = None,
                 node_id: str | None = None, perf_us=None, perf_ns=None,
                 commands: dict | None = None, strict: bool = False) -> None:
        now = clock()
        super().__init__(rng, node_id, now)
        self.config = config
        # Config's values the hot path reads, in typed fields: see config_applied.
        self.maxmemory = 0
        self.memory_95 = 0
        self.memory_75 = 0
        self.slowlog_slower = 0
        self.latency_threshold_ns = 0       # latency-monitor-threshold; 0: off
        self.config_applied()
        self.clock = clock                  # () -> int ms
        # () -> int ns, for command timing (commandstats, slowlog). The shell
        # passes time.perf_counter_ns itself: a C call, no Python frame.
        if perf_ns is None:
            perf_ns = (lambda: perf_us() * 1000) if perf_us is not None else (lambda: 0)
        self.perf_ns: Callable[[], int] = perf_ns
        self.host = host or Host()
        self.strict = strict
        # Command table (broker/commands), also under upper-case names: the hot
        # path finds "ADDJOB" with one dict hit, without a lower() first.
        self.commands: dict[bytes, Command] = dict(commands or {})
        self.commands_anycase: dict[bytes, Command] = {
            **self.commands,
            **{n.upper(): c for n, c in self.commands.items()}}
        self.start_time = now
        self.jobs_memory_peak = 0           # since the last release_memory
        self._jobs_memory_last_cron = 0
        self._shrink_cursor = 0             # next job shard shrink_job_shards looks at
        self.clients: dict[int, Client] = {}
        self.outbox: list = []              # (client, reply) for clients other than the caller
        self.block_heap: list = []          # (deadline, client id)
        self.blocked_count = 0
        self.monitors: list[Client] = []
        self.loading = False
        self.aof_error: str | None = None   # the AOF writer's last error (MISCONF)
        self.next_cron = now + CRON_INTERVAL_MS
        # by Command.slot (a list index, not a dict lookup by name); see cmdstats()
        self.command_stats: list[CommandStats | None] = []
        for cmd in self.commands.values():
            self.stats_of(cmd)
        # SLOWLOG entries, newest first (broker/slowlog.py says why bytes in a deque)
        self.slowlog: deque[bytes] = deque()
        self.slowlog_id = 0                 # the next entry's; Disque's first is 0
        self.latency = LatencyMonitor()     # LATENCY's events (broker/latency.py)
        # The counters every command or read moves, in typed fields (a dict
        # entry of boxed ints cost a lookup, an add and a store each time);
        # stats_now() folds them into INFO's order, where their entries in
        # self.stats (broker/registry.py) only keep their place.
        self.commands_processed = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0

    # ------------------------------------------------------------------ errors
    def internal_error(self, exc: BaseException, what: str) -> None:
        """An exception in our own code: a bug. Strict (tests, the simulator):
        re-raised, the run fails. Otherwise logged with its traceback and counted;
        the caller carries on with the next input."""
        if self.strict:
            raise exc
        self.stats["internal_errors"] += 1
        log.error("Internal error in %s (a bug: please report it)", what, exc_info=exc)

    # ------------------------------------------------------------------ stats
    def stats_now(self) -> dict[str, int]:
        """INFO stats, in its order: the dict's counters and the typed ones."""
        hot = {"total_commands_processed": self.commands_processed,
               "total_net_input_bytes": self.net_input_bytes,
               "total_net_output_bytes": self.net_output_bytes}
        return {k: hot.get(k, v) for k, v in self.stats.items()}

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT."""
        for k in self.stats:
            self.stats[k] = 0
        self.commands_processed = self.net_input_bytes = self.net_output_bytes = 0
        for st in self.command_stats:
            if st is not None:
                st.reset()

    def stats_of(self, cmd: Command) -> CommandStats:
        """cmd's counters, made on the first call for a Command not in the
        node's table (those of the table are made with the node)."""
        stats = self.command_stats
        if cmd.slot >= len(stats):
            stats.extend([None] * (cmd.slot + 1 - len(stats)))
        st = stats[cmd.slot]
        if st is None:
            st = stats[cmd.slot] = CommandStats(cmd.name)
        return st

    def cmdstats(self) -> dict[bytes, CommandStats]:
        """The counters of every command run since the start (or RESETSTAT), by name."""
        return {st.name: st for st in self.command_stats if st is not None and st.calls}

    # ------------------------------------------------------------------ clients
    def new_client(self, addr: str = "", laddr: str = "", fd: int = -1) -> Client:
        c = Client(addr, laddr, fd, self.clock())
        c.authenticated = not self.config.requirepass
        self.clients[c.id] = c
        self.stats["total_connections_received"] += 1
        return c

    def client_closed(self, client: Client) -> None:
        if client.blocked_on is not None:
            self.unblock_client(client)
        if client.monitor:
            self.monitors.remove(client)
            client.monitor = False
        self.cluster.client_closed(client)
        self.clients.pop(client.id, None)

    # ----------------------------------------------------------------- commands
    def handle_command(self, client: Client, argv: list):
        """Run one command; return its reply, or BLOCKED. Never raises.

        This is the hot path of every command: locals instead of repeated
        attribute lookups, and the checks that are almost always false first."""
        name = argv[0]
        cmd: Command | None
        if name is client.last_word:
            cmd = client.last_command
        else:
            exact = type(name) is bytes
            cmd = self.commands_anycase.get(name) if exact else None
            if cmd is None:  # mixed case, or not bytes
                cmd = self.commands.get(name.lower() if exact else bytes(name).lower())
            if cmd is not None and exact:
                client.last_word = name
                client.last_command = cmd
        arity = cmd.arity if cmd is not None else 0
        if cmd is None or (len(argv) != arity if arity > 0 else len(argv) < -arity):
            return dispatch_error(cmd, argv)
        flags = cmd.flags
        if not client.authenticated and not flags & F_NOAUTH:
            return Error("NOAUTH Authentication required.")
        if self.loading and not flags & F_LOADING:
            return Error("LOADING Disque is loading the dataset in memory")
        if flags & F_DENYOOM:
            maxmem = self.maxmemory
            # out_of_memory() evicts before refusing.
            if maxmem and self.used_memory() >= maxmem and self.out_of_memory():
                return Error("OOM command not allowed when used memory > 'maxmemory'.")
            if self.aof_error is not None:
                # As Redis: no new jobs while they cannot be logged (disk full...).
                return Error(f"MISCONF Errors writing to the AOF file: {self.aof_error}")
        if self.monitors:
            self.feed_monitors(client, argv)
        perf_ns = self.perf_ns
        start = perf_ns()
        try:
            reply = cmd.handler(self, client, argv)
        except CommandError as e:
            reply = e.reply
        except Exception as exc:  # our bug, not the client's (mypyc: one type a name)
            self.internal_error(exc, "command %r" % bytes(argv[0]))
            reply = Error(f"ERR internal error: {exc.__class__.__name__}: {exc}")
        ns = perf_ns() - start
        stats = self.command_stats
        slot = cmd.slot
        st = stats[slot] if slot < len(stats) else None
        if st is None:      # a Command not in the node's table
            st = self.stats_of(cmd)
        st.calls += 1
        st.ns += ns
        st.latency[ns.bit_length()] += 1
        self.commands_processed += 1
        client.last_cmd = cmd.name
        slower = self.slowlog_slower
        if slower >= 0 and ns // 1000 >= slower:    # Redis: 0 logs every command
            self.add_slowlog(client, argv, ns // 1000)
        latency = self.latency_threshold_ns
        if latency and ns >= latency:
            self.latency.add("fast-command" if flags & F_FAST else "command", ns // 1_000_000,
                             self.clock() // 1000)
        if self.ready_queues:
            self.serve_ready_queues()
        return reply

    def command_name(self, name) -> bytes | None:
        """The command a request's first word runs (rename-command applied),
        by its own name (b"addjob"), or None if there is no such command."""
        cmd = self.commands_anycase.get(name) if name.__class__ is bytes else None
        if cmd is None:
            cmd = self.commands.get(bytes(name).lower())
        return cmd.name if cmd is not None else None

    # -------------------------------------------- what a client shell asks
    def runs_while_adds_wait(self, argv: list) -> bool:
        """May this request run while the client's sync ADDJOBs still wait for
        their copies? Only another ADDJOB: its replication overlaps theirs and
        its reply comes after theirs (the cluster answers one client's ADDJOBs
        in order); anything else waits until they are all answered."""
        return self.command_name(argv[0]) == b"addjob"

    def waits_for_copies(self, client: Client) -> bool:
        """After handle_command returned BLOCKED: a sync ADDJOB waiting for its
        copies (the client's next ADDJOBs may run, see runs_while_adds_wait),
        not a blocked GETJOB or a MONITOR (nothing more runs until answered)."""
        return client.last_cmd == b"addjob" and client.blocked_on is None \
            and not client.monitor

    def idle_clients(self, now: int) -> list[Client]:
        """The `timeout` directive: the clients idle more than that many seconds
        at ``now`` (none when it is 0); blocked clients (their own TIMEOUT) and
        MONITORs are exempt, as in Redis."""
        if not self.config.timeout:
            return []
        limit = self.config.timeout * 1000
        return [c for c in self.clients.values()
                if now - c.last_interaction > limit and c.blocked_on is None
                and not c.monitor]

    def feed_monitors(self, client: Client, argv: list) -> None:
        now = self.clock()
        args = " ".join('"%s"' % a.decode("latin-1").replace("\\", "\\\\").replace('"', '\\"')
                        for a in argv)
        line = "%d.%06d [0 %s] %s" % (now // 1000, (now % 1000) * 1000, client.addr, args)
        for m in self.monitors:
            if m is not client:
                self.outbox.append((m, Status(line)))

    def add_slowlog(self, client: Client, argv: list, usec: int) -> None:
        entries = self.slowlog
        entries.appendleft(slowlog.encode_entry(
            self.slowlog_id, self.clock() // 1000, usec, slowlog.logged_args(argv),
            client.addr.encode(), client.name))
        self.slowlog_id += 1
        while len(entries) > self.config.slowlog_max_len:
            entries.pop()

    # ------------------------------------------------------------------- timers
    def next_deadline(self):
        """Earliest time (ms) at which tick() has something to do."""
        t = self.next_cron
        w = self.timers.next_time()
        if w is not None and w < t:
            t = w
        if self.block_heap and self.block_heap[0][0] < t:
            t = self.block_heap[0][0]
        c = self.cluster.next_deadline()
        if c is not None and c < t:
            t = c
        return t

    def tick(self) -> None:
        now = self.clock()
        timers = self.timers
        for job in timers.pop_due(now):
            if self.is_registered(job):
                if lifecycle.wake_time(job) <= now:
                    try:
                        lifecycle.process_due(self, job, now)
                    except Exception as e:
                        self.internal_error(e, "the timer of job %r" % job.id)
                else:
                    lifecycle.schedule(self, job)
        if timers.needs_compaction():
            timers.compact()        # stale slots, a bounded slice per tick
        heap = self.block_heap
        while heap and heap[0][0] <= now:
            deadline, cid = heappop(heap)
            c = self.clients.get(cid)
            if c is not None and c.blocked_on is not None and c.block_deadline == deadline:
                self.unblock_client(c)
                self.outbox.append((c, NULL_ARRAY))
        if now >= self.next_cron:
            self.next_cron = now + CRON_INTERVAL_MS
            self.cron(now)
        self.cluster.tick(now)
        if self.ready_queues:
            self.serve_ready_queues()

    # ------------------------------------------------------------ queue ops
    def get_queue(self, name: bytes, create: bool = False):
        q = self.queues.get(name)
        if q is None and create:
            q = self.queues[name] = Queue(name, self.clock())
        return q

    def set_queue_pause(self, q: Queue, flags: int) -> None:
        was_out = q.flags & PAUSED_OUT
        q.flags = flags
        q.atime = self.clock()
        # Unpausing output lets blocked clients have what queued meanwhile.
        if was_out and not flags & PAUSED_OUT and q.blocked and q.jobs:
            self.ready_queues.append(q)

    # --------------------------------------------------------------- blocking
    def block_client(self, client: Client, queues: list, timeout_ms: int,
                     count: int, withcounters: bool) -> None:
        now = self.clock()
        client.blocked_on = queues
        client.block_count = count
        client.block_withcounters = withcounters
        client.blocked_since = now
        client.block_deadline = now + timeout_ms if timeout_ms else 0
        for q in queues:
            q.blocked.append(client)
        if timeout_ms:
            heappush(self.block_heap, (client.block_deadline, client.id))
        self.blocked_count += 1
        for q in queues:
            self.cluster.need_jobs(q, now)

    def unblock_client(self, client: Client) -> None:
        for q in client.blocked_on:
            try:
                q.blocked.remove(client)
            except ValueError:
                pass
            q.atime = self.clock()
        client.blocked_on = None
        self.blocked_count -= 1

    def serve_ready_queues(self) -> None:
        """Give newly queued jobs to clients blocked on their queues, one job each
        (as Disque's handleClientsBlockedOnQueue), in blocking order."""
        ready, self.ready_queues = self.ready_queues, []
        now = self.clock()
        for q in ready:
            while q.blocked and q.jobs and not q.flags & PAUSED_OUT:
                c = q.blocked[0]
                job = lifecycle.deliver(self, q, now)
                assert job is not None      # the queue has jobs
                self.unblock_client(c)
                self.outbox.append((c, [job_reply(job, c.block_withcounters)]))

    # ------------------------------------------------------------- housekeeping
    def cron(self, now: int) -> None:
        # Collect idle empty queues (SPEC section 6), a bounded number per run.
        checked = 0
        for name, q in list(self.queues.items()):
            if q.is_collectable() and now - q.atime > QUEUE_IDLE_GC_MS:
                del self.queues[name]
                self.stats["evicted_queues"] += 1
            checked += 1
            if checked >= 1000:
                break
        if self.maxmemory and self.memory_level() >= 2:
            self.evict(now)
        if self.idempotency.expiries:
            self.idempotency.expire(now)
        self.shrink_job_shards()
        mem = self.jobs_memory
        if mem > self.jobs_memory_peak:
            self.jobs_memory_peak = mem
        elif (self.jobs_memory_peak - mem >= RELEASE_MEMORY_DROP
                and mem == self._jobs_memory_last_cron):
            self.jobs_memory_peak = mem
            self.shrink_job_shards(SHARDS, SHRINK_JOBS_AT_RELEASE)
            self.host.release_memory(self.job_count)
        self._jobs_memory_last_cron = mem

    def shrink_job_shards(self, count: int = SHARDS_PER_CRON, max_jobs: int = -1) -> None:
        """Rebuild, at their size, the next `count` job shards whose table
        outgrew their jobs (in place: the same dict objects), and empty the
        tables of those left without jobs; with max_jobs >= 0, stop once more
        jobs than that were moved."""
        i = self._shrink_cursor
        shards = self.job_shards
        n = moved = 0
        while n < count and (max_jobs < 0 or moved <= max_jobs):
            shard = shards[(i + n) % SHARDS]
            n += 1
            size = sys.getsizeof(shard)
            if not shard:
                if size > EMPTY_SHARD_BYTES:
                    shard.clear()
            elif size > SHARD_MIN_BYTES + SHARD_BYTES_PER_JOB * len(shard):
                moved += len(shard)
                jobs = dict(shard)
                shard.clear()
                shard.update(jobs)
        self._shrink_cursor = (i + n) % SHARDS

    # ------------------------------------------------------------------ memory
    def used_memory(self) -> int:
        return (BASE_MEMORY + self.jobs_memory + len(self.queues) * QUEUE_OVERHEAD
                + self.idempotency.memory)

    def memory_level(self) -> int:
        """0 below 75% of maxmemory, 1 above 75% (external replication), 2 above
        95% (evict what is safe to lose), 3 at or above 100% (refuse growth)."""
        maxmem = self.maxmemory
        if not maxmem:
            return 0
        used = self.used_memory()
        if used >= maxmem:
            return 3
        if used > self.memory_95:       # used * 100 > maxmem * 95
            return 2
        if used > self.memory_75:
            return 1
        return 0

    def out_of_memory(self) -> bool:
        if self.used_memory() < self.maxmemory:
            return False
        self.evict(self.clock())
        return self.used_memory() >= self.maxmemory

    def evict(self, now: int) -> None:
        """Drop what is safe to lose: acked jobs, delivered RETRY 0 jobs, then
        empty idle queues (SPEC section 6)."""
        victims = [j for j in self.iter_jobs()
                   if j.state == ACKED
                   or (j.retry == 0 and j.state == ACTIVE and j.flags & FLAG_DELIVERED)]
        for j in victims:
            lifecycle.delete(self, j)
        self.stats["evicted_jobs"] += len(victims)
        for name, q in list(self.queues.items()):
            if q.is_collectable():
                del self.queues[name]
                self.stats["evicted_queues"] += 1

    # ------------------------------------------------------------------ config
    def config_applied(self) -> None:
        """Copy the config values every command reads into typed fields (a
        read through the config object is a generic attribute lookup): at
        start and after each CONFIG SET, which may also put values back."""
        cfg = self.config
        self.maxmemory = cfg.maxmemory
        # memory_level's thresholds, worked out here: above 2**31 a product
        # left C integers for Python's multiplication on every job.
        self.memory_95 = cfg.maxmemory * 95 // 100
        self.memory_75 = cfg.maxmemory * 75 // 100
        self.slowlog_slower = cfg.slowlog_log_slower_than
        self.latency_threshold_ns = cfg.latency_monitor_threshold * 1_000_000

    def latency_sample(self, event: str, ms: int) -> None:
        """A latency the shells measured (the AOF's writes and fsyncs), kept
        as LATENCY's event if it reaches latency-monitor-threshold (the
        shells measure only while it is on: ``latency_threshold_ns``)."""
        threshold = self.latency_threshold_ns
        if threshold and ms * 1_000_000 >= threshold:
            self.latency.add(event, ms, self.clock() // 1000)

    def config_changed(self, name: str) -> None:
        """CONFIG SET changed directive `name`: the cluster layer and the host
        apply what is theirs. Raising ConfigError refuses the change: CONFIG SET
        passes this to Config.set_many, which then puts every value back."""
        self.cluster.config_changed(name)
        self.host.config_changed(name)


def job_reply(job: Job, withcounters: bool = False) -> list:
    if withcounters:
        return [job.queue, job.id, job.body, b"nacks", job.nacks,
                b"additional-deliveries", job.additional_deliveries]
    return [job.queue, job.id, job.body]

