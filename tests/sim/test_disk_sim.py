"""The simulated disk (cluster/sim.py SimDisk) under a broker node's AOF: what
is acknowledged under appendfsync always survives any crash; what was not
fsynced is lost; a failed write stops the node (always) or refuses new jobs
(everysec, -MISCONF)."""

from __future__ import annotations

from cluster.sim import SimDisk, Simulation
from protocol.resp import Error, Status
from server.sim_node import broker_factory


def one_node(**directives):
    sim = Simulation(1, broker_factory(cluster_node_timeout=1000, **directives))
    host = sim.add_host()
    sim.run_for(200)
    return sim, host


def command(sim, host, *args):
    got = []
    client = host.node.new_client(got.append)
    sim.call(host.name, lambda node, now: node.command(client, args, now))
    return got[0] if got else None


def test_the_disk_keeps_only_what_was_fsynced():
    disk = SimDisk()
    disk.write(b"a", [b"id-a"])
    disk.fsync()
    disk.write(b"b", [b"id-b"])
    assert disk.holds(b"id-b", synced_only=False) and not disk.holds(b"id-b", synced_only=True)
    disk.crash()
    assert disk.holds(b"id-a", synced_only=True) and not disk.holds(b"id-b", synced_only=False)
    assert disk.image().endswith(b"a")


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
    jid = command(sim, host, "ADDJOB", "q", "body", 0)
    sim.crash(host.name)                # within the second: not fsynced
    sim.start(host.name)
    assert command(sim, host, "SHOW", jid) is None
    jid = command(sim, host, "ADDJOB", "q", "body", 0)
    sim.run_for(1500)                   # the everysec fsync came
    sim.crash(host.name)
    sim.start(host.name)
    assert command(sim, host, "SHOW", jid) is not None


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
