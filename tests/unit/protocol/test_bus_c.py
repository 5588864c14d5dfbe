"""protocol/bus_c.pyx against msgpack: the same bytes for every value the
bus carries, and msgpack's own result or error for what it leaves to msgpack
(Unsupported); a body it calls invalid (InvalidBody) is one msgpack refuses
too; any other exception from it is a bug, which the bus lets through."""

from __future__ import annotations

import random
import struct

import msgpack
import pytest

from protocol import bus as B
from protocol.build import EXTENSIONS

if EXTENSIONS:
    from protocol import bus_c  # built by `make venv`: a missing build fails here
else:
    bus_c = pytest.importorskip("protocol.bus_c")

INT_EDGES = [0, 1, -1, 31, -31, 32, -32, -33, 127, 128, -127, -128, -129, 255, 256, 65535,
             65536, -32767, -32768, -32769, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1,
             2**32, 2**53, 2**63 - 1, 2**63, 2**64 - 1, -2**63, 1_700_000_000_000,
             1_700_000_000_000_123_456]
SIZE_EDGES = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]


def reference(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def ours(value) -> bytes:
    return bus_c.Codec().pack(b"", value)


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(10 if depth < 4 else 7)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice(INT_EDGES) + rng.choice([0, 0, 1, -1])
    if kind == 2:
        return rng.randrange(-2**63, 2**64)
    if kind == 3:
        return rng.choice([0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), rng.random()])
    if kind == 4:
        return rng.randbytes(rng.choice([0, 1, 31, 32, 40, 100, 255, 256, 300]))
    if kind == 5:
        return "".join(rng.choice("ab0f-\u00e9\u4e2d\U0001f600")
                       for _ in range(rng.choice([0, 1, 31, 32, 40, 255, 256])))
    if kind == 6:
        return bytearray(rng.randbytes(rng.randrange(0, 50)))
    n = rng.choice([0, 1, 3, 15, 16, 17])
    if kind == 7:
        return [random_value(rng, depth + 1) for _ in range(n)]
    if kind == 8:
        return tuple(random_value(rng, depth + 1) for _ in range(n))
    return {rng.choice(["k", b"k", 1, "id%d" % i]): random_value(rng, depth + 1)
            for i in range(n)}


def payload_ok(value) -> bool:
    """Whether msgpack packs it (the random ints may pass 64 bits)."""
    try:
        reference(value)
    except (OverflowError, ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("seed", range(40))
def test_random_values_pack_to_msgpacks_bytes(seed):
    rng = random.Random(seed)
    for _ in range(200):
        value = random_value(rng)
        if payload_ok(value):
            assert ours(value) == reference(value), value
        else:
            with pytest.raises(bus_c.Unsupported):
                ours(value)


@pytest.mark.parametrize("value", INT_EDGES + [-v for v in INT_EDGES if v <= 2**63])
def test_int_edges(value):
    assert ours(value) == reference(value)


@pytest.mark.parametrize("n", SIZE_EDGES)
def test_length_edges(n):
    for value in (b"x" * n, "y" * n, [0] * n, {i: None for i in range(n)}):
        assert ours(value) == reference(value)


def test_a_repljob_batch_as_the_bus_sends_it():
    holders = tuple(sorted("%040x" % (i * 7919 + 2**120) for i in range(3)))
    fields = [b"D-" + b"a" * 38, b"q", b"x" * 100, 1, 0, 3, 1_700_086_400_000,
              1_700_000_000_000_123_456, 0, 300, 0, 0, holders, 1_700_000_300_000,
              1_700_000_000_000]
    batch = [B.REPLJOB, fields] * 16
    codec = bus_c.Codec()
    assert codec.pack(b"", batch) == reference(batch)
    assert codec.pack(b"\x99head", batch) == b"\x99head" + reference(batch)
    framed = codec.pack(b"h", batch, True)
    assert framed == len(b"h" + reference(batch)).to_bytes(4, "big") + b"h" + reference(batch)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, {1, 2}, object(), [memoryview(b"ab")],
                                   nested(bus_c.MAX_DEPTH + 1), ["lone \ud800 surrogate"]])
