"""Clock faults in the simulator (issue 25): hosts whose clocks start skewed
by up to two minutes either way, then jump forward and back and strobe
(server/sim/simulation.py jump_clock, strobe_clock), every node reading its host's
clock through the process's rule (server/clock.py SteadyClock).

- The delivery workload (server/sim/workload.py, ``clocks=True``) keeps every
  invariant of tests/sim/test_delivery_sim.py (nothing acknowledged lost, RETRY
  0 never delivered twice, acks collected...), and no requeue storm.
- TTL probes: jobs nobody consumes, watched on every node at every poll. No job
  leaves the cluster before its TTL by the simulation's (true) time, and no
  copy leaves a node before it, unless that node's clock, or its
  originator's, stepped forward (a node cannot tell a jump from a stall).

A failure names its seed: ``Workload(seed, clocks=True).run()`` or
``ttl_run(seed)`` replays it. SIM_CLOCK_SEEDS (default 100) sets how many seeds
each sweep runs (10,000 between real runs).
"""

from __future__ import annotations

import os
import random
from collections import defaultdict

import pytest

from broker.job import Job
from chaos.checker import STORM_DELIVERIES
from cluster import replication
from protocol import bus
from protocol.resp import Status
from server.clock import STEP_MS, SteadyClock
from server.sim.broker_node import broker_factory
from server.sim.simulation import Simulation
from server.sim.workload import Workload, clock_fault
from tests.unit.protocol.test_bus import read_all, sample

