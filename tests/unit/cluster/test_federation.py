"""cluster/federation.py: Federation moves queued jobs to the nodes whose
clients wait for them (NEEDJOBS, YOURJOBS) and owns who is hungry, who asked
(interest), what to push next tick (push_pending) and whether jobs are being
imported. On in-process nodes."""

from __future__ import annotations

from protocol import bus as B
from tests.unit.inprocess_cluster import Nodes


def test_a_waiting_consumer_gets_jobs_queued_on_another_node():
    nodes = Nodes(2)
    a, b = nodes[0], nodes[1]
    for i in range(4):
        a.call("ADDJOB", "q", f"job{i}", 0, "REPLICATE", 1)
    consumer = b.new_client()
    b.run(consumer, [b"GETJOB", b"FROM", b"q"])            # blocks: nothing here
    assert b.cluster.federation.hungry == {b"q"}
    nodes.deliver()                                         # NEEDJOBS, YOURJOBS
    ((queue, _jid, body),) = consumer.conn.replies[0]
    assert (queue, body) == (b"q", b"job0")
    assert a.call("QLEN", "q") == 3     # one job moved: one client waits for one
    assert b.node.queues[b"q"].needjobs_responders == {nodes.id(0): nodes.clock.now}
    nodes.advance(100)
    assert b.cluster.federation.hungry == set()             # nobody waits any more


def test_a_job_queued_after_the_ask_is_pushed_to_the_asker():
    nodes = Nodes(2)
    a, b = nodes[0], nodes[1]
    consumer = b.new_client()
    b.run(consumer, [b"GETJOB", b"FROM", b"q"])
    nodes.deliver()                     # a has nothing: it remembers b's interest
    fed = a.cluster.federation
    assert set(fed.interest[b"q"]) == {nodes.id(1)}
    a.call("ADDJOB", "q", "late", 0, "REPLICATE", 1)
    assert fed.push_pending == {b"q"}   # pushed on the next tick, after the reply
    assert a.node.next_deadline() == nodes.clock.now
    nodes.carried.clear()
    nodes.advance(10)
    assert (nodes.id(0), nodes.id(1), B.YOURJOBS) in nodes.carried
    assert consumer.conn.replies[0][0][2] == b"late"
    assert fed.push_pending == set()


def test_imported_jobs_are_not_pushed_on():
    nodes = Nodes(3)
    a, b, c = nodes[0], nodes[1], nodes[2]
    # c asked b for jobs and got none: b remembers c's interest.
    c.run(c.new_client(), [b"GETJOB", b"FROM", b"q"])
    nodes.deliver(drop=lambda s, d, msg: d == nodes.id(0))
    assert b"q" in b.cluster.federation.interest
    c.node.client_closed(next(iter(c.node.clients.values())))
    # Jobs that b imports from a (for its own consumer) stay with that consumer.
    a.call("ADDJOB", "q", "x", 0, "REPLICATE", 1)
    consumer = b.new_client()
    b.run(consumer, [b"GETJOB", b"FROM", b"q"])
    nodes.deliver()
    assert consumer.conn.replies[0][0][2] == b"x"
    assert b.cluster.federation.push_pending == set() and not b.cluster.federation.importing


def test_pause_bcast_reaches_every_node():
    nodes = Nodes(3)
    assert nodes[0].call("PAUSE", "q", "in", "bcast") == "in"
    nodes.deliver()
    assert [n.call("PAUSE", "q", "state") for n in nodes.nodes] == ["in"] * 3