def test_what_it_leaves_to_msgpack(value):
    with pytest.raises(bus_c.Unsupported):
        ours(value)


def test_the_bus_frames_are_msgpacks_whichever_packs_them():
    """encode_frame / encode_body: the bytes a pure build makes (msgpack), for
    every message shape, a payload msgpack alone can pack (a memoryview)
    included, and msgpack's error for one it cannot."""
    gossip = [B.GossipEntry("b" * 40, "10.0.0.2", 7711, 17711, 0, 5, -1)]
    msgs = [
        B.BusMessage(B.PING, "a" * 40, "10.0.0.1", 7711, 17711, 0, gossip, None),
        B.BusMessage(B.REPLJOB, "a" * 40, "10.0.0.1", 7711, 17711, 0, [], [b"x", 1, ("c",)]),
        B.BusMessage(B.GOTJOB, "a" * 40, "", 7711, 17711, B.FLAG_LEAVING, [], b"D-" + b"1" * 38),
        B.BusMessage(B.PAUSE, "a" * 40, "10.0.0.1", 7711, 17711, 0, [], memoryview(b"qq")),
    ]
    for msg in msgs:
        whole = [B.PROTOCOL_VERSION, msg.type, msg.sender, msg.ip, msg.port, msg.bus_port,
                 msg.flags, msg.gossip, msg.payload]
        body = reference(whole)
        assert B.encode_body(msg) == body
        assert B.encode_frame(msg) == len(body).to_bytes(4, "big") + body
    deep = B.BusMessage(B.PAUSE, "a" * 40, "10.0.0.1", 7711, 17711, 0, [], nested(600))
    assert B.encode_body(deep)[-601:] == b"\x91" * 600 + b"\x90"
    bad = B.BusMessage(B.PAUSE, "a" * 40, "10.0.0.1", 7711, 17711, 0, [], 2**70)
    with pytest.raises(OverflowError):
        B.encode_frame(bad)
    surrogate = B.BusMessage(B.PAUSE, "a" * 40, "10.0.0.1", 7711, 17711, 0, [], "\ud800")
    with pytest.raises(UnicodeEncodeError):
        B.encode_frame(surrogate)


# -- reading -------------------------------------------------------------------------
def read_reference(data: bytes):
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


