"""Bus wire format (protocol/bus.py) and the asyncio bus shell (server/bus.py)."""

import asyncio
import random
import struct
import time

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from broker.config import Config
from broker.job import random_node_id
from server.bus import ClusterBus
from server.sim.inprocess import InProcessNode
from cluster.membership import Membership
from protocol import bus
from protocol.bus import (
    BusMessage, BusProtocolError, FrameReader, GossipEntry, decode_body, encode_body,
    encode_frame,
)
from tests.harness import WAIT_TIMEOUT

A = "a" * 40
B = "0123456789abcdef0123456789abcdef01234567"

ALL_TYPES = [bus.PING, bus.PONG, bus.MEET, bus.FAIL, bus.REPLJOB, bus.YOURJOBS,
             bus.GOTJOB, bus.ENQUEUE, bus.NEEDJOBS, bus.SETACK, bus.GOTACK, bus.DELJOB,
             bus.WORKING, bus.WILLQUEUE, bus.QUEUED, bus.PAUSE]


def sample(mtype=bus.PING, payload=None, gossip=None):
    return BusMessage(mtype, A, "10.0.0.1", 7711, 17711, bus.FLAG_LEAVING,
                      gossip if gossip is not None else
                      [GossipEntry(B, "10.0.0.2", 7712, 17712, bus.FLAG_PFAIL, 120, -1)],
                      payload)


def frame_of(obj) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def read_all(data: bytes, max_frame_size=bus.DEFAULT_MAX_FRAME_SIZE):
    r = FrameReader(max_frame_size)
    r.feed(data)
    return list(r)


def test_type_constants_are_distinct_and_named():
    types = ALL_TYPES + [bus.BATCH]
    assert len(set(types)) == len(types)
    assert set(bus.TYPE_NAMES) == set(types)


JID = b"D-00000000-000000000000000000000001-05a1"
JOB = [JID, b"q", b"\x00body", 1, 0, 2, 10, 20, 0, 5, 0, 0, [A], 0]


def test_batch_round_trip_and_unbatch():
    items = [bus.REPLJOB, JOB, bus.GOTJOB, JID, bus.DELJOB, JID]
    msg = sample(bus.BATCH, items, gossip=[])
    (got,) = read_all(encode_frame(msg))
    assert got == msg
    parts = bus.unbatch(got)
    assert [(m.type, m.payload) for m in parts] == [
        (bus.REPLJOB, JOB), (bus.GOTJOB, JID), (bus.DELJOB, JID)]
    assert all(m.sender == A and m.port == 7711 and m.flags == bus.FLAG_LEAVING
               for m in parts)
    assert bus.unbatch(sample(bus.GOTJOB, JID)) == [sample(bus.GOTJOB, JID)]


@pytest.mark.parametrize("mtype, payload", [
    (bus.REPLJOB, [JID, b"q"]), (bus.REPLJOB, JOB[:12] + [["not-a-node-id"], 0]),
    # State, flags and REPLICATE beyond the compiled Job's narrow C fields.
    (bus.REPLJOB, JOB[:3] + [256] + JOB[4:]), (bus.REPLJOB, JOB[:4] + [256] + JOB[5:]),
    (bus.REPLJOB, JOB[:5] + [65536] + JOB[6:]), (bus.REPLJOB, JOB[:5] + [-1] + JOB[6:]),
    (bus.GOTJOB, b"short"), (bus.GOTJOB, "D-" + "0" * 38), (bus.DELJOB, None),
    (bus.QUEUED, [JID, 1]), (bus.SETACK, [JID, "1"]), (bus.GOTACK, JID),
    (bus.NEEDJOBS, ["q", 1]), (bus.YOURJOBS, [JOB, 5]), (bus.PAUSE, [b"q"]),
])
def test_a_job_payload_without_its_shape_is_dropped_and_counted(mtype, payload):
    """The peer's fault, found where the message is decoded: that message only
    is dropped (the link stays, a batch keeps its other entries)."""
    (got,) = read_all(encode_frame(sample(mtype, payload, gossip=[])))
    assert (got.type, got.malformed, got.payload) == (mtype, 1, None)
    batch = [bus.GOTJOB, JID, mtype, payload, bus.DELJOB, JID]
    (got,) = read_all(encode_frame(sample(bus.BATCH, batch, gossip=[])))
    assert got.malformed == 1 and got.payload == [bus.GOTJOB, JID, bus.DELJOB, JID]


