"""Each bus link settles the protocol version both ends speak
(protocol/bus.py "Versions"; cluster/membership.py keeps it per peer): on
in-process nodes (tests/unit/inprocess_cluster.py) of this release and
playing others, every frame written by its sender's codec in its link's
version and read by its receiver's codec."""

from __future__ import annotations

import pytest

from broker.job import ACTIVE, QUEUED
from protocol import bus as B
from tests.unit.inprocess_cluster import Nodes

OURS = (B.BUS_VERSION_MIN, B.BUS_VERSION_MAX)
PREVIOUS = (1, 1)       # the releases before versions were settled
NEWER = (B.BUS_VERSION_MAX + 1, B.BUS_VERSION_MAX + 1)


def test_this_release_speaks_two_versions_and_the_first_is_every_releases():
    assert B.PROTOCOL_VERSION == B.BUS_VERSION_MIN == 1 and B.BUS_VERSION_MAX == 2


def test_the_versions_said_in_the_header_flags():
    flags = B.versions_flags(1, 2)
    assert flags & 0xFF == 0                               # the node flags untouched
    assert B.versions_said(flags | B.FLAG_LEAVING) == (1, 2)
    assert B.versions_flags(1, 1) == 0                     # said as the old releases say it
    assert B.versions_said(B.FLAG_LEAVING) == (1, 1)
    assert B.settled_version(flags) == 2
    assert B.settled_version(0) == 1
    assert B.settled_version(B.versions_flags(1, 7)) == 2
    assert B.settled_version(B.versions_flags(*NEWER)) == 0


def _settle(nodes: Nodes) -> None:
    """Every node pings every other (as its link comes up), the PONGs come
    back, carried."""
    for n in nodes.nodes:
        for other in nodes.nodes:
            if other is not n:
                n.link_down(other.cluster.m.node_id)
                n.link_up(other.cluster.m.node_id)
    nodes.deliver()


def test_a_link_writes_the_lowest_version_until_it_hears_the_peer_then_the_highest():
    nodes = Nodes(3)
    _settle(nodes)
    first = {}
    for src, dst, version in nodes.versions:
        first.setdefault((src, dst), version)
    assert set(first.values()) == {B.BUS_VERSION_MIN}       # each link's first frame
    nodes.versions.clear()
    client = nodes[0].new_client()
    nodes[0].run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
    nodes.deliver()
    assert client.conn.replies and nodes.versions
    assert {v for _, _, v in nodes.versions} == {B.BUS_VERSION_MAX}
    assert nodes.refused == []


def test_a_node_of_the_previous_release_gets_version_1_and_replicates_both_ways():
    nodes = Nodes(3, bus_versions=[OURS, PREVIOUS, OURS])
    old = nodes.id(1)
    _settle(nodes)
    nodes.versions.clear()
    for i in (0, 1):                     # added on a new node, then on the old one
        client = nodes[i].new_client()
        nodes[i].run(client, [b"ADDJOB", b"q", b"body %d" % i, b"0", b"REPLICATE", b"3"])
        nodes.deliver()
        (jid,) = client.conn.replies
        for k, n in enumerate(nodes.nodes):
            assert n.node.get_job(str(jid).encode()).state == (QUEUED if k == i else ACTIVE)
    to_or_from_old = {v for s, d, v in nodes.versions if old in (s, d)}
    between_new = {v for s, d, v in nodes.versions if old not in (s, d)}
    assert to_or_from_old == {1} and between_new == {B.BUS_VERSION_MAX}
    assert nodes.refused == []
    # What it says of itself is what the previous release says: nothing.
    assert nodes[1].cluster.m.message(B.PING).flags == 0
    assert nodes[0].cluster.m.nodes[old].bus_version == 1


def test_a_node_that_speaks_only_a_newer_version_is_refused_naming_both():
    nodes = Nodes(3, bus_versions=[OURS, OURS, NEWER])
    newer = nodes.id(2)
    _settle(nodes)
    from_newer = [r for r in nodes.refused if r[0] == newer]
    to_newer = [r for r in nodes.refused if r[1] == newer]
    assert from_newer and to_newer
    assert len(nodes.refused) == len(from_newer) + len(to_newer)
    for _, _, refusal in from_newer:
        assert (refusal.sender, refusal.peer_lo, refusal.peer_hi) == (newer, *NEWER)
        assert refusal.peer_is_newer
        assert str(refusal) == (f"node {newer} speaks bus protocol version {NEWER[0]}, "
                                f"this node versions 1 to {B.BUS_VERSION_MAX}")
    for _, _, refusal in to_newer:
        assert not refusal.peer_is_newer and (refusal.peer_lo, refusal.peer_hi) == (1, 2)
    # None of its frames reached the others (none was taken for a malformed one).
    assert nodes[0].cluster.m.nodes[newer].data_received == 0
    assert nodes[0].call("INFO", "stats").count("malformed_bus_messages:0") == 1


def test_a_frame_of_a_newer_layout_is_refused_by_its_version_not_as_malformed():
    body = B.msgpack.packb([3, B.PING, "a" * 40, "", 1, 2, B.versions_flags(3, 4), [], None,
                            "a tenth item"])
    with pytest.raises(B.BusVersionError) as e:
        B.decode_body(body)
    assert (e.value.peer_lo, e.value.peer_hi) == (3, 4)
    # A version 1 or 2 frame whose flags say only newer versions: refused too.
    body = B.msgpack.packb([1, B.PING, "a" * 40, "", 1, 2, B.versions_flags(3, 4), [], None])
    with pytest.raises(B.BusVersionError):
        B.decode_body(body)


def test_a_peer_that_comes_back_as_the_previous_release_gets_version_1_again():
    nodes = Nodes(2)
    a, b = nodes[0], nodes[1]
    _settle(nodes)
    assert a.cluster.m.bus_version(nodes.id(1)) == B.BUS_VERSION_MAX
    # b stops: a's link to it goes down; b starts again as the previous release.
    a.link_down(nodes.id(1))
    assert a.cluster.m.bus_version(nodes.id(1)) == 1
    b.cluster.m.bus_lo, b.cluster.m.bus_hi = PREVIOUS
    b.cluster.m.versions_flags = 0
    b.link_down(nodes.id(0))                # started again: it has heard nobody yet
    nodes.codecs[nodes.id(1)] = B.BusCodec(*PREVIOUS)
    nodes.versions.clear()
    a.link_up(nodes.id(1))                  # a PING at once, in version 1
    nodes.deliver()
    client = a.new_client()
    a.run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"2"])
    nodes.deliver()
    assert client.conn.replies and nodes.refused == []
    assert {v for _, _, v in nodes.versions} == {1}