def same(a, b) -> bool:
    """Equal, and of the same types all the way down (True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):    # NaN != NaN: the same bits
        return struct.pack(">d", a) == struct.pack(">d", b)
    return a == b


def readable(rng: random.Random) -> bytes:
    while True:
        value = random_value(rng)
        if payload_ok(value):
            return reference(value)


@pytest.mark.parametrize("seed", range(40))
def test_random_bodies_read_as_msgpack_reads_them(seed):
    rng = random.Random(seed)
    codec = bus_c.Codec()
    for _ in range(200):
        data = readable(rng)
        assert same(codec.unpack(data), read_reference(data))
        assert same(codec.unpack(bytearray(data)), read_reference(data))


@pytest.mark.parametrize("seed", range(40))
def test_broken_bodies_are_never_read_where_msgpack_refuses_them(seed):
    """Cut, flipped, grown: where msgpack refuses a body, unpack calls it
    invalid or leaves it to msgpack; where msgpack reads it, unpack reads the
    same or leaves it to msgpack, and never calls it invalid. Nothing else
    comes out of it, and the bus makes either a message or a BusProtocolError
    of it."""
    rng = random.Random(seed)
    codec = bus_c.Codec()
    bus = B.BusCodec()
    for _ in range(200):
        data = bytearray(readable(rng))
        how = rng.randrange(4)
        if how == 0 and data:
            del data[rng.randrange(len(data)):]
        elif how == 1 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == 2:
            data += bytes([rng.randrange(256)])
        else:
            data[rng.randrange(len(data) + 1):0] = rng.choice(
                [b"\xc1", b"\xd4\x01\x00", b"\xc7\x01\x05x", b"\xdd\xff\xff\xff\xff",
                 b"\xdb\x00\x01\x00\x00", b"\xa2\xff\xfe"])
        data = bytes(data)
        try:
            bus.decode_body(data)
        except B.BusProtocolError:
            pass
        try:
            expected = read_reference(data)
        except (ValueError, TypeError):
            with pytest.raises((bus_c.InvalidBody, bus_c.Unsupported)):
                codec.unpack(data)
            continue
        try:
            got = codec.unpack(data)
        except bus_c.Unsupported:
            continue
        assert same(got, expected), data


def test_a_node_id_read_twice_is_one_str():
    """By the same Codec; another keeps its own."""
    nid = "%040x" % 2**150
    codec = bus_c.Codec()
    a = codec.unpack(reference([nid, "x" * 40]))
    b = codec.unpack(reference([nid]))
    assert a[0] is b[0] and a[0] == nid
    assert codec.unpack(reference("y" * 40)) == "y" * 40    # another id in the same slot
    other = bus_c.Codec().unpack(reference([nid]))
    assert other[0] == nid and other[0] is not a[0]


def test_the_bus_reads_frames_whichever_reads_them():
    """decode_body: a REPLJOB batch read by either gives one message; a body
    only msgpack reads (an ext type where the payload goes) is read by it,
    and a broken one is refused with msgpack's words."""
    holders = sorted("%040x" % (i * 7919 + 2**120) for i in range(3))
    fields = [b"D-" + b"a" * 38, b"q", b"x" * 100, 1, 0, 3, 1_700_086_400_000,
              1_700_000_000_000_123_456, 0, 300, 0, 0, holders, 1_700_000_300_000,
              1_700_000_000_000]
    msg = B.BusMessage(B.BATCH, "a" * 40, "10.0.0.1", 7711, 17711, 0, [],
                       [B.REPLJOB, fields] * 4)
    body = B.encode_body(msg)
    assert B.decode_body(body) == msg
    assert B.decode_body(bytearray(body)) == msg
    ext = reference([B.PROTOCOL_VERSION, B.PAUSE, "a" * 40, "", 1, 2, 0, [],
                     msgpack.ExtType(5, b"x")])
    assert B.decode_body(ext).payload is None and B.decode_body(ext).malformed == 1
    for broken in (body[:-1], body + b"\x00", b"\xc1", reference(["x"])[:-1] + b"\xff"):
        with pytest.raises(bus_c.InvalidBody):
            bus_c.Codec().unpack(broken)
        with pytest.raises(B.BusProtocolError, match="invalid bus frame body"):
            B.decode_body(broken)


class Exploding(int):
    """An int whose comparison fails: what a bug inside bus_c looks like."""

    def __le__(self, other):
        raise RuntimeError("injected bug")


def test_a_bug_in_bus_c_goes_through_the_bus():
    """An exception bus_c does not declare is a bug of ours: encode_frame and
    decode_body let it through instead of asking msgpack (which would have
    said something else, or done it), raised in bus_c itself or by whatever
    stands in its place."""
    big = Exploding(2**64 + 1)
    with pytest.raises(OverflowError):
        msgpack.packb(big)                  # what a fallback to msgpack would say
    with pytest.raises(RuntimeError, match="injected bug"):
        bus_c.Codec().pack(b"", big)
    codec = B.BusCodec()
    if EXTENSIONS:                          # the bus packs with bus_c
        with pytest.raises(RuntimeError, match="injected bug"):
            codec.encode_frame(B.BusMessage(B.PAUSE, "a" * 40, "10.0.0.1", 7711, 17711, 0,
                                            [], [b"q", big]))
    msg = B.BusMessage(B.GOTJOB, "a" * 40, "", 1, 2, 0, [], b"D-" + b"1" * 38)
    body = B.encode_body(msg)

    def broken(*args):
        raise KeyError("injected bug")

    codec.c_pack = codec.c_unpack = broken
    with pytest.raises(KeyError, match="injected bug"):
        codec.encode_frame(msg)
    with pytest.raises(KeyError, match="injected bug"):
        codec.decode_body(body)
    reader = B.FrameReader(codec=codec)
    reader.feed(len(body).to_bytes(4, "big") + body)
    with pytest.raises(KeyError, match="injected bug"):
        reader.next_message()