@pytest.mark.parametrize("payload", [
    None, b"x", {"a": 1}, [bus.GOTJOB], [bus.GOTJOB, b"id", bus.DELJOB],
    ["gotjob", b"id"], [bus.PING, None], [bus.BATCH, [bus.GOTJOB, b"id"]],
])
def test_malformed_batch_is_a_protocol_error(payload):
    with pytest.raises(BusProtocolError):
        read_all(encode_frame(sample(bus.BATCH, payload, gossip=[])))


MEMBERSHIP_TYPES = [bus.PING, bus.PONG, bus.MEET, bus.FAIL]


def valid_payload(mtype, i=0):
    """A payload of the shape protocol/bus.py checks for job-layer types."""
    return {bus.REPLJOB: JOB, bus.YOURJOBS: [JOB, JOB], bus.GOTJOB: JID,
            bus.ENQUEUE: JID, bus.NEEDJOBS: [b"q", i, 25], bus.SETACK: [JID, i],
            bus.GOTACK: [JID, 1], bus.DELJOB: JID, bus.WORKING: JID,
            bus.WILLQUEUE: JID, bus.QUEUED: [JID, i, 2], bus.PAUSE: [b"q", 3]}.get(
        mtype, {"i": i})


@pytest.mark.parametrize("mtype", MEMBERSHIP_TYPES)
def test_round_trip_any_payload(mtype):
    payload = {"id": "D-aaaaaaaa-" + "x" * 24 + "-0001", "body": b"\x00\xffbinary",
               "nodes": [A, B], "n": 3, "flag": True, "none": None}
    msg = sample(mtype, payload)
    (got,) = read_all(encode_frame(msg))
    assert got == msg
    assert isinstance(got.gossip[0], GossipEntry)
    assert got.payload["body"] == b"\x00\xffbinary"      # bin stays bytes
    assert isinstance(got.payload["id"], str)            # str stays str


@pytest.mark.parametrize("mtype", ALL_TYPES)
def test_round_trip_every_type(mtype):
    msg = sample(mtype, valid_payload(mtype))
    (got,) = read_all(encode_frame(msg))
    assert got == msg and got.malformed == 0


def test_frame_layout_is_length_prefix_plus_msgpack_array():
    msg = sample(bus.FAIL, B, gossip=[])
    frame = encode_frame(msg)
    (n,) = struct.unpack(">I", frame[:4])
    assert n == len(frame) - 4
    assert msgpack.unpackb(frame[4:], raw=False) == [
        bus.PROTOCOL_VERSION, bus.FAIL, A, "10.0.0.1", 7711, 17711, bus.FLAG_LEAVING, [], B]


def test_partial_feeds_byte_by_byte():
    msgs = [sample(t, valid_payload(t, i)) for i, t in enumerate(ALL_TYPES)]
    data = b"".join(encode_frame(m) for m in msgs)
    r = FrameReader()
    got = []
    for i in range(len(data)):
        r.feed(data[i:i + 1])
        got.extend(r)
    assert got == msgs
    assert r.buffered == 0


def test_random_chunking_and_many_frames_in_one_feed():
    rng = random.Random(7)
    msgs = [sample(bus.REPLJOB, JOB[:2] + [bytes(rng.randrange(256)
                                                   for _ in range(rng.randrange(3000)))] + JOB[3:])
            for _ in range(50)]
    data = b"".join(encode_frame(m) for m in msgs)
    assert read_all(data) == msgs
    assert read_in_pieces(data, rng, 5000) == msgs


def read_in_pieces(data: bytes, rng: random.Random, max_piece: int) -> list:
    """``data`` fed to one reader in random pieces, the messages read after each."""
    r = FrameReader()
    got, pos = [], 0
    while pos < len(data):
        piece = rng.randrange(1, max_piece)
        r.feed(data[pos:pos + piece])
        pos += piece
        while (m := r.next_message()) is not None:
            got.append(m)
    assert r.buffered == 0
    return got


def test_incomplete_frame_yields_nothing_yet():
    frame = encode_frame(sample())
    r = FrameReader()
    r.feed(frame[:-1])
    assert list(r) == []
    r.feed(frame[-1:])
    assert len(list(r)) == 1


def test_frames_small_and_large_in_one_stream():
    """Small frames are decoded from a copy of their body, large ones (over
    64 KiB) from a view of the buffer: both read the same, however split."""
    rng = random.Random(3)
    msgs = [sample(bus.REPLJOB, JOB[:2] + [rng.randbytes(size)] + JOB[3:])
            for size in (10, 200_000, 65_000, 70_000, 0, 1_000_000, 5)]
    data = b"".join(encode_frame(m) for m in msgs)
    assert read_all(data) == msgs
    assert read_in_pieces(data, rng, 300_000) == msgs


