"""cluster/replication.py: Replication owns the ADDJOBs waiting for their
copies (pending) and, per client, the order their replies leave in
(waiting_adds); REPLJOB, GOTJOB and ENQUEUE are its messages. On three
in-process nodes (tests/unit/inprocess_cluster.py)."""

from __future__ import annotations

from broker.job import ACTIVE, QUEUED, WAIT_REPL
from broker.node import BLOCKED
from cluster.replication import NOREPL_TIMEOUT, PendingAdd
from protocol import bus as B
from protocol.resp import Status
from tests.unit.inprocess_cluster import Nodes


def test_a_sync_addjob_waits_for_its_copies_then_answers_the_id():
    nodes = Nodes(3)
    a = nodes[0]
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
    assert client.conn.replies == []                        # BLOCKED
    (p,) = a.cluster.replication.pending.values()
    assert isinstance(p, PendingAdd) and p.client is client and p.job.state == WAIT_REPL
    assert a.cluster.replication.waiting_adds[client] == [p, p]
    nodes.deliver()                                         # REPLJOB out, GOTJOB back
    (jid,) = client.conn.replies
    assert isinstance(jid, Status) and jid.encode() == p.job.id
    assert not a.cluster.replication.pending and not a.cluster.replication.waiting_adds
    assert p.job.state == QUEUED
    for n in nodes.nodes[1:]:
        assert n.node.get_job(p.job.id).state == ACTIVE     # copies, queued by their timers
    assert {t for _, _, t in nodes.carried} == {B.REPLJOB, B.GOTJOB}


def test_a_clients_adds_are_answered_in_order_whatever_order_their_copies_come():
    nodes = Nodes(3)
    a = nodes[0]
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"first", b"0", b"REPLICATE", b"3"])
    a.run(client, [b"ADDJOB", b"q", b"second", b"0", b"REPLICATE", b"3"])
    first, second = a.cluster.replication.pending.values()
    # The first add's REPLJOBs are lost: only the second is confirmed...
    nodes.deliver(drop=lambda s, d, msg: msg.type == B.BATCH or msg.payload[0] == first.job.id)
    assert second.job.id not in a.cluster.replication.pending
    assert client.conn.replies == []                        # ...and waits for the first
    nodes.advance(60)                                       # the first widens: REPLJOB again
    assert client.conn.replies == [first.job.id.decode(), second.job.id.decode()]


def test_an_add_without_its_copies_in_time_fails_and_its_copies_go():
    nodes = Nodes(3)
    a = nodes[0]
    client = a.new_client()
    lost = nodes.id(2)
    a.run(client, [b"ADDJOB", b"q", b"body", b"100", b"REPLICATE", b"3"])
    (p,) = a.cluster.replication.pending.values()
    cut = lambda s, d, msg: lost in (s, d)                  # noqa: E731
    nodes.deliver(cut)                                      # one holder never answers
    assert nodes[1].node.get_job(p.job.id) is not None
    nodes.advance(200, drop=cut)
    assert client.conn.replies == [NOREPL_TIMEOUT]
    assert not a.cluster.replication.pending
    assert a.node.get_job(p.job.id) is None
    assert nodes[1].node.get_job(p.job.id) is None          # DELJOB reached it
    assert p.job.id in nodes[1].cluster.tombstones.ids


def test_a_closed_client_is_answered_no_more():
    nodes = Nodes(3)
    a = nodes[0]
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
    a.node.client_closed(client)
    assert not a.cluster.replication.waiting_adds
    (p,) = a.cluster.replication.pending.values()
    assert p.client is None
    nodes.deliver()
    assert client.conn.replies == [] and not a.cluster.replication.pending
    assert p.job.state == QUEUED                            # the job lives all the same


def test_a_retry_with_the_key_of_a_pending_add_gets_its_outcome():
    nodes = Nodes(3)
    a = nodes[0]
    c1, c2 = a.new_client(), a.new_client()
    add = [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3", b"IDEMPOTENCY", b"k1"]
    a.run(c1, add)
    a.run(c2, add)
    (p,) = a.cluster.replication.pending.values()
    assert len(p.followers) == 1 and a.node.job_count == 1
    nodes.deliver()
    assert c1.conn.replies == c2.conn.replies == [p.job.id.decode()]
    assert a.cluster.replication.known_add(c2, p.job.id) == Status(p.job.id.decode())


def test_an_external_add_has_one_holder_queue_it():
    nodes = Nodes(3)
    a = nodes[0]
    # Over 75% of maxmemory (memory level 1): no copy kept here.
    a.node.maxmemory, a.node.memory_95, a.node.memory_75 = 10**12, 10**12, 0
    assert a.node.memory_level() == 1
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"2"])
    (p,) = a.cluster.replication.pending.values()
    assert p.external and a.node.get_job(p.job.id) is None
    nodes.deliver()
    assert client.conn.replies == [p.job.id.decode()]
    queued = [n for n in nodes.nodes[1:] if n.node.get_job(p.job.id).state == QUEUED]
    assert len(queued) == 1                                 # the one told ENQUEUE
    assert (nodes.id(0), queued[0].cluster.m.node_id, B.ENQUEUE) in nodes.carried


def test_an_async_add_answers_at_once_and_keeps_replicating():
    nodes = Nodes(3)
    a = nodes[0]
    reply = a.call("ADDJOB", "q", "body", 0, "REPLICATE", 3, "ASYNC")
    assert reply is not BLOCKED and reply.startswith("D-")
    p = a.cluster.replication.pending[reply.encode()]
    assert p.is_async and p.client is None
    nodes.deliver()
    assert not a.cluster.replication.pending
    assert all(n.node.get_job(reply.encode()) is not None for n in nodes.nodes)
