"""cluster/tombstones.py: the ids of replicated jobs deleted here, kept
30 s so that a message about them still on its way cannot bring them back."""

from __future__ import annotations

from cluster.replication import wire_fields
from cluster.tombstones import TOMBSTONE_MS, Tombstones, forget_expired, remember
from protocol import bus as B
from tests.unit.inprocess_cluster import Nodes


def test_remembered_ids_expire_in_the_order_they_came():
    ids: dict[bytes, int] = {}
    remember(ids, b"a", 100)
    remember(ids, b"b", 50)         # inserted later: expires after a, whatever its time
    remember(ids, b"c", 300)
    remember(ids, b"a", 400)        # again: moves to the end
    forget_expired(ids, 200)
    assert list(ids) == [b"c", b"a"]


def test_a_job_deleted_acked_is_remembered_as_such():
    t = Tombstones()
    nodes = Nodes(1)
    jid = nodes[0].call("ADDJOB", "q", "x", 0).encode()
    job = nodes[0].node.get_job(jid)
    t.job_deleted(job, 1000)
    assert t.ids == {jid: 1000 + TOMBSTONE_MS} and t.acked == {}
    nodes[0].call("ACKJOB", jid)
    t.job_deleted(job, 2000)
    assert t.acked == {jid: 2000 + TOMBSTONE_MS}
    t.tick(2000 + TOMBSTONE_MS)
    assert t.ids == {} and t.acked == {}


def test_a_late_repljob_does_not_bring_a_collected_job_back():
    nodes = Nodes(2)
    a, b = nodes[0], nodes[1]
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"2"])
    nodes.deliver()
    jid = client.conn.replies[0].encode()
    late = wire_fields(a.node.get_job(jid), nodes.clock.now)
    b.call("ACKJOB", jid)
    nodes.deliver()                                     # collected on both
    assert a.node.get_job(jid) is None and b.node.get_job(jid) is None
    nodes.carried.clear()
    b.cluster.replication.on_repljob(nodes.id(0), late, nodes.clock.now)
    assert b.node.get_job(jid) is None                  # dropped: no copy, no GOTJOB
    b.driver.after_input()
    nodes.deliver()
    assert B.GOTJOB not in {t for _, _, t in nodes.carried}
    nodes.advance(TOMBSTONE_MS + 100, step=1000)        # the tombstone expires
    assert jid not in b.cluster.tombstones.ids