def test_oversize_length_is_rejected_from_the_prefix_alone():
    r = FrameReader(max_frame_size=1000)
    r.feed(struct.pack(">I", 1001))          # no body needed to refuse it
    with pytest.raises(BusProtocolError, match="length"):
        list(r)
    with pytest.raises(BusProtocolError):     # the reader stays broken
        r.feed(b"more")


def test_zero_length_frame_is_rejected():
    with pytest.raises(BusProtocolError):
        read_all(b"\x00\x00\x00\x00")


def test_encode_refuses_oversize_messages():
    with pytest.raises(BusProtocolError):
        encode_frame(sample(bus.REPLJOB, b"x" * 2000), max_frame_size=1000)


@pytest.mark.parametrize("body", [
    b"\xc1",                                   # never-used msgpack byte
    b"\x92\x01",                               # truncated array
    msgpack.packb([1, 2, 3]) + b"\x00",        # trailing bytes
])
def test_garbage_body_raises_protocol_error(body):
    with pytest.raises(BusProtocolError):
        read_all(struct.pack(">I", len(body)) + body)


GOOD = [bus.PROTOCOL_VERSION, bus.PING, A, "1.2.3.4", 1, 2, 0, [], None]


@pytest.mark.parametrize("index,value", [
    (0, 99),                  # unknown protocol version
    (1, "ping"),              # type not an int
    (2, "A" * 40),            # uppercase id
    (2, "a" * 39),            # short id
    (3, 5),                   # ip not a string
    (4, 70000),               # port out of range
    (5, -1),                  # bus port out of range
    (6, "x"),                 # flags
    (7, {}),                  # gossip not an array
    (7, [[A, "ip", 1, 2, 0, 0]]),           # gossip entry too short
    (7, [["zz", "ip", 1, 2, 0, 0, 0]]),     # gossip id invalid
])
def test_malformed_header_raises_protocol_error(index, value):
    obj = list(GOOD)
    obj[index] = value
    with pytest.raises(BusProtocolError):
        read_all(frame_of(obj))


def test_not_an_array_raises():
    with pytest.raises(BusProtocolError):
        read_all(frame_of({"type": 1}))
    with pytest.raises(BusProtocolError):
        read_all(frame_of(GOOD[:-1]))


def test_valid_frame_after_garbage_is_not_reached():
    r = FrameReader()
    r.feed(frame_of([1]) + encode_frame(sample()))
    with pytest.raises(BusProtocolError):
        list(r)
    with pytest.raises(BusProtocolError):
        next(r)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_ever_raise_protocol_error(data):
    r = FrameReader(max_frame_size=4096)
    try:
        r.feed(data)
        list(r)
    except BusProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
                    | st.text(max_size=20) | st.binary(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20))
def test_any_msgpack_payload_round_trips(payload):
    msg = sample(bus.PING, payload)
    assert decode_body(encode_body(msg)).payload == payload
    # A job-layer type: kept when it has the type's shape, else dropped, never
    # an exception for the handler to meet.
    got = decode_body(encode_body(sample(bus.REPLJOB, payload)))
    assert (got.payload, got.malformed) in ((payload, 0), (None, 1))


# -- the asyncio shell ---------------------------------------------------------------

def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class BusDriver:
    """A whole node (server/sim/inprocess.py: Node + Cluster + the output driver) on a
    real ClusterBus, ticking in the event loop: the membership over real sockets."""

    def __init__(self, membership, *, host="127.0.0.1", port=0, tick_interval=0.1,
                 **bus_options) -> None:
        self.membership = membership
        self.tick_interval = tick_interval
        self.bus = ClusterBus(self._on_message, host=host, port=port,
                              on_link_up=self._on_link_up, on_link_down=self._on_link_down,
                              **bus_options)
        self.node = None
        self._ticker = None

    async def start(self) -> None:
        await self.bus.start()
        m = self.membership
        if not m.myself.bus_port:
            m.set_address(m.myself.ip, m.myself.port, self.bus.port)
        self.node = InProcessNode(Config(cluster_node_timeout=m.node_timeout),
                                  clock=wall_ms, membership=m, bus=self.bus)
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
        await self.bus.close()

    @property
    def saved(self):
        return self.node.saved_nodes_conf

    async def _tick_loop(self) -> None:
        while True:
            self.node.tick()
            await asyncio.sleep(self.tick_interval)

    def meet(self, ip: str, bus_port: int) -> None:
        self.node.cluster.meet(ip, bus_port, wall_ms())
        self.node.driver.after_input()

    def _on_message(self, link, msg) -> None:
        if self.node is not None:
            self.node.bus_message(link, msg)

    def _on_link_up(self, node_id: str) -> None:
        self.node.link_up(node_id)

    def _on_link_down(self, node_id: str) -> None:
        self.node.link_down(node_id)


