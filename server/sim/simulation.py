"""Deterministic cluster simulator: many sans-IO nodes, one thread, one seed.

DESIGN.md: "a simulator can run a whole cluster in one thread, with a virtual clock
and a network that drops, delays, duplicates, reorders and partitions, from one
seed, and replay any failure exactly (the way FoundationDB and TigerBeetle test
themselves)."

Everything random (latencies, drops, node ids, gossip choices, scenario choices)
comes from ``random.Random(seed)`` and every ordering decision is a heap of
``(time, sequence number)``; nothing iterates a ``set`` (string hashing changes
between processes) so the same seed replays the same trace, byte for byte, in any
process. A failing test prints its seed; re-run it with that seed to replay it.

The simulator is generic over the node: anything following :class:`SimNode`
(a bare :class:`~cluster.membership.Membership`, or a whole broker node:
server/sim/broker_node.py). The only outputs it interprets are
:class:`~cluster.outputs.Send` (routed by address), :class:`~cluster.outputs.SaveConfig`
(kept as the host's nodes.conf, given back to the factory on restart) and
:class:`~cluster.outputs.DropLink` (forgets the simulated connection); everything
else is handed to the observers and, for :class:`~cluster.outputs.NodeEvent`,
recorded in the trace.

The network between hosts is server/sim/network.py's. Each host has a disk
(server/sim/disk.py) for its AOF: what was written survives a crash only once
fsynced, and writes can be made to fail. Nodes report broken invariants they
can see themselves in ``Simulation.violations``.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from cluster.membership import Membership
from cluster.outputs import DropLink, Link, NodeEvent, SaveConfig, Send
from server.aof_load import AOFLoadError
from server.sim.disk import SimDisk
from server.sim.network import Network, NetworkConfig

__all__ = ["SimNode", "SimHost", "Simulation", "membership_factory"]


class SimNode(Protocol):
    """What the simulator drives. Optional, used when present:
    ``next_deadline(now) -> int | None`` (when to tick next; default: every
    ``tick_interval``), ``link_up(node_id, now) -> list`` and
    ``link_down(node_id, now) -> list`` (the simulated connection state), and
    ``exited`` (the process exited: the simulator crashes the host)."""

    @property
    def node_id(self) -> str: ...

    def handle_message(self, src: Link, msg: Any, now: int) -> list: ...

    def tick(self, now: int) -> list: ...


#: factory(host, saved_nodes_conf_or_None, rng, now) -> node
NodeFactory = Callable[["SimHost", "str | None", random.Random, int], Any]


@dataclass(eq=False)
class SimHost:
    """A machine: a stable address, a node process that may crash and restart, and
    the disk that survives it (the last saved nodes.conf)."""

    name: str
    ip: str
    port: int
    bus_port: int
    clock_offset: int = 0          # the node's clock = sim time + offset (ms)
    node: Any = None
    alive: bool = False
    incarnation: int = 0
    saved: str | None = None
    node_id: str | None = None     # id of the last incarnation (kept after a crash)
    links: dict = field(default_factory=dict)   # dest node id -> link up (our side)
    disk: SimDisk = field(default_factory=SimDisk)
    sim: Any = None

    def now(self, sim_now: int) -> int:
        return sim_now + self.clock_offset


_TICK = 0
_DELIVER = 1
_CALL = 2


class Simulation:
    def __init__(self, seed: int, factory: NodeFactory, *,
                 net: NetworkConfig | None = None, tick_interval: int = 100,
                 codec: Callable[[Any], Any] | None = None,
                 max_clock_offset: int = 0, record_deliveries: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        # Separate streams so that adding, say, one more network draw does not shift
        # every node's random choices (traces stay comparable while debugging).
        net_rng = random.Random(self.rng.getrandbits(64))
        self._node_seed_rng = random.Random(self.rng.getrandbits(64))
        self.factory = factory
        self.net = net or NetworkConfig()
        self.network = Network(self.net, net_rng)
        self.tick_interval = tick_interval
        self.codec = codec
        self.max_clock_offset = max_clock_offset
        self.record_deliveries = record_deliveries
        self.now = 0
        self.hosts: dict[str, SimHost] = {}
        self._by_addr: dict[tuple[str, int], SimHost] = {}
        self._queue: list = []
        self._seq = 0
        self.trace: list[tuple] = []
        self.violations: list[str] = []     # invariants nodes saw broken
        self.observers: list[Callable[[Simulation, SimHost, Any], None]] = []
        self.stats = {"sent": 0, "delivered": 0, "dropped": 0, "duplicated": 0}

    # -- hosts -----------------------------------------------------------------------

    def add_host(self, name: str | None = None, *, start: bool = True) -> SimHost:
        i = len(self.hosts) + 1
        name = name or f"n{i}"
        offset = self.rng.randrange(self.max_clock_offset + 1) if self.max_clock_offset else 0
        host = SimHost(name, f"10.0.{i // 250}.{i % 250 + 1}", 7711, 17711,
                       clock_offset=offset, sim=self)
        self.hosts[name] = host
        self._by_addr[(host.ip, host.bus_port)] = host
        if start:
            self.start(name)
        return host

    def start(self, name: str) -> SimHost:
        host = self.hosts[name]
        assert not host.alive, f"{name} is already running"
        host.incarnation += 1
        host.alive = True
        host.links = {}
        rng = random.Random(self._node_seed_rng.getrandbits(64))
        host.node = self.factory(host, host.saved, rng, host.now(self.now))
        host.node_id = host.node.node_id
        self._record("start", name, host.node.node_id)
        self._schedule(self.now + self.rng.randrange(self.tick_interval), _TICK,
                       host, host.incarnation)
        return host

    def crash(self, name: str) -> None:
        """The host goes down (kill -9, power lost): the process and its memory
        are gone, its disk keeps what was fsynced (and nodes.conf, saved).
        Messages in flight to it are lost (their connections broke)."""
        host = self.hosts[name]
        if host.alive:
            host.alive = False
            host.node = None
            host.disk.crash()
            self._record("crash", name)

    def restart(self, name: str) -> SimHost:
        self.crash(name)
        return self.start(name)

    def boot(self, name: str) -> str | None:
        """Start ``name`` as an operator does after damage: None when it runs,
        else why it refused to start (its AOF is damaged: the reason names the
        byte offset), the host staying down."""
        host = self.hosts[name]
        try:
            self.start(name)
        except AOFLoadError as e:
            host.alive = False
            host.node = None
            self._record("refused", name, str(e))
            return str(e)
        return None

    def alive_hosts(self) -> list[SimHost]:
        return [h for h in self.hosts.values() if h.alive]

    # -- network faults --------------------------------------------------------------

    def partition(self, *groups: list[str]) -> None:
        """Cut every path between different groups, both ways. Hosts in no group
        keep talking to everyone."""
        self.network.partition(groups)
        self._record("partition", tuple(tuple(g) for g in groups))

    def cut(self, src: str, dst: str) -> None:
        """One-way partition: what ``src`` sends to ``dst`` is lost."""
        self.network.cut(src, dst)
        self._record("cut", src, dst)

    def heal(self) -> None:
        self.network.heal()
        self._record("heal")

    # -- clock faults ------------------------------------------------------------------

    def jump_clock(self, name: str, delta: int) -> None:
        """The host's clock (wall and monotonic alike, as libfaketime makes them
        in chaos/clock.py) jumps ``delta`` ms, forward or back. The node sees it
        at its next reading; ticks already scheduled keep their simulated time."""
        host = self.hosts[name]
        host.clock_offset += delta
        self._record("clock", name, delta, host.clock_offset)

    def strobe_clock(self, name: str, delta: int, period: int, until: int) -> None:
        """The host's clock jumps ``delta`` ms and back, again and again, every
        ``period`` ms until simulated time ``until``, then comes back."""
        def flip(sim: "Simulation", sign: int) -> None:
            sim.jump_clock(name, sign * delta)
            if sign > 0 or sim.now + period < until:
                sim.at(sim.now + period, lambda s: flip(s, -sign))
        self.at(self.now, lambda s: flip(s, 1))

    # -- driving -------------------------------------------------------------------------

    def call(self, name: str, fn: Callable[[Any, int], list]) -> list:
        """Run ``fn(node, node_now)`` on a live node now (an admin command, say)
        and process its outputs. Returns them."""
        host = self.hosts[name]
        assert host.alive, f"{name} is down"
        out = fn(host.node, host.now(self.now)) or []
        self._process(host, out)
        return out

    def at(self, when: int, fn: Callable[["Simulation"], None]) -> None:
        """Schedule ``fn(sim)`` at virtual time ``when``."""
        self._schedule(when, _CALL, fn, None)

    def run_until(self, deadline: int, until: Callable[["Simulation"], bool] | None = None,
                  poll: int = 100) -> bool:
        """Advance virtual time to ``deadline``, or until ``until(sim)`` holds (checked
        every ``poll`` ms of virtual time). Returns whether ``until`` was met (True
        when there is none)."""
        queue = self._queue
        if until is None:
            while queue and queue[0][0] <= deadline:
                self._step(heapq.heappop(queue))
            self.now = max(self.now, deadline)
            return True
        while True:
            if until(self):
                return True
            if self.now >= deadline:
                return False
            stop = min(self.now + poll, deadline)
            while queue and queue[0][0] <= stop:
                self._step(heapq.heappop(queue))
            self.now = stop

    def run_for(self, ms: int, until=None, poll: int = 100) -> bool:
        return self.run_until(self.now + ms, until, poll)

    # -- internals -----------------------------------------------------------------------

    def _schedule(self, when: int, kind: int, a, b, c=None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, kind, a, b, c))

    def _record(self, *entry) -> None:
        self.trace.append((self.now, *entry))

    def _step(self, ev) -> None:
        when, _, kind, a, b, c = ev
        self.now = when
        if kind == _DELIVER:
            self._deliver(a, b, c)
        elif kind == _TICK:
            host, incarnation = a, b
            if not host.alive or host.incarnation != incarnation:
                return
            node = host.node
            hnow = host.now(when)
            self._process(host, node.tick(hnow))
            nxt = None
            if hasattr(node, "next_deadline"):
                nd = node.next_deadline(hnow)
                if nd is not None:
                    nxt = nd - host.clock_offset
            if nxt is None or nxt <= when:
                nxt = when + self.tick_interval
            self._schedule(nxt, _TICK, host, incarnation)
        else:
            a(self)

    def _deliver(self, dst: SimHost, incarnation: int, item) -> None:
        src, msg = item
        if (not dst.alive or dst.incarnation != incarnation
                or self.network.blocked(src.name, dst.name)):
            self.stats["dropped"] += 1
            return
        self.stats["delivered"] += 1
        if self.record_deliveries:
            self._record("d", src.name, dst.name, getattr(msg, "type", None))
        link = Link(src.ip, dst.ip)
        self._process(dst, dst.node.handle_message(link, msg, dst.now(self.now)))

    def _process(self, host: SimHost, outputs: list) -> None:
        if getattr(host.node, "exited", False):
            self.crash(host.name)       # the process exited; its last outputs never left
            return
        work = deque([(host, outputs)])
        while work:
            h, outs = work.popleft()
            for out in outs:
                if isinstance(out, Send):
                    more = self._send(h, out)
                    if more:
                        work.append((h, more))
                elif isinstance(out, SaveConfig):
                    h.saved = out.text
                elif isinstance(out, DropLink):
                    # The connection is closed; the next Send reconnects (and
                    # reports link_up again).
                    h.links.pop(out.node_id, None)
                else:
                    if isinstance(out, NodeEvent):
                        self._record("e", h.name, out.kind, out.node_id, out.detail)
                    for obs in self.observers:
                        obs(self, h, out)

    def _send(self, src: SimHost, out: Send) -> list | None:
        """Route by address, like a socket would; returns the link_up/link_down
        outputs of the sender, if its view of the connection changed."""
        if not src.alive:
            return None
        self.stats["sent"] += 1
        dst = self._by_addr.get((out.ip, out.bus_port))
        up = dst is not None and dst.alive and not self.network.blocked(src.name, dst.name)
        more = None
        node = src.node
        if src.links.get(out.node_id, False) != up:
            src.links[out.node_id] = up
            fn = getattr(node, "link_up" if up else "link_down", None)
            if fn is not None:
                more = fn(out.node_id, src.now(self.now))
        if not up:
            self.stats["dropped"] += 1
            return more
        latencies = self.network.latencies()
        if not latencies:
            self.stats["dropped"] += 1
            return more
        if len(latencies) == 2:
            self.stats["duplicated"] += 1
        for latency in latencies:
            msg = self.codec(out.msg) if self.codec is not None else out.msg
            self._schedule(self.now + latency, _DELIVER, dst, dst.incarnation, (src, msg))
        return more

    # -- inspection -------------------------------------------------------------------------

    def in_flight(self):
        """The messages on their way (scheduled, not delivered yet)."""
        for ev in self._queue:
            if ev[2] == _DELIVER:
                yield ev[5][1]

    def digest(self) -> str:
        """A fingerprint of the whole run: equal seeds must give equal digests."""
        h = hashlib.sha256()
        for entry in self.trace:
            h.update(repr(entry).encode())
            h.update(b"\n")
        return h.hexdigest()

    def describe(self) -> str:
        """Replay hint to print with any failure."""
        return (f"simulation seed={self.seed} (virtual time {self.now} ms); re-run "
                f"with this seed to replay it exactly")


def membership_factory(node_timeout: int = 1000) -> NodeFactory:
    """Factory for bare :class:`Membership` nodes; a restart reloads nodes.conf, a
    first start takes a random id and saves at once (as the server does)."""

    def make(host: SimHost, saved: str | None, rng: random.Random, now: int) -> Membership:
        m = Membership.bootstrap(saved, ip=host.ip, port=host.port, bus_port=host.bus_port,
                                 rng=rng, node_timeout=node_timeout, now=now)
        if saved is None:
            host.saved = m.to_nodes_conf()
        return m

    return make
