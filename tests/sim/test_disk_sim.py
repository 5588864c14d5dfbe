"""The simulated disk (cluster/sim.py SimDisk) under a broker node's AOF
(server/disk_aof.py): what is acknowledged under appendfsync always survives
any crash; what was not fsynced is lost; a failed write stops the node (always)
or refuses new jobs (everysec, -MISCONF).

The simulator's writer and the file writer (server/aof.py) ask one policy
object (broker/aof_policy.py) when to fsync, when to rewrite and what a rewrite
keeps: a seeded durability scenario shows each decision of that object in what
survives a power loss, so a writer with its own copy of the rules fails here.
"""

from __future__ import annotations

import random

from broker.aof_policy import EVERYSEC_MS, AOFPolicy
from cluster.sim import SimDisk, Simulation
from protocol.resp import Error, Status
from server.sim_node import broker_factory


def one_node(policy=None, **directives):
    """A one-node simulation; ``policy(config)``, if given, makes the policy
    object of the node's AOF writer at every start."""
    factory = broker_factory(cluster_node_timeout=1000, **directives)
    if policy is not None:
        plain = factory

        def factory(host, saved, rng, now):
            node = plain(host, saved, rng, now)
            node.driver.aof.policy = policy(node.config)
            return node

    sim = Simulation(1, factory)
    host = sim.add_host()
    sim.run_for(200)
    return sim, host


def command(sim, host, *args):
    got = []
    client = host.node.new_client(got.append)
    sim.call(host.name, lambda node, now: node.command(client, args, now))
    return got[0] if got else None


def durability_run(seed: int, policy=None, **directives):
    """ADDJOBs at seeded times, then a power loss at a seeded time and a
    restart. Returns {job id: time acknowledged}, the ids that survived, and
    the time of the power loss."""
    rng = random.Random(seed)
    sim, host = one_node(policy, appendonly="yes", **directives)
    acked = {}
    for i in range(rng.randint(20, 60)):
        sim.run_for(rng.choice([1, 5, 50, 300, 900, 1200]))
        jid = command(sim, host, "ADDJOB", "q", f"job-{i}", 0)
        assert isinstance(jid, Status), jid
        acked[jid] = sim.now
    sim.run_for(rng.randint(0, 1500))
    power_loss = sim.now
    sim.crash(host.name)
    sim.start(host.name)
    survived = {jid for jid in acked if command(sim, host, "SHOW", jid) is not None}
    return acked, survived, power_loss


# ------------------------------------------------------------------- the disk
def test_the_disk_keeps_only_what_was_fsynced():
    disk = SimDisk()
    disk.write(b"a", [b"id-a"])
    disk.fsync()
    disk.write(b"b", [b"id-b"])
    assert disk.holds(b"id-b", synced_only=False) and not disk.holds(b"id-b", synced_only=True)
    disk.crash()
    assert disk.holds(b"id-a", synced_only=True) and not disk.holds(b"id-b", synced_only=False)
    assert disk.image().endswith(b"a")


# -------------------------------------------------------------------- fsync
def test_an_addjob_acknowledged_under_always_survives_a_crash():
    sim, host = one_node(appendonly="yes", appendfsync="always")
    jid = command(sim, host, "ADDJOB", "q", "body", 0)
    assert isinstance(jid, Status)
    sim.crash(host.name)
    sim.start(host.name)
    show = command(sim, host, "SHOW", jid)
    assert show is not None and show[show.index(b"body") + 1] == b"body"


def test_everysec_loses_what_was_not_fsynced_yet():
    sim, host = one_node(appendonly="yes", appendfsync="everysec")
    sim.run_for(1500)
    first = command(sim, host, "ADDJOB", "q", "body", 0)     # a second since the last fsync
    second = command(sim, host, "ADDJOB", "q", "body", 0)    # within the second: not fsynced
    sim.crash(host.name)
    sim.start(host.name)
    assert command(sim, host, "SHOW", first) is not None
    assert command(sim, host, "SHOW", second) is None
    command(sim, host, "ADDJOB", "q", "body", 0)
    jid = command(sim, host, "ADDJOB", "q", "body", 0)
    sim.run_for(1500)                   # the everysec fsync came
    sim.crash(host.name)
    sim.start(host.name)
    assert command(sim, host, "SHOW", jid) is not None


