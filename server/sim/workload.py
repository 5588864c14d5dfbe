"""A seeded workload for the broker simulator: producers, consumers and faults,
reporting what they see to the checker (server/sim/checker.py), which holds
the history and checks the SPEC section 9 invariants on it.

One seed decides everything: cluster size, jobs, who consumes, who acks where,
partitions, crashes, message loss. A share of the jobs is added held (ADDJOB
... HOLD, an extension) and released later by ENQUEUE on a random holder.
``Workload(seed).run()`` returns a Report; ``Report.violations`` lists broken
invariants, each naming the seed.
"""

from __future__ import annotations

import random
import traceback

from broker.directives import AppendFsync
from broker.job import HELD, id_is_at_least_once
from protocol import bus as B
from protocol.resp import Error, Status
from server.sim.broker_node import broker_factory
from server.sim.checker import Checker, Report
from server.sim.network import NetworkConfig
from server.sim.simulation import Simulation

QUEUE = b"q"
# Messages that carry a job's counters (or ask for them: WILLQUEUE).
COUNTER_MESSAGES = {B.REPLJOB, B.YOURJOBS, B.QUEUED, B.WILLQUEUE}


class Workload:
    def __init__(self, seed: int, *, nodes: int | None = None, jobs: int | None = None,
                 chaos_ms: int = 5000, faults: bool = True, fsync: str | None = None,
                 clocks: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed * 1_000_003 + 17)
        rng = self.rng
        self.n = nodes or rng.choice((3, 3, 4, 5))
        self.njobs = jobs if jobs is not None else rng.randint(4, 12)
        self.chaos_ms = chaos_ms
        self.faults = faults
        net = NetworkConfig(min_latency=1, max_latency=5,
                            drop=rng.choice([0.0, 0.0, 0.01, 0.05]) if faults else 0.0,
                            duplicate=rng.choice([0.0, 0.02]) if faults else 0.0,
                            reorder=rng.choice([0.0, 0.05]) if faults else 0.0)
        # Persistence (its own stream: the draws above keep their scenarios): an
        # AOF on a simulated disk that loses what was not fsynced on a crash.
        # Half of those rewrite the AOF whenever it doubles (the policy of
        # broker/aof_policy.py decides, as in production), however small.
        disk_rng = random.Random(seed ^ 0xA0F)
        drawn = disk_rng.choice(["off", "off", "off", "always", "always", "everysec"])
        fsync = fsync or drawn              # (a test may ask for one policy)
        self.fsync = None if fsync == "off" else AppendFsync(fsync)
        self.rewrites = disk_rng.random() < 0.5
        directives = {"cluster_node_timeout": 1000}
        if self.fsync is not None:
            directives.update(appendonly="yes", appendfsync=self.fsync)
            if self.rewrites:
                directives.update(auto_aof_rewrite_min_size=1)
        self.sim = Simulation(seed, broker_factory(**directives), net=net,
                              record_deliveries=False)
        # Clock faults (their own stream too; off unless asked: the other
        # sweeps keep their scenarios): hosts start skewed, and their clocks
        # jump and strobe during the run (clock_fault).
        self.clocks = clocks
        self.clock_rng = random.Random(seed ^ 0xC10C)
        self.names = [self.start_skewed() for _ in range(self.n)]
        self.checker = Checker(seed, self.fsync, clocks, self.names, self.sim.trace)
        self.final = False                 # final phase: healed, consumers ack everything
        self.crash_budget = 1 if faults else 0
        # Short TTLs (their own stream: the main draws keep their scenarios): a
        # job may expire while its ADDJOB still waits for copies, which must
        # then answer -NOREPL, never the id (issue 16).
        self.ttl_rng = random.Random(seed ^ 0x7711)
        # Held jobs (their own stream too): job id -> (time, host) of the
        # ENQUEUE that answered 1.
        self.hold_rng = random.Random(seed ^ 0x401D)
        self.released: dict[bytes, tuple[int, str]] = {}
        self.rereleased = 0
        # (ext) Idempotent adds (their own stream too): a share of the adds carry
        # an IDEMPOTENCY key and are sent again with it, to any node, as a
        # producer does after a lost reply (see retry_add).
        self.key_rng = random.Random(seed ^ 0x1DE4)
        self.key_retries = 0

    # -- helpers --------------------------------------------------------------------
    def live(self, name: str):
        h = self.sim.hosts[name]
        return h.node if h.alive else None

    def command(self, name: str, args, on_reply) -> None:
        """Send a command from a fresh client on host `name` (if it is up)."""
        host = self.sim.hosts[name]
        if not host.alive:
            return
        incarnation = host.incarnation

        def reply(r):
            # Replies from a node that crashed meanwhile never reach the client.
            if host.alive and host.incarnation == incarnation:
                on_reply(r)

        client = host.node.new_client(reply)
        self.sim.call(name, lambda node, now: node.command(client, args, now))

    def node_now(self, name: str) -> int:
        """The time a live node will see now (its clock may be skewed or have
        jumped: Simulation.jump_clock)."""
        host = self.sim.hosts[name]
        return host.node.steady.read(host.now(self.sim.now))

    def later(self, delay: int, fn) -> None:
        self.sim.at(self.sim.now + delay, lambda sim: fn())

    def holders(self, jid: bytes) -> list:
        out = []
        for name in self.names:
            node = self.live(name)
            if node is not None and node.node.get_job(jid) is not None:
                out.append(name)
        return out

    def live_nodes(self) -> list:
        """(name, Node) of every live host, for the checker."""
        return [(h.name, h.node.node) for h in self.sim.hosts.values() if h.alive]

    def crashed(self, name: str) -> None:
        self.checker.crashed(name, self.sim.now)

    # -- producers ------------------------------------------------------------------
    def produce(self, i: int) -> None:
        rng = self.rng
        name = rng.choice(self.names)
        body = b"job-%d" % i
        if rng.random() < 0.2:
            repl, retry = 1, 0             # at most once
        else:
            repl, retry = rng.randint(2, min(3, self.n)), rng.randint(1, 3)
        is_async = rng.random() < 0.15
        ttl = self.ttl_rng.choice([600, 600, 600, 600, 1, 2])
        args = ["ADDJOB", QUEUE, body, 1500, "REPLICATE", repl, "RETRY", retry, "TTL", ttl]
        if is_async:
            args.append("ASYNC")
        held = self.hold_rng.random() < 0.25
        if held:
            args.append("HOLD")
            self.checker.held_added(body)
        key = None
        if self.key_rng.random() < 0.3:
            key = b"key-%d" % i
            args += ["IDEMPOTENCY", key]
            self.later(self.key_rng.randint(1, 1500),
                       lambda: self.retry_add(self.key_rng.choice(self.names), args))
        start = self.sim.now

        def done(reply):
            if isinstance(reply, Status):
                jid = reply.encode()
                self.checker.add_answered(
                    jid, self.sim.now, start,
                    {"repl": repl, "retry": retry, "async": is_async, "ttl": ttl,
                     "held": held, "body": body, "key": key}, self.holders(jid))
                if held:
                    self.later(self.hold_rng.randint(0, 2000), lambda: self.release(jid, body))

        self.command(name, args, done)

    def key_ids(self, key: bytes) -> set:
        """Every job id the cluster knows for an IDEMPOTENCY key: copies held and
        the keys' maps of every live node, ids the producer was given."""
        ids = {j for j, p in self.checker.produced.items() if p.get("key") == key}
        for name in self.names:
            node = self.live(name)
            if node is None:
                continue
            jid = node.node.idempotency.lookup(QUEUE, key, self.node_now(name))
            if jid is not None:
                ids.add(jid)
            ids.update(j.id for j in node.node.iter_jobs() if j.idem_key == key)
        return ids

    def retry_add(self, name: str, args: list) -> None:
        """(ext) The same ADDJOB, sent again with its IDEMPOTENCY key to `name`
        (checked exactly: Checker.key_retry_answered)."""
        node = self.live(name)
        if node is None:
            return
        key = args[args.index("IDEMPOTENCY") + 1]
        now = self.node_now(name)
        held = [j.id for j in node.node.iter_jobs()
                if j.idem_key == key and j.queue == QUEUE and j.etime > now]
        known = self.key_ids(key)
        self.key_retries += 1
        repl, retry, ttl = (args[args.index(o) + 1] for o in ("REPLICATE", "RETRY", "TTL"))

        def done(reply):
            if not isinstance(reply, Status):
                return
            jid = reply.encode()
            new = jid not in self.checker.produced
            self.checker.key_retry_answered(
                jid, self.sim.now, name, key, held, known,
                {"repl": repl, "retry": retry, "async": "ASYNC" in args, "ttl": ttl,
                 "key": key, "held": "HOLD" in args, "body": args[2]}, self.holders(jid))
            if new:
                if "HOLD" in args:
                    # Held, as the first add was: the producer releases it later.
                    body = args[2]
                    self.later(self.hold_rng.randint(0, 2000), lambda: self.release(jid, body))

        self.command(name, args, done)

    def release(self, jid: bytes, body: bytes, attempts: int = 5) -> None:
        """ENQUEUE a held job on a random live holder (as a producer's commit
        does), again a little later if no holder answered 1."""
        if jid in self.released:
            return
        holders = self.holders(jid)
        if not holders:
            if attempts > 1:
                self.later(500, lambda: self.release(jid, body, attempts - 1))
            return
        name = self.hold_rng.choice(holders)
        self.checker.enqueue_sent(body, self.sim.now)

        def done(reply):
            if reply == 1:
                self.released.setdefault(jid, (self.sim.now, name))
            elif attempts > 1:
                self.later(300, lambda: self.release(jid, body, attempts - 1))

        self.command(name, ["ENQUEUE", jid], done)
        if attempts > 1:
            # No reply at all (the node crashed): try elsewhere.
            self.later(1000, lambda: self.release(jid, body, attempts - 1))

    def release_held_copies(self) -> None:
        """After the heal, every few seconds: a copy still held that should not
        be (never released anywhere, or its holders missed the release while
        the releaser died) is released again, as a producer retrying its
        commit would."""
        now = self.sim.now
        self.later(3000, self.release_held_copies)
        for h in self.sim.hosts.values():
            if not h.alive:
                continue
            for j in list(h.node.node.iter_jobs()):
                if j.state == HELD and j.id in self.checker.produced:
                    if j.id in self.released:
                        if now - self.released[j.id][0] < 3000:
                            continue        # its QUEUED may be on its way
                        self.rereleased += 1
                    self.checker.enqueue_sent(j.body, self.sim.now)
                    jid = j.id
                    self.command(h.name, ["ENQUEUE", jid], lambda r, jid=jid, n=h.name:
                                 self.released.setdefault(jid, (self.sim.now, n))
                                 if r == 1 else None)

    # -- consumers ------------------------------------------------------------------
    def consume(self, name: str, incarnation: int) -> None:
        host = self.sim.hosts[name]
        if not host.alive or host.incarnation != incarnation:
            return

        def got(reply):
            if isinstance(reply, list):
                for _queue, jid, body in reply:
                    jid = bytes(jid)
                    self.checker.delivered(jid, bytes(body), name, self.sim.now)
                    self.later(self.rng.randint(1, 300), lambda j=jid: self.finish(j, name))
            self.later(self.rng.randint(1, 50), lambda: self.consume(name, incarnation))

        self.command(name, ["GETJOB", "TIMEOUT", 400, "FROM", QUEUE], got)

    def finish(self, jid: bytes, name: str) -> None:
        """What the consumer does with a job: ack (here or elsewhere), fast-ack,
        nack, or nothing (it comes back after RETRY)."""
        rng = self.rng
        x = 0.0 if self.final else rng.random()
        target = name if rng.random() < 0.8 else rng.choice(self.names)
        if not id_is_at_least_once(jid):
            # No dummy acks for at-most-once ids: their ack must go to the holder.
            target = name
        if x < 0.82:
            self.checker.ack_sent(jid, self.sim.now)
        if x < 0.75:
            self.command(target, ["ACKJOB", jid], lambda r: self.checker.ack_answered(jid)
                         if not isinstance(r, Error) else None)
        elif x < 0.82:
            self.command(target, ["FASTACK", jid], lambda r: self.checker.ack_answered(jid))
        elif x < 0.9:
            self.checker.nack_sent(jid, self.sim.now)
            self.command(name, ["NACK", jid], lambda r: None)
        elif x < 0.93:
            self.command(name, ["WORKING", jid], lambda r: None)

    # -- faults ---------------------------------------------------------------------
    def fault(self) -> None:
        rng = self.rng
        x = rng.random()
        if x < 0.35 and self.n >= 3:
            names = self.names[:]
            rng.shuffle(names)
            k = rng.randint(1, self.n - 1)
            self.sim.partition(names[:k], names[k:])
            self.later(rng.randint(300, 3000), self.sim.heal)
        elif x < 0.55:
            a, b = rng.sample(self.names, 2)
            self.sim.cut(a, b)
            self.later(rng.randint(300, 3000), self.sim.heal)
        elif x < 0.7 and self.crash_budget > 0:
            self.crash_budget -= 1
            victim = rng.choice(self.names)
            self.sim.crash(victim)
            self.crashed(victim)
            self.later(rng.randint(200, 3000), lambda: self.restart(victim))
        elif x < 0.8 and self.fsync is AppendFsync.ALWAYS:
            # The disk refuses writes for a while: the node exits at its next
            # write (nothing unlogged is acknowledged) and comes back later.
            victim = rng.choice(self.names)
            disk = self.sim.hosts[victim].disk
            disk.fail_writes = True
            self.crashed(victim)

            def repaired():
                disk.fail_writes = False
                self.restart(victim)

            self.later(rng.randint(200, 2000), repaired)

    # -- clock faults (tests/sim/test_clock_sim.py) ----------------------------------
    def start_skewed(self) -> str:
        """A new host, its clock set off by up to 2 minutes either way (with
        ``clocks``) before its node first reads it. (Around 10 minutes: the
        simulation starts at 0, and a node's times are never negative.)"""
        host = self.sim.add_host(start=False)
        if self.clocks:
            host.clock_offset = 600_000 + self.clock_rng.randint(-120_000, 120_000)
        self.sim.start(host.name)
        return host.name

    def clock_fault(self) -> None:
        clock_fault(self.sim, self.clock_rng, self.names)

    def restart(self, name: str) -> None:
        if not self.sim.hosts[name].alive:
            self.sim.start(name)
            self.consume(name, self.sim.hosts[name].incarnation)

    # -- what the checker is fed ----------------------------------------------------
    def observe(self, sim) -> bool:
        """Every poll: the checker notes when an acked job disappeared from
        every live node."""
        self.checker.observe(self.holders, sim.now)
        return False

    def quiet(self, sim) -> bool:
        self.observe(sim)
        return self.checker.settled(self.live_nodes())

    def counters_in_flight(self, sim) -> bool:
        for msg in sim.in_flight():
            if msg.type == B.BATCH:
                if any(t in COUNTER_MESSAGES for t in msg.payload[0::2]):
                    return True
            elif msg.type in COUNTER_MESSAGES:
                return True
        return False

    def check_counters(self) -> None:
        """Once no message carrying a job's counters is on its way, the
        checker compares its holders' (runs without message loss)."""
        if self.sim.run_for(3000, until=lambda s: not self.counters_in_flight(s), poll=5):
            self.checker.check_counters(self.live_nodes(), self.sim.now)

    # -- the run --------------------------------------------------------------------
    def run(self) -> Report:
        """The scenario, then the report. Nodes are strict: an exception in our
        own code stops the run and is a violation ("no internal error")."""
        checker = self.checker
        try:
            self._run()
        except Exception:
            checker.violation(self.sim.now, "internal error (a bug in our code):\n"
                              + traceback.format_exc())
        for v in self.sim.violations:
            checker.violation(self.sim.now, v)
        self.sim.violations.clear()
        return checker.report(self.sim.now, released=len(self.released),
                              rereleased=self.rereleased, key_retries=self.key_retries)

    def _run(self) -> None:
        sim, rng = self.sim, self.rng
        for i in range(1, self.n):
            prev = sim.hosts[self.names[i - 1]]
            self.command(self.names[i], ["CLUSTER", "MEET", prev.ip, prev.port, prev.bus_port],
                         lambda r: None)
        sim.run_for(1500)
        for name in self.names:
            self.consume(name, sim.hosts[name].incarnation)
        for i in range(self.njobs):
            sim.at(sim.now + rng.randint(0, self.chaos_ms), lambda s, i=i: self.produce(i))
        if self.clocks:
            for _ in range(self.clock_rng.randint(1, 4)):
                sim.at(sim.now + self.clock_rng.randint(0, self.chaos_ms),
                       lambda s: self.clock_fault())
        if self.faults:
            for _ in range(rng.randint(1, 4)):
                sim.at(sim.now + rng.randint(0, self.chaos_ms), lambda s: self.fault())
        sim.run_for(self.chaos_ms + 500, until=self.observe, poll=100)
        if not self.faults:
            self.check_counters()
        # Heal everything and let the consumers ack whatever comes.
        self.final = True
        sim.heal()
        sim.net.drop = sim.net.duplicate = 0.0
        for name in self.names:
            self.restart(name)
        self.later(3000, self.release_held_copies)
        sim.run_for(240_000, until=self.quiet, poll=200)
        self.checker.check_end(self.live_nodes(), sim.now)


def clock_fault(sim: Simulation, rng: random.Random, names: list) -> None:
    """One host's clock jumps forward or back, or strobes, seconds to a minute."""
    name = rng.choice(names)
    delta = rng.choice([-1, 1]) * rng.choice([2_000, 10_000, 60_000])
    if rng.random() < 0.3:
        sim.strobe_clock(name, delta, rng.choice([50, 200, 500]), sim.now + rng.randint(500, 3000))
    else:
        sim.jump_clock(name, delta)


__all__ = ["Workload", "Report", "clock_fault"]
