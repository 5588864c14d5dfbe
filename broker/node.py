"""The Node: one Disquette node's jobs, queues and clients, sans-IO.

Inputs: ``handle_command(client, argv)``, ``tick()`` (and, with the cluster, bus
messages). Outputs: the reply returned by handle_command (or BLOCKED, answered
later), replies for other clients in ``outbox``, effects asked of the ``host``
(the asyncio shell, or the simulator). Time comes from the injected ``clock``
(integer ms), randomness from the injected ``rng``: nothing here reads the real
clock, a socket or a file, so a whole cluster can run in one thread under test.
"""

from __future__ import annotations

import logging
from heapq import heappop, heappush

from broker.client import Client
from broker.commands import (
    COMMANDS, COMMANDS_ANYCASE, F_DENYOOM, F_LOADING, F_NOAUTH, CommandError, dispatch_error,
)
from broker.job import (
    ACKED, ACTIVE, FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, FLAG_QUEUED_ONCE, JOB_OVERHEAD, QUEUED,
    Job,
)
from broker.queue import PAUSED_IN, PAUSED_OUT, Queue
from broker.timers import RESOLUTION_MS as TIMER_RESOLUTION_MS, TimerWheel
from protocol.resp import NULL_ARRAY, Error

log = logging.getLogger("broker.node")

# Returned by handle_command when the reply will come later through the outbox.
BLOCKED = object()

# Job ids are spread over 4096 dicts by two chars of their random part, so JSCAN
# can walk them with a stable integer cursor (SPEC: every job present for the
# whole iteration is returned at least once).
SHARDS = 4096
_B64_INDEX = bytearray(256)
for _i, _c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"):
    _B64_INDEX[_c] = _i
del _i, _c


def job_shard(jid: bytes) -> int:
    return (_B64_INDEX[jid[11]] << 6) | _B64_INDEX[jid[12]]


WILLQUEUE_ADVANCE_MS = 500      # SPEC section 8: WILLQUEUE 500 ms before requeue
REQUEUE_JITTER_MS = 250         # SPEC section 5: +-250 ms
QUEUE_IDLE_GC_MS = 300_000      # empty queues collected after 300 s idle
CRON_INTERVAL_MS = 100          # housekeeping (queue GC, eviction) at 10 Hz
BASE_MEMORY = 2 * 1024 * 1024   # accounted fixed cost of a node
QUEUE_OVERHEAD = 1024


class Host:
    """Effects the core asks of whatever runs it. The defaults do nothing, which is
    what a unit test or the simulator wants; broker/server.py overrides them."""

    pid = 0
    config_file_writable = False

    def shutdown(self, mode: str) -> None: ...
    def close_client(self, client: Client) -> None: ...
    def rewrite_config(self) -> None:
        raise OSError("no config file to rewrite")
    def sleep(self, seconds: float) -> None: ...
    def crash(self) -> None: ...
    def restart(self) -> None: ...
    def rss(self) -> int: return 0
    def cpu(self) -> tuple[float, float]: return (0.0, 0.0)
    def config_changed(self, name: str) -> None: ...


