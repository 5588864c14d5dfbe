"""A seeded workload for the broker simulator: producers, consumers, faults, and
the bookkeeping the SPEC section 9 invariants are checked against.

One seed decides everything: cluster size, jobs, who consumes, who acks where,
partitions, crashes, message loss. A share of the jobs is added held (ADDJOB
... HOLD, an extension) and released later by ENQUEUE on a random holder. ``Workload(seed).run()`` returns a Report;
``Report.violations`` lists broken invariants, each naming the seed.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, field

from broker.job import ACKED, FLAG_DUMMY_ACK, HELD, id_is_at_least_once
from cluster.sim import NetworkConfig, Simulation
from server.sim_node import broker_factory
from protocol import bus as B
from protocol.resp import Error, Status

QUEUE = b"q"
# Messages that carry a job's counters (or ask for them: WILLQUEUE).
COUNTER_MESSAGES = {B.REPLJOB, B.YOURJOBS, B.QUEUED, B.WILLQUEUE}


@dataclass
class Report:
    seed: int
    violations: list = field(default_factory=list)
    produced: int = 0              # ADDJOBs acknowledged to the producer
    key_retries: int = 0           # ADDJOBs sent again with the first one's IDEMPOTENCY key
    deliveries: int = 0
    distinct_delivered: int = 0
    at_least_once_redeliveries: int = 0
    duplicates: int = 0            # redeliveries not asked for (no NACK, no RETRY timeout)
    moved_redeliveries: int = 0    # redelivered by another node than the previous delivery
    sim_time: int = 0
    persistence: str = "off"       # appendfsync policy of the run, or "off"
    held: int = 0                  # jobs added with HOLD (acknowledged)
    released: int = 0              # ...whose ENQUEUE answered 1
    rereleased: int = 0            # ENQUEUEs sent again, after the heal, for copies still held


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
        self.fsync = fsync or drawn         # (a test may ask for one policy)
        self.rewrites = disk_rng.random() < 0.5
        directives = {"cluster_node_timeout": 1000}
        if self.fsync != "off":
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
        self.final = False                 # final phase: healed, consumers ack everything
        self.crashed_at: dict[str, list] = {name: [] for name in self.names}
        self.produced: dict[bytes, dict] = {}    # jid -> {time, repl, retry, holders, async}
        self.deliveries: list = []               # (jid, time, host)
        self.acked: set[bytes] = set()
        self.acked_at: dict[bytes, int] = {}     # first ACKJOB/FASTACK sent by a consumer
        self.nacked_at: dict[bytes, list] = {}
        self.collected_at: dict[bytes, int] = {}
        self.violations: list = []
        self.crash_budget = 1 if faults else 0
        # Short TTLs (their own stream: the main draws keep their scenarios): a
        # job may expire while its ADDJOB still waits for copies, which must
        # then answer -NOREPL, never the id (issue 16).
        self.ttl_rng = random.Random(seed ^ 0x7711)
        # Held jobs (their own stream too): body -> when the first ENQUEUE for
        # it was sent (None: not yet), and job id -> (time, host) of the
        # ENQUEUE that answered 1.
        self.hold_rng = random.Random(seed ^ 0x401D)
        self.held_bodies: dict[bytes, int | None] = {}
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
        jumped: cluster/sim.py jump_clock)."""
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
            self.held_bodies[body] = None
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
                holders = self.holders(jid)
                crashed_meanwhile = any(t >= start for ts in self.crashed_at.values() for t in ts)
                # A replica may requeue, deliver and collect the job before the
                # producer hears back (replication slower than RETRY): no copy check.
                consumed = any(d[0] == jid for d in self.deliveries)
                if (not is_async and len(holders) < repl
                        and not (crashed_meanwhile or consumed or self.stepped_forward(start))):
                    self.violation(f"ADDJOB {jid!r} answered with {len(holders)} live copies "
                                   f"< REPLICATE {repl}")
                self.produced[jid] = {"time": self.sim.now, "repl": repl, "retry": retry,
                                      "holders": holders, "async": is_async, "ttl": ttl,
                                      "held": held, "body": body, "key": key}
                if held:
                    self.later(self.hold_rng.randint(0, 2000), lambda: self.release(jid, body))

        self.command(name, args, done)

    def key_ids(self, key: bytes) -> set:
        """Every job id the cluster knows for an IDEMPOTENCY key: copies held and
        the keys' maps of every live node, ids the producer was given."""
        ids = {j for j, p in self.produced.items() if p.get("key") == key}
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
        """(ext) The same ADDJOB, sent again with its IDEMPOTENCY key to `name`.
        Checked exactly: a node that holds a copy of a job added with that key
        (waiting for its copies, live or acked) creates no second job; it answers
        an id the cluster already knew (or the first add's error)."""
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
            if held and jid not in known:
                self.violation(f"ADDJOB retried with key {key!r} on {name}, which held "
                               f"{held}, created a second job {jid!r}")
            if jid not in self.produced:
                # A job this retry created has its REPLICATE copies; one it was
                # answered (a node holding, or having held, one copy of it) has
                # that copy for the producer to count on.
                self.produced[jid] = {"time": self.sim.now,
                                      "repl": 1 if jid in known else repl, "retry": retry,
                                      "holders": self.holders(jid), "async": "ASYNC" in args,
                                      "ttl": ttl, "key": key, "held": "HOLD" in args,
                                      "body": args[2]}
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
        if self.held_bodies[body] is None:
            self.held_bodies[body] = self.sim.now

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
                if j.state == HELD and j.id in self.produced:
                    if j.id in self.released:
                        if now - self.released[j.id][0] < 3000:
                            continue        # its QUEUED may be on its way
                        self.rereleased += 1
                    if self.held_bodies.get(j.body) is None:
                        self.held_bodies[j.body] = self.sim.now
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
                    self.delivered(jid, name)
                    if bytes(body) in self.held_bodies and self.held_bodies[bytes(body)] is None:
                        self.violation(f"held job {jid!r} delivered on {name} before any "
                                       f"ENQUEUE released it")
                    self.later(self.rng.randint(1, 300), lambda j=jid: self.finish(j, name))
            self.later(self.rng.randint(1, 50), lambda: self.consume(name, incarnation))

        self.command(name, ["GETJOB", "TIMEOUT", 400, "FROM", QUEUE], got)

    def delivered(self, jid: bytes, name: str) -> None:
        t = self.sim.now
        # A host that crashed holds what its disk kept, even while it is down.
        crashed = any(c <= t for cs in self.crashed_at.values() for c in cs)
        if jid in self.collected_at and not (self.fsync != "off" and crashed):
            # (With an AOF a node that was down when the job was collected, or
            # missed a best-effort DELJOB, comes back with it; under everysec a
            # crash may also lose the last second of records, the ack among
            # them: the job comes back, at least once.)
            self.violation(f"{jid!r} delivered on {name} at {t} after its ack was "
                           f"collected at {self.collected_at[jid]}")
        self.deliveries.append((jid, t, name))

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
            self.acked_at.setdefault(jid, self.sim.now)
        if x < 0.75:
            self.command(target, ["ACKJOB", jid], lambda r: self.acked.add(jid)
                         if not isinstance(r, Error) else None)
        elif x < 0.82:
            self.command(target, ["FASTACK", jid], lambda r: self.acked.add(jid))
        elif x < 0.9:
            self.nacked_at.setdefault(jid, []).append(self.sim.now)
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
            self.crashed_at[victim].append(self.sim.now)
            self.later(rng.randint(200, 3000), lambda: self.restart(victim))
        elif x < 0.8 and self.fsync == "always":
            # The disk refuses writes for a while: the node exits at its next
            # write (nothing unlogged is acknowledged) and comes back later.
            victim = rng.choice(self.names)
            disk = self.sim.hosts[victim].disk
            disk.fail_writes = True
            self.crashed_at[victim].append(self.sim.now)

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

    def stepped_forward(self, since: int) -> bool:
        """Some host's clock stepped forward since then: its node may have
        expired copies early (it cannot tell a jump from a stall)."""
        return self.clocks and any(e[1] == "clock" and e[3] > 0 and e[0] >= since
                                   for e in self.sim.trace)

    def restart(self, name: str) -> None:
        if not self.sim.hosts[name].alive:
            self.sim.start(name)
            self.consume(name, self.sim.hosts[name].incarnation)

    # -- invariants -----------------------------------------------------------------
    def violation(self, text: str) -> None:
        self.violations.append(f"seed={self.seed} t={self.sim.now}: {text}")

    def observe(self, sim) -> bool:
        """Every poll: note when an acked job disappeared from every live node."""
        for jid in self.acked:
            if jid not in self.collected_at and not self.holders(jid):
                self.collected_at[jid] = sim.now
        return False

    def quiet(self, sim) -> bool:
        self.observe(sim)
        delivered = {d[0] for d in self.deliveries}
        pending = [j for j, p in self.produced.items()
                   if j not in delivered and self.must_survive(j, p)]
        return not pending and not self.leftovers()

    def leftovers(self) -> dict:
        """Jobs still held that should be gone: everything but at-most-once jobs
        delivered and never acked (they wait for their TTL, as specified), and
        held jobs whose producer never learnt the id (a lost ADDJOB reply, a
        -NOREPL whose DELJOB was lost): nobody releases them, their TTL ends them."""
        left = {}
        for h in self.sim.hosts.values():
            if h.alive and h.node.node.job_count:
                jobs = [j.id for j in h.node.node.iter_jobs()
                        if not (j.retry == 0 and j.state != ACKED
                                and (j.id not in self.acked or self.ack_lost(j.id, h.name))
                                and (any(d[0] == j.id for d in self.deliveries)
                                     or self.reloaded(j.id, h.name)))
                        and not (j.state == HELD and j.id not in self.produced)]
                if jobs:
                    left[h.name] = jobs
        return left

    def counters_in_flight(self, sim) -> bool:
        for msg in sim.in_flight():
            if msg.type == B.BATCH:
                if any(t in COUNTER_MESSAGES for t in msg.payload[0::2]):
                    return True
            elif msg.type in COUNTER_MESSAGES:
                return True
        return False

    def check_counters(self) -> None:
        """Counters are a property of the job (issue 16): once no message that
        carries them is on its way, every holder shows the same nacks and
        additional-deliveries, whichever of them re-queued it (checked on runs
        without message loss: a lost QUEUED is only made good by the next one)."""
        if not self.sim.run_for(3000, until=lambda s: not self.counters_in_flight(s), poll=5):
            return
        copies: dict[bytes, list] = {}
        for h in self.sim.hosts.values():
            if h.alive:
                for j in h.node.node.iter_jobs():
                    if j.state != ACKED and not j.flags & FLAG_DUMMY_ACK:
                        copies.setdefault(j.id, []).append(
                            (h.name, j.nacks, j.additional_deliveries))
        for jid, held in copies.items():
            if len({c[1:] for c in held}) > 1:
                self.violation(f"holders disagree on the counters of {jid!r} once quiet: "
                               f"{held} (name, nacks, additional-deliveries)")

    def reloaded(self, jid: bytes, name: str) -> bool:
        """Loaded from the AOF after a crash of `name`: a RETRY 0 job comes back
        active and is never queued again by a load (SPEC section 7): it waits
        for its TTL."""
        p = self.produced.get(jid)
        return (self.fsync != "off" and p is not None
                and any(c >= p["time"] for c in self.crashed_at[name]))

    def ack_lost(self, jid: bytes, name: str) -> bool:
        """Under everysec a crash of `name` after the ack may have lost it."""
        t = self.acked_at.get(jid)
        return (self.fsync == "everysec" and t is not None
                and any(c >= t for c in self.crashed_at[name]))

    def must_survive(self, jid: bytes, p: dict) -> bool:
        """SPEC 9.1: acknowledged (sync) and fewer than REPLICATE holders lost.
        At-most-once (RETRY 0) jobs are exempt: one moved by federation is lost
        with the YOURJOBS message if that is lost, as in Disque. Under
        appendfsync always a crash loses no holder: every acknowledged job
        survives any crash."""
        if p["async"] or p["retry"] == 0 or p["ttl"] < 60:
            return False                # (a short TTL may expire first, as it should)
        if self.fsync == "always":
            return True
        lost = sum(1 for h in p["holders"] if any(t >= p["time"] for t in self.crashed_at[h]))
        return lost < p["repl"]

    # -- the run --------------------------------------------------------------------
    def run(self) -> Report:
        """The scenario, then the report. Nodes are strict: an exception in our
        own code stops the run and is a violation ("no internal error")."""
        try:
            self._run()
        except Exception:
            self.violation("internal error (a bug in our code):\n" + traceback.format_exc())
        for v in self.sim.violations:
            self.violation(v)
        self.sim.violations.clear()
        return self.report()

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
        if not sim.run_for(240_000, until=self.quiet, poll=200):
            left = self.leftovers()
            delivered = {d[0] for d in self.deliveries}
            lost = [j for j, p in self.produced.items()
                    if j not in delivered and self.must_survive(j, p)]
            if lost:
                self.violation(f"acknowledged jobs never delivered: {lost}")
            if left:
                self.violation(f"jobs still held after heal (acks not collected): {left}")

    def unasked(self, jid: bytes, prev: int, t: int) -> bool:
        """A redelivery nobody asked for: after the consumer acked it, or sooner
        than RETRY after the previous delivery with no NACK in between."""
        if self.acked_at.get(jid, t) < t:
            return True
        if any(prev <= n <= t for n in self.nacked_at.get(jid, ())):
            return False
        p = self.produced.get(jid)
        retry_ms = (p["retry"] if p else 1) * 1000
        return t - prev < retry_ms - 300

    def report(self) -> Report:
        r = Report(self.seed, self.violations, produced=len(self.produced),
                   deliveries=len(self.deliveries), sim_time=self.sim.now,
                   persistence=self.fsync, released=len(self.released),
                   held=sum(1 for p in self.produced.values() if p["held"]),
                   rereleased=self.rereleased, key_retries=self.key_retries)
        seen: dict[bytes, int] = {}
        last: dict[bytes, int] = {}
        where: dict[bytes, str] = {}
        for jid, t, h in self.deliveries:
            seen[jid] = seen.get(jid, 0) + 1
            if jid in last and self.unasked(jid, last[jid], t):
                r.duplicates += 1
            if jid in where and where[jid] != h:
                r.moved_redeliveries += 1
            last[jid] = t
            where[jid] = h
        r.distinct_delivered = len(seen)
        for jid, count in seen.items():
            p = self.produced.get(jid)
            retry = p["retry"] if p else None
            if retry == 0 and count > 1:
                self.violation(f"RETRY 0 job {jid!r} delivered {count} times")
            elif count > 1:
                r.at_least_once_redeliveries += count - 1
        return r


def clock_fault(sim: Simulation, rng: random.Random, names: list) -> None:
    """One host's clock jumps forward or back, or strobes, seconds to a minute."""
    name = rng.choice(names)
    delta = rng.choice([-1, 1]) * rng.choice([2_000, 10_000, 60_000])
    if rng.random() < 0.3:
        sim.strobe_clock(name, delta, rng.choice([50, 200, 500]), sim.now + rng.randint(500, 3000))
    else:
        sim.jump_clock(name, delta)


__all__ = ["Workload", "Report", "ACKED", "clock_fault"]