TOTAL_SEEDS = int(os.environ.get("SIM_CLOCK_SEEDS", "100"))
PER_CHUNK = 25              # seeds a test runs (each well inside pytest's timeout)
CHUNKS = max(1, TOTAL_SEEDS // PER_CHUNK)


# ----------------------------------------------------------- the node's clock
def test_a_forward_step_counts_a_backward_one_is_owed_then_repaid():
    c = SteadyClock(10_000)
    assert c.read(10_050) == 10_050
    assert c.read(70_050) == 70_050                 # forward: a stall or a jump, counted
    assert c.read(10_050) == 70_050                 # back 60 s: ignored, owed
    assert c.read(10_150) == 70_150                 # time goes on meanwhile
    assert c.read(70_150) == 70_150                 # forward again: repays what was owed
    assert c.owed == 0
    assert c.read(70_250) == 70_250


def test_a_strobing_clock_does_not_run_ahead():
    c = SteadyClock(0)
    reading = 0
    for _ in range(100):                            # +10 s, -10 s, 10 times a second
        reading += 50 + 10_000
        c.read(reading)
        reading += 50 - 10_000
        c.read(reading)
    assert 10_000 - STEP_MS <= c.now <= 10_000 + 10_000


# ---------------------------------------------------------- times on the bus
def test_an_expire_time_crosses_the_bus_with_the_senders_clock():
    fields = replication.wire_fields(_job(), 5_000)
    assert fields[-1] == 5_000
    (got,) = read_all(bus.encode_frame(sample(bus.REPLJOB, fields, gossip=[])))
    assert got.malformed == 0
    # A receiver 90 s ahead of the sender: the copy ends when the original does.
    local = replication.local_fields(got.payload, 5_000 + 90_000)
    assert local[6] == fields[6] + 90_000 and len(local) == 14
    assert got.payload[6] == fields[6]              # the message itself is left as it was
    # A peer without the extension sends no clock: the time is taken as it is.
    plain = fields[:-1]
    assert replication.local_fields(plain, 1) is plain


def _job():
    return Job(b"D-0123abcd-%024d-0005" % 1, b"q", b"body", 1, 2, 65_000, 5_000 * 1_000_000,
               0, 5)


# ------------------------------------------------------------ delivery sweep
def storms(w: Workload) -> list:
    """Jobs delivered more than STORM_DELIVERIES times within 1 s of true time
    with no NACK between the deliveries (chaos/checker.py's requeue storm)."""
    times = defaultdict(list)
    for jid, t, _host in w.checker.deliveries:
        times[jid].append(t)
    out = []
    for jid, ts in times.items():
        nacks = w.checker.nacked_at.get(jid, ())
        kept = [ts[0]] + [b for a, b in zip(ts, ts[1:]) if not any(a <= n <= b for n in nacks)]
        first = 0
        for last, t in enumerate(kept):
            while t - kept[first] > 1000:
                first += 1
            if last - first + 1 > STORM_DELIVERIES:
                out.append((jid, kept))
                break
    return out


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_delivery_invariants_hold_with_clock_faults(chunk):
    violations, stormy, steps = [], [], 0
    for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        w = Workload(seed, clocks=True)
        report = w.run()
        violations += report.violations
        stormy += [(seed, s) for s in storms(w)]
        steps += sum(1 for e in w.sim.trace if e[1] == "clock")
    assert not violations, "\n".join(violations[:20])
    assert not stormy, stormy[:5]
    assert steps > PER_CHUNK, "the clocks hardly moved"


# ---------------------------------------------------------------- TTL probes
def ttl_run(seed: int, codec=None) -> tuple[list[str], dict]:
    """Skewed hosts, clock jumps and strobes, and jobs with short TTLs that
    nobody consumes, watched every 50 ms. Returns the violations and counts."""
    rng = random.Random(seed)
    sim = Simulation(seed, broker_factory(cluster_node_timeout=1000), codec=codec)
    names = []
    for _ in range(rng.choice((3, 4, 5))):
        host = sim.add_host(start=False)
        host.clock_offset = 600_000 + rng.randint(-120_000, 120_000)
        names.append(sim.start(host.name).name)

    def command(name, args, on_reply):
        host = sim.hosts[name]
        client = host.node.new_client(on_reply)
        sim.call(name, lambda node, now: node.command(client, args, now))

    for prev, name in zip(names, names[1:]):
        h = sim.hosts[prev]
        command(name, ["CLUSTER", "MEET", h.ip, h.port, h.bus_port], lambda r: None)
    sim.run_for(2000)

    probes: dict[bytes, dict] = {}
    violations: list[str] = []
    counts = {"probes": 0, "copies_checked": 0, "excused": 0}

    def add(i):
        name, ttl = rng.choice(names), rng.randint(1, 8)
        repl = rng.randint(1, min(3, len(names)))
        start = sim.now

        def done(reply):
            if isinstance(reply, Status):
                jid = reply.encode()
                probes[jid] = {"start": start, "end": start + ttl * 1000, "repl": repl,
                               "holders": set(holders(jid)), "origin": name}
                counts["probes"] += 1
                if len(probes[jid]["holders"]) < repl and not any(
                        forward(n, start, sim.now) for n in names):
                    violations.append(f"seed={seed}: {jid!r} answered with fewer copies "
                                      f"than REPLICATE {repl}")
        command(name, ["ADDJOB", "probe", b"p%d" % i, 1000, "TTL", ttl, "REPLICATE", repl,
                       "RETRY", rng.choice([0, 1, 3]) if repl == 1 else rng.choice([1, 3])],
                done)

    def holders(jid):
        return [n for n in names if sim.hosts[n].node.node.get_job(jid) is not None]

    for i in range(30):
        sim.at(sim.now + rng.randint(0, 6000), lambda s, i=i: add(i))
    for _ in range(rng.randint(1, 4)):
        sim.at(sim.now + rng.randint(0, 6000), lambda s: clock_fault(sim, rng, names))

    def forward(name, since, until):
        return any(e[1] == "clock" and e[2] == name and e[3] > 0 and since <= e[0] <= until
                   for e in sim.trace)

    def watch(s):
        for jid, p in probes.items():
            if s.now >= p["end"] or p.get("gone"):
                continue
            now = set(holders(jid))
            for name in sorted(p["holders"] - now):
                counts["copies_checked"] += 1
                # Its own clock stepped forward, or its originator's did
                # before sending it (the copy carries what is left by that clock).
                if forward(name, p["start"], s.now) or forward(p["origin"], p["start"], s.now):
                    counts["excused"] += 1
                else:
                    violations.append(f"seed={seed} t={s.now}: the copy of {jid!r} on {name} "
                                      f"expired {p['end'] - s.now} ms before its TTL")
            p["holders"] = now
            if not now:
                p["gone"] = True
        return False

    sim.run_for(20_000, until=watch, poll=50)
    return violations, counts


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_job_or_copy_expires_before_its_ttl(chunk):
    violations, probes, excused = [], 0, 0
    for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        v, counts = ttl_run(seed)
        violations += v
        probes += counts["probes"]
        excused += counts["excused"]
    assert not violations, "\n".join(violations[:20])
    assert probes > 20 * PER_CHUNK
    print(f"{probes} probes; {excused} copies went early on a node whose clock jumped forward")


def without_sender_clock(msg):
    """The bus as peers without the extension speak it: job copies carry no
    sender's clock (cluster/replication.py wire_fields)."""
    def strip(fields):
        return fields[:-1] if type(fields[-1]) is int else fields

    def job_payload(mtype, payload):
        if mtype == bus.REPLJOB:
            return strip(payload)
        if mtype == bus.YOURJOBS:
            return [strip(f) for f in payload]
        return payload

    if msg.type == bus.BATCH:
        p = msg.payload
        payload = [x for i in range(0, len(p), 2) for x in (p[i], job_payload(p[i], p[i + 1]))]
    else:
        payload = job_payload(msg.type, msg.payload)
    return bus.BusMessage(msg.type, msg.sender, msg.ip, msg.port, msg.bus_port, msg.flags,
                          msg.gossip, payload)


def test_the_ttl_check_sees_an_expire_time_read_in_the_wrong_clock():
    """Without the sender's clock, a copy on a node ahead of its originator
    expires early (as in Disque): the check above must see it."""
    violations = [v for seed in range(10) for v in ttl_run(seed, without_sender_clock)[0]]
    assert any("before its TTL" in v or "fewer copies" in v for v in violations), violations


def test_a_copy_from_a_node_whose_clock_is_ahead_requeues_after_its_own_retry():
    """Seed 3598 of a 10,000-seed sweep: n1's clock 256 s ahead of n4's (jumps);
    n4 took the job's copy with its requeue timer at the originator's ctime
    (unconverted), 261 s ahead for RETRY 1, and still held it, never acked,
    when the run ended. The copy's timer now starts from our clock."""
    report = Workload(3598, clocks=True).run()
    assert report.violations == []
