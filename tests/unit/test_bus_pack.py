"""protocol/bus_pack.pyx against msgpack: the same bytes for every value the
bus carries, and msgpack's own result or error for what it leaves to msgpack."""

from __future__ import annotations

import random

import msgpack
import pytest

from protocol import bus as B
from protocol.build import EXTENSIONS

if EXTENSIONS:
    from protocol import bus_pack  # built by `make venv`: a missing build fails here
else:
    bus_pack = pytest.importorskip("protocol.bus_pack")

INT_EDGES = [0, 1, -1, 31, -31, 32, -32, -33, 127, 128, -127, -128, -129, 255, 256, 65535,
             65536, -32767, -32768, -32769, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1,
             2**32, 2**53, 2**63 - 1, 2**63, 2**64 - 1, -2**63, 1_700_000_000_000,
             1_700_000_000_000_123_456]
SIZE_EDGES = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]


def reference(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def ours(value) -> bytes:
    return bus_pack.pack(b"", value)


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
            with pytest.raises(bus_pack.Unsupported):
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
    assert ours(batch) == reference(batch)
    assert bus_pack.pack(b"\x99head", batch) == b"\x99head" + reference(batch)
    framed = bus_pack.pack(b"h", batch, True)
    assert framed == len(b"h" + reference(batch)).to_bytes(4, "big") + b"h" + reference(batch)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, {1, 2}, object(), [memoryview(b"ab")],
                                   nested(bus_pack.MAX_DEPTH + 1)])
def test_what_it_leaves_to_msgpack(value):
    with pytest.raises(bus_pack.Unsupported):
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