def test_each_fsync_policy_loses_exactly_what_it_says_on_power_loss():
    """always: nothing acknowledged is lost; no: everything not fsynced (here,
    all) is; everysec: only what was acknowledged within the last second."""
    for seed in range(5):
        acked, survived, _ = durability_run(seed, appendfsync="always")
        assert survived == set(acked), seed
        acked, survived, _ = durability_run(seed, appendfsync="no")
        assert survived == set(), seed
        acked, survived, power_loss = durability_run(seed, appendfsync="everysec")
        lost = set(acked) - survived
        # A tick (100 ms at most) may come between the second's end and the fsync.
        assert all(power_loss - acked[j] < EVERYSEC_MS + 100 for j in lost), seed
        assert survived, seed


class NeverFsync(AOFPolicy):
    """A policy that never fsyncs, whatever appendfsync says."""

    def fsync_before_replies(self, rewriting: bool) -> bool:
        return False

    def fsync_due(self, now: int, last_fsync: int, rewriting: bool) -> bool:
        return False


def test_the_writer_fsyncs_when_the_policy_object_says():
    """appendfsync always with a policy object that never fsyncs loses what
    appendfsync no loses: the decision is the object's, not a copy in the
    simulator's writer."""
    for seed in range(3):
        acked, survived, _ = durability_run(seed, NeverFsync, appendfsync="always")
        assert acked and survived == set(), seed


# ------------------------------------------------------------------ rewrite
REWRITE = dict(auto_aof_rewrite_percentage=100, auto_aof_rewrite_min_size=1)


def test_a_rewrite_keeps_the_live_jobs_and_drops_the_acked():
    sim, host = one_node(appendonly="yes", appendfsync="always", **REWRITE)
    live = [command(sim, host, "ADDJOB", "q", f"live-{i}", 0) for i in range(20)]
    done = [command(sim, host, "ADDJOB", "q", f"done-{i}", 0) for i in range(20)]
    command(sim, host, "ACKJOB", *done)
    aof = host.node.driver.aof
    assert aof.rewrites > 0 and aof.current_size < 2 * aof.base_size
    sim.crash(host.name)
    sim.start(host.name)
    assert all(command(sim, host, "SHOW", j) is not None for j in live)
    assert all(command(sim, host, "SHOW", j) is None for j in done)


class KeepNothing(AOFPolicy):
    """A policy whose rewrite keeps no job."""

    @staticmethod
    def live_jobs(jobs, now: int) -> list:
        return []


class NeverRewrite(AOFPolicy):
    def rewrite_due(self, current_size: int, base_size: int) -> bool:
        return False


def test_the_writer_rewrites_when_and_what_the_policy_object_says():
    sim, host = one_node(KeepNothing, appendonly="yes", appendfsync="always", **REWRITE)
    jid = command(sim, host, "ADDJOB", "q", "body", 0)
    for _ in range(3):                  # the file doubles: a rewrite keeping nothing
        command(sim, host, "ADDJOB", "q", "body", 0)
    assert host.node.driver.aof.rewrites > 0
    sim.crash(host.name)
    sim.start(host.name)
    assert command(sim, host, "SHOW", jid) is None
    sim, host = one_node(NeverRewrite, appendonly="yes", appendfsync="always", **REWRITE)
    for _ in range(10):
        command(sim, host, "ADDJOB", "q", "body", 0)
    assert host.node.driver.aof.rewrites == 0


# -------------------------------------------------------------- write errors
def test_a_failed_write_under_always_stops_the_node_before_the_reply():
    sim, host = one_node(appendonly="yes", appendfsync="always")
    host.disk.fail_writes = True
    assert command(sim, host, "ADDJOB", "q", "body", 0) is None
    assert not host.alive


def test_a_failed_write_under_everysec_refuses_new_jobs_until_it_works():
    sim, host = one_node(appendonly="yes", appendfsync="everysec")
    host.disk.fail_writes = True
    command(sim, host, "ADDJOB", "q", "body", 0)
    reply = command(sim, host, "ADDJOB", "q", "body", 0)
    assert isinstance(reply, Error) and reply.startswith("MISCONF Errors writing to the AOF")
    host.disk.fail_writes = False
    sim.run_for(200)                    # the next flush writes what waited
    assert isinstance(command(sim, host, "ADDJOB", "q", "body", 0), Status)
