"""Job-layer bus messages are batched per destination between two drains
(cluster/outbox.py): one Send (a BATCH message when there are several) per peer,
unpacked in order on the other side, counted as separate messages."""

import random

from broker.commands import COMMANDS
from broker.config import Config
from broker.job import random_node_id
from broker.node import BLOCKED, Node
from cluster.cluster import Cluster
from cluster.replication import wire_fields
from cluster.membership import Membership
from cluster.outputs import DropLink, Link, Send
from protocol import bus as B
from protocol.bus import FrameReader
from protocol.resp import Status
from tests.unit.inprocess_cluster import know_each_other, wire

NOW = 1_000_000
J1, J2, J3 = (b"D-00000000-%024d-05a1" % i for i in (1, 2, 3))     # job ids' shape


def make_cluster(n: int = 3):
    """n broker nodes that know each other (no handshake needed)."""
    clock = [NOW]
    nodes = []
    for i in range(n):
        rng = random.Random(i)
        m = Membership(random_node_id(rng), "10.0.0.%d" % (i + 1), 7711, 17711, rng=rng,
                       now=NOW)
        node = Node(Config(), lambda: clock[0], rng, node_id=m.node_id, commands=COMMANDS,
                    strict=True)
        nodes.append(Cluster(node, m))
    know_each_other([c.m for c in nodes], NOW)
    return nodes


def sends(outputs):
    return [o for o in outputs if isinstance(o, Send)]


def test_one_send_per_destination_in_order():
    a, b, c = make_cluster()
    bid, cid = b.m.node_id, c.m.node_id
    a.outbox.send(bid, B.GOTJOB, b"j1")
    a.outbox.send_many([bid, cid, a.m.node_id], B.DELJOB, b"j2")
    a.outbox.send(bid, B.QUEUED, b"j3")
    out = sends(a.outbox.drain())
    assert [s.node_id for s in out] == [bid, cid]
    to_b, to_c = out
    assert to_b.msg.type == B.BATCH
    assert to_b.msg.payload == [B.GOTJOB, b"j1", B.DELJOB, b"j2", B.QUEUED, b"j3"]
    assert (to_b.ip, to_b.bus_port) == ("10.0.0.2", 17711)
    # A single message goes as itself, not as a batch of one.
    assert to_c.msg.type == B.DELJOB and to_c.msg.payload == b"j2"
    assert a.m.stats_sent == 4
    assert a.outbox.drain() == [] and not a.outbox.has_output


def test_nothing_for_a_node_deleted_before_the_drain():
    a, b, c = make_cluster()
    a.outbox.send(b.m.node_id, B.GOTJOB, b"j1")
    a.outbox.send(c.m.node_id, B.GOTJOB, b"j1")
    a.forget(b.m.node_id, NOW)
    out = a.outbox.drain()
    assert DropLink(b.m.node_id, True) in out
    assert [s.node_id for s in sends(out)] == [c.m.node_id]


def test_a_batch_is_handled_message_by_message():
    """A copy made and deleted in one batch: REPLJOB handled before DELJOB (the
    other order would leave the copy), each counted as a message."""
    a, b, _ = make_cluster()
    client = a.broker.new_client()
    r = a.broker.handle_command(client, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"2",
                                         b"ASYNC"])
    jid = r.encode()
    a.outbox.drain()
    job = a.broker.get_job(jid)
    a.outbox.send(b.m.node_id, B.REPLJOB, wire_fields(job, NOW))
    a.outbox.send(b.m.node_id, B.DELJOB, jid)
    (s,) = sends(a.outbox.drain())
    before = b.m.stats_received
    b.handle_message(Link("10.0.0.1", "10.0.0.2"), wire(s.msg), NOW)
    assert b.broker.get_job(jid) is None
    assert jid in b.tombstones.ids
    (reply,) = sends(b.outbox.drain())
    assert (reply.msg.type, reply.msg.payload) == (B.GOTJOB, jid)
    assert b.m.stats_received == before + 2