async def wait_for(predicate, timeout=WAIT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_three_bus_endpoints_meet_chain_and_learn_each_other():
    drivers = []
    try:
        for i in range(3):
            rng = random.Random(i)
            # bus_port 0: the driver listens on a free port and announces it.
            m = Membership(random_node_id(rng), "127.0.0.1", 7711 + i, 0,
                           node_timeout=2000, rng=rng)
            d = BusDriver(m, host="127.0.0.1", port=0)
            await d.start()
            drivers.append(d)
        # MEET chain: 1 meets 0, 2 meets 1; gossip must tell 0 and 2 about each other.
        drivers[1].meet("127.0.0.1", drivers[0].bus.port)
        drivers[2].meet("127.0.0.1", drivers[1].bus.port)
        ids = {d.membership.node_id for d in drivers}

        def joined():
            for d in drivers:
                m = d.membership
                if set(m.known_ids()) != ids or len(m.nodes) != 3:
                    return False
                if any(not n.link or n.failing for n in m.nodes.values() if n is not m.myself):
                    return False
            return True

        assert await wait_for(joined), [d.membership.nodes_lines() for d in drivers]
        for d in drivers:
            assert [p for *_, p in d.membership.hello_entries()] == [1, 1, 1]
            assert d.membership.cluster_info()["cluster_reachable_nodes"] == 2
            ports = {d2.bus.port for d2 in drivers}
            assert {n.bus_port for n in d.membership.nodes.values()} == ports
    finally:
        for d in drivers:
            await d.close()


async def test_garbage_on_the_bus_closes_only_that_link():
    got = []
    b = ClusterBus(lambda link, msg: got.append(msg), host="127.0.0.1", port=0)
    await b.start()
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", b.port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", b.port)
        w1.write(b"\x00\x00\x00\x03abc")
        w2.write(encode_frame(sample()) + encode_frame(sample(bus.PONG)))
        await w1.drain()
        await w2.drain()
        assert await asyncio.wait_for(r1.read(), 5) == b""        # closed by the bus
        assert await wait_for(lambda: len(got) == 2)
        w2.write(encode_frame(sample(bus.FAIL, B)))                # still open
        assert await wait_for(lambda: len(got) == 3)
        assert [m.type for m in got] == [bus.PING, bus.PONG, bus.FAIL]
        w1.close()
        w2.close()
    finally:
        await b.close()


async def test_writes_are_coalesced_per_loop_turn():
    got = []
    server = ClusterBus(lambda link, msg: got.append(msg), host="127.0.0.1", port=0)
    client = ClusterBus(lambda link, msg: None, host="127.0.0.1", port=0)
    await server.start()
    await client.start()
    try:
        client.send(A, "127.0.0.1", server.port, sample(payload=-1))
        assert await wait_for(lambda: client.is_connected(A))
        conn = client._peers[A].conn
        writes = []
        real_write = conn.transport.write
        conn.transport.write = lambda data: (writes.append(len(data)), real_write(data))
        for i in range(100):
            client.send(A, "127.0.0.1", server.port, sample(payload=i))
        assert await wait_for(lambda: len(got) == 101)
        assert len(writes) == 1
        assert [m.payload for m in got] == list(range(-1, 100))
    finally:
        await client.close()
        await server.close()