class Node:
    def __init__(self, config, clock, rng, host: Host | None = None,
                 node_id: str | None = None, perf_us=None, perf_ns=None) -> None:
        self.config = config
        self.clock = clock                  # () -> int ms
        # () -> int ns, for command timing (commandstats, slowlog). The shell
        # passes time.perf_counter_ns itself: a C call, no Python frame.
        if perf_ns is None:
            perf_ns = (lambda: perf_us() * 1000) if perf_us is not None else (lambda: 0)
        self.perf_ns = perf_ns
        self.rng = rng                      # random.Random
        self.host = host or Host()
        self.myself_id = node_id or "%040x" % rng.getrandbits(160)
        now = clock()
        self.start_time = now
        self.job_shards: list[dict] = [{} for _ in range(SHARDS)]
        self.job_count = 0
        self.jobs_memory = 0
        self.queues: dict[bytes, Queue] = {}
        self.timers = TimerWheel()
        self.clients: dict[int, Client] = {}
        self.outbox: list = []              # (client, reply) for clients other than the caller
        self.ready_queues: list[Queue] = []  # got jobs while clients were blocked on them
        self.block_heap: list = []          # (deadline, client id)
        self.blocked_count = 0
        self.monitors: list[Client] = []
        self.leaving = False
        self.loading = False
        self.aof = None                     # persistence log, see broker/aof.py
        self.cluster = None                 # cluster layer, see cluster/
        self._ctime_ms = 0
        self._ctime_seq = 0
        self._memo_time: dict = {}          # see shared_time
        self.next_cron = now + CRON_INTERVAL_MS
        self.cmdstats: dict[bytes, list] = {}
        self.slowlog: list = []
        self.slowlog_id = 0
        self.stats = {
            "total_connections_received": 0,
            "total_commands_processed": 0,
            "rejected_connections": 0,
            "expired_jobs": 0,
            "evicted_jobs": 0,
            "evicted_queues": 0,
            "requeued_jobs": 0,
            "total_net_input_bytes": 0,
            "total_net_output_bytes": 0,
        }

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
        if self.cluster is not None:
            self.cluster.client_closed(client)
        self.clients.pop(client.id, None)

    # ----------------------------------------------------------------- commands
    def handle_command(self, client: Client, argv: list):
        """Run one command; return its reply, or BLOCKED. Never raises.

        This is the hot path of every command: locals instead of repeated
        attribute lookups, and the checks that are almost always false first."""
        name = argv[0]
        cmd = COMMANDS_ANYCASE.get(name) if name.__class__ is bytes else None
        if cmd is None:  # mixed case, or not bytes
            cmd = COMMANDS.get(name.lower() if name.__class__ is bytes else bytes(name).lower())
        arity = cmd.arity if cmd is not None else 0
        if cmd is None or (len(argv) != arity if arity > 0 else len(argv) < -arity):
            return dispatch_error(cmd, argv)
        flags = cmd.flags
        if not client.authenticated and not flags & F_NOAUTH:
            return Error("NOAUTH Authentication required.")
        if self.loading and not flags & F_LOADING:
            return Error("LOADING Disque is loading the dataset in memory")
        if flags & F_DENYOOM:
            maxmem = self.config.maxmemory
            # used_memory() inlined; out_of_memory() evicts before refusing.
            if (maxmem and BASE_MEMORY + self.jobs_memory + len(self.queues) * QUEUE_OVERHEAD
                    >= maxmem and self.out_of_memory()):
                return Error("OOM command not allowed when used memory > 'maxmemory'.")
            aof = self.aof
            if aof is not None and aof.last_write_status != "ok":
                # As Redis: no new jobs while they cannot be logged (disk full...).
                return Error(f"MISCONF Errors writing to the AOF file: "
                             f"{aof.last_write_error}")
        if self.monitors:
            self.feed_monitors(client, argv)
        perf_ns = self.perf_ns
        start = perf_ns()
        try:
            reply = cmd.handler(self, client, argv)
        except CommandError as e:
            reply = e.reply
        except Exception as e:  # a bug must not kill the connection loop
            log.exception("error running %r", argv[:2])
            reply = Error(f"ERR internal error: {e.__class__.__name__}: {e}")
        ns = perf_ns() - start
        # cmdstats keeps nanoseconds (INFO shows usec): no division per command.
        st = self.cmdstats.get(cmd.name)
        if st is None:
            self.cmdstats[cmd.name] = [1, ns]
        else:
            st[0] += 1
            st[1] += ns
        self.stats["total_commands_processed"] += 1
        client.last_cmd = cmd.name
        slower = self.config.slowlog_log_slower_than
        if slower >= 0 and ns // 1000 >= slower:    # Redis: 0 logs every command
            self.add_slowlog(client, argv, ns // 1000)
        if self.ready_queues:
            self.serve_ready_queues()
        return reply

    def feed_monitors(self, client: Client, argv: list) -> None:
        now = self.clock()
        args = " ".join('"%s"' % a.decode("latin-1").replace("\\", "\\\\").replace('"', '\\"')
                        for a in argv)
        line = "%d.%06d [0 %s] %s" % (now // 1000, (now % 1000) * 1000, client.addr, args)
        from protocol.resp import Status
        for m in self.monitors:
            if m is not client:
                self.outbox.append((m, Status(line)))

    def add_slowlog(self, client: Client, argv: list, usec: int) -> None:
        self.slowlog_id += 1
        args = [a[:128] for a in argv[:32]]
        self.slowlog.insert(0, [self.slowlog_id, self.clock() // 1000, usec, args,
                                client.addr.encode(), client.name])
        del self.slowlog[self.config.slowlog_max_len:]

    # ------------------------------------------------------------- job registry
    def get_job(self, jid: bytes):
        return self.job_shards[(_B64_INDEX[jid[11]] << 6) | _B64_INDEX[jid[12]]].get(jid)

    def iter_jobs(self):
        for shard in self.job_shards:
            yield from shard.values()

    def new_ctime(self, now: int) -> int:
        """ms * 1e6 + a per-ms counter, so jobs created in one ms keep their order."""
        if now == self._ctime_ms:
            self._ctime_seq += 1
        else:
            self._ctime_ms = now
            self._ctime_seq = 0
        return now * 1_000_000 + self._ctime_seq

    def shared_time(self, now: int, seconds: int) -> int:
        """now + seconds, reusing the int object for equal inputs: a million jobs
        created in a burst share a handful of expire and requeue times (memory per
        job). One memo entry per seconds value, as ADDJOB asks for its TTL and
        then its RETRY: a single entry would miss every time."""
        memo = self._memo_time
        m = memo.get(seconds)
        if m is not None and m[0] == now:
            return m[1]
        t = now + seconds * 1000
        if len(memo) >= 64:     # seconds are client-chosen: keep the memo small
            memo.clear()
        memo[seconds] = (now, t)
        return t

    def register_job(self, job: Job) -> None:
        jid = job.id
        shard = self.job_shards[(_B64_INDEX[jid[11]] << 6) | _B64_INDEX[jid[12]]]  # job_shard()
        if jid not in shard:
            self.job_count += 1
            self.jobs_memory += len(job.body) + JOB_OVERHEAD
        shard[jid] = job
        self.timers.add(job, self.wake_time(job))   # schedule_job()

    def unregister_job(self, job: Job) -> None:
        shard = self.job_shards[job_shard(job.id)]
        if shard.get(job.id) is not job:
            return
        if job.state == QUEUED:
            self.dequeue_job(job)
        del shard[job.id]
        self.job_count -= 1
        self.jobs_memory -= len(job.body) + JOB_OVERHEAD
        if self.aof is not None:
            self.aof.log_delete(job)
        if self.cluster is not None:
            self.cluster.job_deleted(job)
        if self.timers.entries > 2 * self.job_count + 1024:
            self.rebuild_timers()

    def is_registered(self, job: Job) -> bool:
        return self.job_shards[job_shard(job.id)].get(job.id) is job

    # ------------------------------------------------------------------- timers
    def wake_time(self, job: Job) -> int:
        """When the timer wheel must next look at a job, derived from its state."""
        t = job.etime
        state = job.state
        if state == ACTIVE or state == ACKED:
            q = job.qtime
            if q:
                if (state == ACTIVE and job.nodes_delivered
                        and not job.flags & FLAG_BCAST_WILLQUEUE):
                    q -= WILLQUEUE_ADVANCE_MS
                if q < t:
                    t = q
        return t

    def schedule_job(self, job: Job) -> None:
        self.timers.add(job, self.wake_time(job))

    def rebuild_timers(self) -> None:
        self.timers.clear()
        for job in self.iter_jobs():
            self.schedule_job(job)

    def next_deadline(self):
        """Earliest time (ms) at which tick() has something to do."""
        t = self.next_cron
        heap = self.timers.heap     # timers.next_time(), inlined: this runs after every read
        if heap and heap[0] * TIMER_RESOLUTION_MS < t:
            t = heap[0] * TIMER_RESOLUTION_MS
        if self.block_heap and self.block_heap[0][0] < t:
            t = self.block_heap[0][0]
        if self.cluster is not None:
            c = self.cluster.next_deadline()
            if c is not None and c < t:
                t = c
        return t

    def tick(self) -> None:
        now = self.clock()
        for job in self.timers.pop_due(now):
            if self.is_registered(job):
                if self.wake_time(job) <= now:
                    self.process_job(job, now)
                else:
                    self.schedule_job(job)
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
        if self.cluster is not None:
            self.cluster.tick(now)
        if self.ready_queues:
            self.serve_ready_queues()

    def process_job(self, job: Job, now: int) -> None:
        """Disque's processJob: expire, (re)queue, or try the ack GC."""
        if job.etime <= now:
            self.stats["expired_jobs"] += 1
            self.unregister_job(job)
            return
        state = job.state
        if state == ACTIVE and job.qtime:
            if job.qtime <= now:
                q = self.queues.get(job.queue)
                if q is not None and q.flags & PAUSED_IN:
                    # Paused in: no requeue; try again one retry period later.
                    job.qtime = now + max(job.retry, 1) * 1000
                else:
                    redelivery = job.flags & FLAG_DELIVERED
                    if self.cluster is not None:
                        self.cluster.before_requeue(job)
                    if self.queue_job(job, now):
                        if redelivery:
                            job.additional_deliveries += 1
                            self.stats["requeued_jobs"] += 1
                    else:
                        job.qtime = 0   # at-most-once job already delivered
            elif self.cluster is not None and not job.flags & FLAG_BCAST_WILLQUEUE:
                job.flags |= FLAG_BCAST_WILLQUEUE
                self.cluster.send_willqueue(job)
        elif state == ACKED and self.cluster is not None and job.qtime <= now:
            self.cluster.try_job_gc(job, now)
        if self.is_registered(job):
            self.schedule_job(job)

    # ---------------------------------------------------------------- acks
    def ack_job(self, job: Job) -> None:
        if job.state == QUEUED:
            self.dequeue_job(job)
        job.state = ACKED
        job.qtime = self.clock()    # for an acked job: next GC attempt
        job.nodes_confirmed = None  # from now on: holders that confirmed the ack
        job.gc_retry = 0
        if self.aof is not None:    # persistence: a reload must not make it live again
            self.aof.log_ack(job)

    def try_job_gc(self, job: Job) -> None:
        """Delete an acked job once every holder knows (SPEC section 8). A job only
        this node holds goes at once."""
        if self.cluster is None or not job.nodes_delivered:
            self.unregister_job(job)
        else:
            self.cluster.try_job_gc(job, self.clock())

    # ------------------------------------------------------------ queue ops
    def get_queue(self, name: bytes, create: bool = False):
        q = self.queues.get(name)
        if q is None and create:
            q = self.queues[name] = Queue(name, self.clock())
        return q

    def queue_job(self, job: Job, now: int | None = None) -> bool:
        """Put a job in its queue (Disque's queueJob). False if it is already
        queued, or is an at-most-once job already delivered."""
        if job.state == QUEUED or (job.retry == 0 and job.flags & FLAG_DELIVERED):
            return False
        if now is None:
            now = self.clock()
        job.state = QUEUED
        job.flags |= FLAG_QUEUED_ONCE
        # The requeue time runs from the moment of queueing; the jitter is
        # added at delivery so that a burst of queued jobs shares one int.
        job.qtime = self.shared_time(now, job.retry) if job.retry else 0
        q = self.queues.get(job.queue)
        if q is None:
            q = self.queues[job.queue] = Queue(job.queue, now)
        q.jobs.add(job)
        q.atime = now
        q.jobs_in += 1
        if q.blocked and not q.flags & PAUSED_OUT:
            self.ready_queues.append(q)
        cluster = self.cluster
        # Only jobs with other holders, or queues other nodes asked for, concern
        # the cluster: a lone job skips the calls (hot path).
        if cluster is not None and (job.nodes_delivered or cluster.interest):
            cluster.job_queued(job)
        return True

    def set_queue_pause(self, q: Queue, flags: int) -> None:
        was_out = q.flags & PAUSED_OUT
        q.flags = flags
        q.atime = self.clock()
        # Unpausing output lets blocked clients have what queued meanwhile.
        if was_out and not flags & PAUSED_OUT and q.blocked and q.jobs:
            self.ready_queues.append(q)

    def dequeue_job(self, job: Job) -> bool:
        if job.state != QUEUED:
            return False
        q = self.queues.get(job.queue)
        if q is not None:
            q.remove(job)
        job.state = ACTIVE
        return True

    def fetch_job(self, q: Queue, now: int):
        """Take the oldest job for delivery (Disque's queueFetchJob)."""
        job = q.jobs.popleft()
        if job is None:
            return None
        job.state = ACTIVE
        job.flags |= FLAG_DELIVERED
        if job.retry:
            # Uniform in -250..250 like randint(), at a third of its cost.
            job.qtime += int(self.rng.random() * (2 * REQUEUE_JITTER_MS + 1)) - REQUEUE_JITTER_MS
            job.flags &= ~FLAG_BCAST_WILLQUEUE
            self.timers.add(job, self.wake_time(job))   # schedule_job()
        elif self.aof is not None:  # persistence: a delivered RETRY 0 job is never requeued
            self.aof.log_delivered(job)
        q.atime = now
        q.jobs_out += 1
        return job

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
        if self.cluster is not None:
            for q in queues:
                self.cluster.need_jobs(q, count, now)

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
                job = self.fetch_job(q, now)
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
        if self.config.maxmemory and self.memory_level() >= 2:
            self.evict(now)

    # ------------------------------------------------------------------ memory
    def used_memory(self) -> int:
        return BASE_MEMORY + self.jobs_memory + len(self.queues) * QUEUE_OVERHEAD

    def memory_level(self) -> int:
        """0 below 75% of maxmemory, 1 above 75% (external replication), 2 above
        95% (evict what is safe to lose), 3 at or above 100% (refuse growth)."""
        maxmem = self.config.maxmemory
        if not maxmem:
            return 0
        used = self.used_memory()
        if used >= maxmem:
            return 3
        if used * 100 > maxmem * 95:
            return 2
        if used * 100 > maxmem * 75:
            return 1
        return 0

    def out_of_memory(self) -> bool:
        if self.used_memory() < self.config.maxmemory:
            return False
        self.evict(self.clock())
        return self.used_memory() >= self.config.maxmemory

    def evict(self, now: int) -> None:
        """Drop what is safe to lose: acked jobs, delivered RETRY 0 jobs, then
        empty idle queues (SPEC section 6)."""
        victims = [j for j in self.iter_jobs()
                   if j.state == ACKED
                   or (j.retry == 0 and j.state == ACTIVE and j.flags & FLAG_DELIVERED)]
        for j in victims:
            self.unregister_job(j)
        self.stats["evicted_jobs"] += len(victims)
        for name, q in list(self.queues.items()):
            if q.is_collectable():
                del self.queues[name]
                self.stats["evicted_queues"] += 1

    # -------------------------------------------------------------------- misc
    def reachable_nodes_count(self) -> int:
        """Reachable nodes including myself."""
        if self.cluster is None:
            return 1
        return self.cluster.reachable_count()

    def flushall(self) -> None:
        for shard in self.job_shards:
            shard.clear()
        self.job_count = 0
        self.jobs_memory = 0
        self.timers.clear()
        for q in self.queues.values():
            q.jobs.clear()
        self.queues = {name: q for name, q in self.queues.items() if q.blocked}


def job_reply(job: Job, withcounters: bool = False) -> list:
    if withcounters:
        return [job.queue, job.id, job.body, b"nacks", job.nacks,
                b"additional-deliveries", job.additional_deliveries]
    return [job.queue, job.id, job.body]


import broker.commands.families  # noqa: E402,F401  (registers the commands)