def test_replicated_addjobs_travel_as_one_frame_each_way():
    nodes = make_cluster()
    a = nodes[0]
    by_id = {c.m.node_id: c for c in nodes}
    clients = [a.broker.new_client("c%d" % i) for i in range(5)]
    for cl in clients:
        r = a.broker.handle_command(cl, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
        assert r is BLOCKED
    out = sends(a.outbox.drain())
    assert len(out) == 2 and all(s.msg.type == B.BATCH for s in out)
    assert all(len(s.msg.payload) == 10 for s in out)
    back = []
    for s in out:
        peer = by_id[s.node_id]
        peer.handle_message(Link("10.0.0.1", peer.m.myself.ip), wire(s.msg), NOW)
        assert peer.broker.job_count == 5
        (reply,) = sends(peer.outbox.drain())
        assert reply.node_id == a.m.node_id
        assert reply.msg.type == B.BATCH and reply.msg.payload[0::2] == [B.GOTJOB] * 5
        back.append(reply)
    for s in back:
        a.handle_message(Link("10.0.0.2", "10.0.0.1"), wire(s.msg), NOW)
    assert [c for c, _ in a.broker.outbox] == clients
    assert all(isinstance(r, Status) and r.startswith("D-") for _, r in a.broker.outbox)
    assert not a.replication.pending


def test_a_batch_too_big_for_one_frame_goes_message_by_message():
    """The output driver's fallback (server/driver.py): a BATCH over the bus's
    frame size limit is sent as one frame per message rather than dropped."""
    import server.driver as driver_mod

    sent = []

    class FakeBus:
        max_frame_size = 140        # one GOTJOB or DELJOB fits, both do not

        def send(self, node_id, ip, bus_port, frame):
            sent.append((node_id, frame))

    a, b, _ = make_cluster()
    driver = driver_mod.OutputDriver(a.broker, a, bus=FakeBus())
    a.outbox.send(b.m.node_id, B.GOTJOB, J1)
    a.outbox.send(b.m.node_id, B.DELJOB, J2)
    driver.flush()
    got = []
    for node_id, frame in sent:
        r = FrameReader()
        r.feed(frame)
        got += [(node_id, m.type, m.payload) for m in r]
    assert got == [(b.m.node_id, B.GOTJOB, J1), (b.m.node_id, B.DELJOB, J2)]


def test_a_malformed_message_drops_only_itself():
    """A payload without its type's shape (a buggy peer, another version) is
    rejected where the message is decoded (protocol/bus.py), counted and
    dropped; the rest of the batch is still handled."""
    a, b, _ = make_cluster()
    c = b.broker.new_client()
    jid = b.broker.handle_command(c, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"1"])
    jid = jid.encode()
    a.outbox.send(b.m.node_id, B.REPLJOB, 5)                 # not a job at all
    a.outbox.send(b.m.node_id, B.SETACK, [b"too-short"])     # missing may-have
    a.outbox.send(b.m.node_id, B.DELJOB, jid)                # valid: deletes the job
    (s,) = sends(a.outbox.drain())
    msg = wire(s.msg)
    assert msg.malformed == 2 and msg.payload == [B.DELJOB, jid]
    b.handle_message(Link("10.0.0.1", "10.0.0.2"), msg, NOW)
    assert b.broker.get_job(jid) is None
    assert b.broker.stats["malformed_bus_messages"] == 2
    assert b.broker.stats["internal_errors"] == 0


def test_a_malformed_single_message_keeps_its_header():
    a, b, _ = make_cluster()
    a.outbox.send(b.m.node_id, B.GOTACK, [b"x" * 40])          # not an id, no known flag
    (s,) = sends(a.outbox.drain())
    msg = wire(s.msg)
    assert msg.type == B.GOTACK and msg.malformed == 1 and msg.payload is None
    b.handle_message(Link("10.0.0.1", "10.0.0.2"), msg, NOW)
    assert b.broker.stats["malformed_bus_messages"] == 1


def test_a_bug_in_a_handler_is_an_internal_error_not_a_malformed_message():
    """Strict (tests, the simulator): our exception propagates. In production:
    logged, counted in INFO internal_errors, and the node goes on with the next
    message of the batch."""
    import pytest

    a, b, _ = make_cluster()
    c = b.broker.new_client()
    jid = b.broker.handle_command(c, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"1"]).encode()
    # Our bug, made on purpose: a pending ADDJOB that is not one (the GOTJOB
    # handler fails on it, with AttributeError in the pure build, TypeError in
    # the compiled one).
    b.replication.pending[J1] = object()
    a.outbox.send(b.m.node_id, B.GOTJOB, J1)
    a.outbox.send(b.m.node_id, B.DELJOB, jid)
    (s,) = sends(a.outbox.drain())
    with pytest.raises((AttributeError, TypeError)):
        b.handle_message(Link("10.0.0.1", "10.0.0.2"), wire(s.msg), NOW)
    b.broker.strict = False
    b.handle_message(Link("10.0.0.1", "10.0.0.2"), wire(s.msg), NOW)
    assert b.broker.stats["internal_errors"] == 1
    assert b.broker.stats["malformed_bus_messages"] == 0
    assert b.broker.get_job(jid) is None                  # the DELJOB after it still ran
    info = b.broker.handle_command(c, [b"INFO", b"stats"])      # verbatim text
    assert "internal_errors:1\r\n" in info
