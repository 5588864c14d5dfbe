"""The node-choice rules (disquette/topology.py, no I/O) and the serializers."""

from __future__ import annotations

import pytest

from disquette import JSON, MSGPACK, Serializer
from disquette.serializers import get_serializer
from disquette.topology import Hello, NodeInfo, Topology, parse_addr, parse_nodes

A, B, C = "10.0.0.1:7711", "10.0.0.2:7711", "10.0.0.3:7711"
IDS = {A: "a" * 40, B: "b" * 40, C: "c" * 40}


def hello(me: str, prio: dict[str, int] | None = None) -> Hello:
    prio = prio or {}
    nodes = [NodeInfo(IDS[x], x.split(":")[0], 7711, prio.get(x, 1)) for x in (A, B, C)]
    return Hello(1, IDS[me], nodes)


def test_parse_nodes():
    spec = parse_nodes("disque://user:p%40ss@h1:7711,h2:7712, h3")
    assert spec.addrs == ["h1:7711", "h2:7712", "h3:7711"]
    assert (spec.username, spec.password, spec.ssl) == ("user", "p@ss", False)
    assert parse_nodes("disques://h:1").ssl is True
    assert parse_nodes(["a:1", ("b", 2)]).addrs == ["a:1", "b:2"]
    assert parse_nodes(None).addrs == ["127.0.0.1:7711"]
    assert parse_addr("[::1]:7712") == ("::1", 7712)
    with pytest.raises(ValueError):
        parse_nodes("redis://h:1")
    with pytest.raises(ValueError):
        parse_nodes("")


def test_starts_on_first_seed_and_learns_the_rest():
    t = Topology([A])
    assert t.current == A and t.refresh_due(0.0)
    t.hello(A, hello(A), now=0.0)
    assert sorted(t.addrs()) == sorted([A, B, C]) and t.current == A
    assert t.addr_of_prefix("bbbbbbbb") == B and not t.refresh_due(1.0)
    assert t.refresh_due(61.0)


def test_prefers_lowest_priority_and_avoids_failed_nodes():
    t = Topology([A, B, C])
    t.hello(A, hello(A, {A: 100}), now=0.0)  # A leaving
    assert t.current == B
    t.failed(B, now=1.0)
    assert t.current == C and t.refresh_due(1.0)
    t.failed(C, now=2.0)
    assert t.current == A  # leaving beats unreachable
    t.hello(C, hello(C, {A: 100}), now=10.0)
    assert t.current == B  # B's penalty expired: B and C tie, B was listed first
    t.failed(A, now=11.0, priority=100)
    assert t.addrs()[-1] == A


def test_consumer_moves_to_majority_producer():
    t = Topology([A], switch_min_jobs=10)
    t.hello(A, hello(A), now=0.0)
    ids = lambda node, n: [f"D-{IDS[node][:8]}-xxxxxxxxxxxxxxxxxxxxxxxx-05a1"] * n  # noqa: E731
    assert t.observe_jobs(ids(B, 5) + ids(A, 4), now=1.0) is None  # too few yet
    assert t.observe_jobs(ids(B, 1), now=1.0) == B  # 6 of 10 from B
    assert t.current == B and t.switches == 1
    t2 = Topology([A], switch_min_jobs=10)
    t2.hello(A, hello(A), now=0.0)
    assert t2.observe_jobs(ids(B, 5) + ids(C, 5), now=1.0) is None  # no majority
    assert t2.observe_jobs(ids(C, 8) + ids(A, 2), now=1.0) == C and t2.switches == 1
    t3 = Topology([A], switch_min_jobs=10, follow_producers=False)
    t3.hello(A, hello(A), now=0.0)
    assert t3.observe_jobs(ids(B, 20), now=1.0) is None and t3.current == A
    t4 = Topology([A], switch_min_jobs=10)
    t4.hello(A, hello(A, {B: 100}), now=0.0)
    assert t4.observe_jobs(ids(B, 20), now=1.0) is None  # B is leaving: stay


def test_serializers():
    assert JSON.encode({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert JSON.encode(b"raw") == b"raw" and JSON.encode(bytearray(b"x")) == b"x"
    assert JSON.decode(b"not json") == b"not json" and JSON.decode(b"") == b""
    assert MSGPACK.decode(MSGPACK.encode({"k": 1})) == {"k": 1}
    assert MSGPACK.decode(b"\xc1") == b"\xc1"  # never-used msgpack byte
    pair = get_serializer((str.encode, bytes.decode))
    assert isinstance(pair, Serializer) and pair.decode(pair.encode("hi")) == "hi"
    import pickle

    assert get_serializer(pickle).decode(pickle.dumps({1})) == {1}
    assert get_serializer("msgpack") is MSGPACK and get_serializer(None) is JSON
    with pytest.raises(ValueError):
        get_serializer("yaml")
