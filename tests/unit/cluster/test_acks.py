"""cluster/acks.py: Acks collects acked jobs across their holders (SETACK,
GOTACK, DELJOB) and owns the dummy acks (an ACKJOB of an id never held here,
spread until a holder or every node answers). On three in-process nodes."""

from __future__ import annotations

from broker.job import ACKED, FLAG_DUMMY_ACK
from protocol import bus as B
from tests.unit.inprocess_cluster import Nodes


def replicated_job(nodes: Nodes) -> bytes:
    """A job of node 0 with a copy on every node."""
    client = nodes[0].new_client()
    nodes[0].run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
    nodes.deliver()
    (reply,) = client.conn.replies
    jid = reply.encode()
    assert all(n.node.get_job(jid) is not None for n in nodes.nodes)
    return jid


def test_an_ack_is_collected_on_every_holder():
    nodes = Nodes(3)
    jid = replicated_job(nodes)
    nodes.carried.clear()
    assert nodes[1].call("ACKJOB", jid) == 1               # acked on a replica
    nodes.deliver()
    types = [t for _, _, t in nodes.carried]
    assert types.count(B.SETACK) == 2 and types.count(B.GOTACK) == 2
    assert types.count(B.DELJOB) == 2
    for n in nodes.nodes:
        assert n.node.get_job(jid) is None
        assert jid in n.cluster.tombstones.ids              # a late REPLJOB cannot revive it
    assert jid in nodes[1].cluster.tombstones.acked


def test_an_ack_given_in_a_partition_is_collected_after_it_heals():
    nodes = Nodes(3)
    jid = replicated_job(nodes)
    b = nodes.id(1)
    cut = lambda s, d, msg: b in (s, d)                     # noqa: E731
    nodes[0].call("ACKJOB", jid)
    nodes.deliver(cut)
    assert nodes[0].node.get_job(jid).state == ACKED       # waits for the cut holder
    assert nodes[1].node.get_job(jid).state != ACKED
    nodes.advance(3000)                                     # healed: the GC tries again
    assert all(n.node.get_job(jid) is None for n in nodes.nodes)


def test_an_ack_of_an_unknown_id_is_a_dummy_ack_until_every_node_says_unknown():
    nodes = Nodes(3)
    jid = b"D-00000000-%024d-05a1" % 7                      # at-least-once, held nowhere
    a = nodes[0]
    assert a.call("ACKJOB", jid) == 0
    job = a.node.get_job(jid)
    assert job.state == ACKED and job.flags & FLAG_DUMMY_ACK
    assert a.cluster.acks.dummy_acks[jid] == set()
    nodes.deliver(drop=lambda s, d, msg: s == nodes.id(2))  # one answer lost
    assert a.cluster.acks.dummy_acks[jid] == {nodes.id(1)}
    nodes.advance(3000)                                     # SETACK again; both answered
    assert a.node.get_job(jid) is None and jid not in a.cluster.acks.dummy_acks


def test_a_dummy_ack_meets_a_holder_which_collects():
    nodes = Nodes(3)
    jid = replicated_job(nodes)
    # A node that never heard of the job (forgotten by DELJOB there) acks it.
    c = nodes[2]
    c.call("DELJOB", jid)
    assert c.call("ACKJOB", jid) == 0
    assert c.cluster.acks.dummy_acks == {jid: set()}
    nodes.deliver()
    assert all(n.node.get_job(jid) is None for n in nodes.nodes)
    assert c.cluster.acks.dummy_acks == {}


def test_a_deljob_from_the_originator_deletes_an_unacked_copy():
    nodes = Nodes(3)
    jid = replicated_job(nodes)
    nodes[0].call("FASTACK", jid)                          # DELJOB to the holders
    nodes.deliver()
    assert all(n.node.get_job(jid) is None for n in nodes.nodes)
    assert all(jid in n.cluster.tombstones.ids for n in nodes.nodes[1:])
