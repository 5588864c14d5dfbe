"""Whole in-process nodes (server/sim/inprocess.py) that know each other, on one
virtual clock, their bus messages carried as real frames (protocol/bus.py):
what the cluster sub-protocols' unit tests drive (tests/unit/cluster/)."""

from __future__ import annotations

import random

from broker.config import Config
from broker.job import random_node_id
from cluster.membership import ClusterNode, Membership
from cluster.outputs import Link
from protocol.bus import (
    BUS_VERSION_MAX, BUS_VERSION_MIN, BusCodec, BusVersionError, FrameReader, encode_frame,
)
from server.sim.clock import VirtualClock
from server.sim.inprocess import InProcessNode

NOW = 1_700_000_000_000


def know_each_other(tables: list, now: int = NOW) -> None:
    """Each Membership lists the others as reachable nodes with a link up (the
    bench's in-process cluster uses it too: bench/bench_cluster_inproc.py)."""
    for m in tables:
        for other in tables:
            if other is not m:
                me = other.myself
                cn = ClusterNode(me.id, me.ip, me.port, me.bus_port, 0, now)
                cn.pong_received = now
                cn.link = True
                m.nodes[me.id] = cn


def wire(msg):
    """Through the real frame format, as the bus carries it."""
    r = FrameReader()
    r.feed(encode_frame(msg))
    (got,) = list(r)
    return got


class Nodes:
    """``n`` nodes on one clock; ``nodes[i].call(...)`` runs a command there,
    ``deliver()`` carries every bus message sent until none is left.
    ``bus_versions``: the bus versions each node speaks (by default this
    release's), to play nodes of other releases."""

    def __init__(self, n: int = 3, bus_versions: list[tuple[int, int]] | None = None,
                 **directives) -> None:
        self.clock = VirtualClock(NOW)
        self.nodes: list[InProcessNode] = []
        versions = bus_versions or [(BUS_VERSION_MIN, BUS_VERSION_MAX)] * n
        # Each node reads with a codec of its versions (its bus shell's).
        self.codecs: dict[str, BusCodec] = {}
        for i in range(n):
            rng = random.Random(i)
            m = Membership(random_node_id(rng), "10.0.0.%d" % (i + 1), 7711, 17711,
                           rng=rng, now=NOW, bus_versions=versions[i])
            self.nodes.append(InProcessNode(Config(**directives), clock=self.clock, rng=rng,
                                            membership=m))
            self.codecs[m.node_id] = BusCodec(*versions[i])
        know_each_other([n.cluster.m for n in self.nodes], NOW)
        self.by_id = {n.cluster.m.node_id: n for n in self.nodes}
        self.carried: list[tuple[str, str, int]] = []     # (from, to, type) of each frame
        self.versions: list[tuple[str, str, int]] = []    # (from, to, bus version) of each
        self.refused: list[tuple[str, str, BusVersionError]] = []   # (from, to, why)

    def __getitem__(self, i: int) -> InProcessNode:
        return self.nodes[i]

    def id(self, i: int) -> str:
        return self.nodes[i].cluster.m.node_id

    def deliver(self, drop=lambda sender, dest, msg: False) -> None:
        """Every message sent, in the order sent, each to its node, until none is
        left; ``drop(sender id, dest id, msg)`` true loses one on the way."""
        while True:
            moved = False
            for n in self.nodes:
                sent, n.sent = n.sent, []
                me = n.cluster.m.node_id
                for out in sent:
                    dest, msg = out.node_id, out.msg
                    moved = True
                    self.carried.append((me, dest, msg.type))
                    self.versions.append((me, dest, out.version))
                    if drop(me, dest, msg) or dest not in self.by_id:
                        continue
                    to = self.by_id[dest]
                    # Written by the sender in its link's version, read by
                    # the receiver's codec.
                    reader = FrameReader(codec=self.codecs[dest])
                    reader.feed(n.driver.codec.encode_frame(msg, version=out.version))
                    try:
                        got = reader.next_message()
                    except BusVersionError as e:
                        self.refused.append((me, dest, e))
                        continue
                    assert got is not None
                    to.bus_message(Link(n.cluster.m.myself.ip, to.cluster.m.myself.ip), got)
            if not moved:
                return

    def advance(self, ms: int, step: int = 10, drop=lambda sender, dest, msg: False) -> None:
        """Move the clock, every node's timers running, the messages carried
        (but those ``drop`` loses, as in deliver)."""
        end = self.clock.now + ms
        while self.clock.now < end:
            self.clock.now = min(end, self.clock.now + step)
            for n in self.nodes:
                n.tick()
            self.deliver(drop)