async def test_bus_detects_a_dead_node_and_clears_fail_when_it_restarts():
    # Real sockets end to end: links fail, PFAIL -> FAIL by majority, the node
    # restarts from its nodes.conf on the same port, reconnects, FAIL is cleared.
    timeout = 600
    drivers_by_index = {}
    drivers = []

    async def start(i, conf=None, port=0):
        rng = random.Random(100 + i)
        if conf is None:
            m = Membership(random_node_id(rng), "127.0.0.1", 7711 + i, port,
                           node_timeout=timeout, rng=rng)
        else:
            m = Membership.from_nodes_conf(conf, ip="127.0.0.1", port=7711 + i,
                                           bus_port=port, rng=rng, node_timeout=timeout)
        d = BusDriver(m, host="127.0.0.1", port=port, tick_interval=0.05,
                      backoff_min=0.05, backoff_max=0.2)
        await d.start()
        drivers_by_index[i] = d
        return d

    try:
        for i in range(3):
            drivers.append(await start(i))
        drivers[1].meet("127.0.0.1", drivers[0].bus.port)
        drivers[2].meet("127.0.0.1", drivers[0].bus.port)
        assert await wait_for(lambda: all(len(d.membership.known_ids()) == 3 for d in drivers))
        victim = drivers[2]
        vid, vport = victim.membership.node_id, victim.bus.port
        saved = victim.saved
        await victim.close()

        def failed():
            return all(d.membership.nodes[vid].flags & bus.FLAG_FAIL for d in drivers[:2])

        assert await wait_for(failed), [d.membership.nodes_lines() for d in drivers[:2]]
        for d in drivers[:2]:
            assert vid not in d.membership.reachable_ids()
            (line,) = [l for l in d.membership.nodes_lines() if l.startswith(vid)]
            assert " fail " in line and line.endswith(" disconnected")

        drivers[2] = await start(2, saved, port=vport)          # same id, no MEET
        assert drivers[2].membership.node_id == vid

        def healed():
            for d in drivers:
                m = d.membership
                if len(m.known_ids()) != 3:
                    return False
                if any(n.failing or not n.link for n in m.nodes.values() if n is not m.myself):
                    return False
            return True

        assert await wait_for(healed), [d.membership.nodes_lines() for d in drivers]
    finally:
        for d in drivers:
            await d.close()


def test_a_body_is_the_whole_list_packed_whatever_header_came_before():
    """encode_body packs a header once per message type and reuses its bytes
    while the sender's header stays the same: each body must still be the
    9-element list packed in one go, when the type, the sender's address or
    its flags change between two messages, and for messages with gossip."""
    def whole(m):
        return msgpack.packb([bus.PROTOCOL_VERSION, m.type, m.sender, m.ip, m.port,
                              m.bus_port, m.flags, list(m.gossip), m.payload],
                             use_bin_type=True)

    job = [b"D-aaaaaaaa-" + b"x" * 24 + b"-0001", b"q", b"body", 0, 0, 3, 10, 10, 0, 300,
           0, 0, [A, B], 0, 5]
    msgs = [
        BusMessage(bus.REPLJOB, A, "10.0.0.1", 7711, 17711, 0, [], job),
        BusMessage(bus.REPLJOB, A, "10.0.0.1", 7711, 17711, 0, [], job),
        BusMessage(bus.GOTJOB, A, "10.0.0.1", 7711, 17711, 0, [], job[0]),
        BusMessage(bus.REPLJOB, A, "10.0.0.1", 7711, 17711, bus.FLAG_LEAVING, [], job),
        BusMessage(bus.REPLJOB, A, "10.0.0.9", 7711, 17711, 0, [], job),
        BusMessage(bus.REPLJOB, A, "10.0.0.9", 7712, 17711, 0, [], job),
        BusMessage(bus.REPLJOB, A, "10.0.0.9", 7712, 17712, 0, [], job),
        BusMessage(bus.REPLJOB, B, "10.0.0.9", 7712, 17712, 0, (), job),
        BusMessage(bus.BATCH, B, "10.0.0.9", 7712, 17712, 0, [], [bus.GOTJOB, job[0]] * 2),
        sample(bus.PING, A),
        BusMessage(bus.REPLJOB, B, "10.0.0.9", 7712, 17712, 0, [], job),
    ]
    codec = bus.BusCodec()
    for m in msgs:
        assert codec.encode_body(m) == whole(m)
        assert codec.decode_body(codec.encode_body(m)) == decode_body(whole(m))


def test_a_codec_keeps_its_own_node_ids():
    """A node's codec names each node with one str object, frame after frame
    (the job layer compares holders by identity first); another codec keeps
    its own (what a codec keeps is no module's)."""
    job = [b"D-aaaaaaaa-" + b"x" * 24 + b"-0001", b"q", b"body", 0, 0, 3, 10, 10, 0, 300,
           0, 0, [A, B], 0, 5]
    frame = encode_body(BusMessage(bus.REPLJOB, A, "10.0.0.1", 7711, 17711, 0, [], job))
    ours, theirs = bus.BusCodec(), bus.BusCodec()
    first, second = ours.decode_body(frame), ours.decode_body(bytes(frame))
    assert first.sender is second.sender and first.payload[12][1] is second.payload[12][1]
    assert first.sender is first.payload[12][0]
    assert set(ours.node_ids) == {A, B} and not theirs.node_ids
    assert theirs.decode_body(frame) == first
