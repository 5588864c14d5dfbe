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
server/sim_node.py). The only outputs it interprets are
:class:`~cluster.outputs.Send` (routed by address), :class:`~cluster.outputs.SaveConfig`
(kept as the host's nodes.conf, given back to the factory on restart) and
:class:`~cluster.outputs.DropLink` (forgets the simulated connection); everything
else is handed to the observers and, for :class:`~cluster.outputs.NodeEvent`,
recorded in the trace.

Each host has a :class:`SimDisk` for its AOF: what was written survives a crash
only once fsynced, and writes can be made to fail. Nodes report broken
invariants they can see themselves in ``Simulation.violations``.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from broker.aof_format import (
    FILE_HEADER_SIZE, REC_HEADER_SIZE, AOFError, BadHeader, Scanner, check_chunks, file_header,
)
from cluster.membership import Membership
from cluster.outputs import DropLink, Link, NodeEvent, SaveConfig, Send
from protocol.bus import decode_body, encode_body

__all__ = [
    "SimNode", "NetworkConfig", "SimHost", "Simulation", "membership_factory",
    "bus_codec",
]


class SimNode(Protocol):
    """What the simulator drives. Optional methods, used when present:
    ``next_deadline(now) -> int | None`` (when to tick next; default: every
    ``tick_interval``), ``link_up(node_id, now) -> list`` and
    ``link_down(node_id, now) -> list`` (the simulated connection state)."""

    @property
    def node_id(self) -> str: ...

    def handle_message(self, src: Link, msg: Any, now: int) -> list: ...

    def tick(self, now: int) -> list: ...


#: factory(host, saved_nodes_conf_or_None, rng, now) -> node
NodeFactory = Callable[["SimHost", "str | None", random.Random, int], Any]


@dataclass
class NetworkConfig:
    """Per-message faults. Reordering comes from random latency (two messages on
    the same path overtake each other) plus ``reorder``: a chance of an extra delay
    up to ``reorder_delay``."""

    min_latency: int = 1
    max_latency: int = 10
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay: int = 100


@dataclass(eq=False)
class SimDisk:
    """A host's disk, holding its AOF: chunks written (``write``) are durable once
    fsynced; a crash loses the rest. ``fail_writes`` makes writes fail (disk
    full); ``fatal`` is set by a writer that must stop the process (a failed
    write under appendfsync always): the simulator then crashes the host."""

    synced: list = field(default_factory=list)
    unsynced: list = field(default_factory=list)
    synced_ids: set = field(default_factory=set)
    unsynced_ids: set = field(default_factory=set)
    fail_writes: bool = False
    fatal: bool = False

    def write(self, data: bytes, job_ids=()) -> None:
        if self.fail_writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.unsynced.append(data)
        self.unsynced_ids.update(job_ids)

    def fsync(self) -> None:
        if self.unsynced:
            self.synced += self.unsynced
            self.synced_ids |= self.unsynced_ids
            self.unsynced = []
            self.unsynced_ids = set()

    def replace(self, data: bytes, job_ids=()) -> None:
        """An AOF rewrite: the new contents, fsynced, renamed over the old."""
        self.synced = [data] if data else []
        self.synced_ids = set(job_ids)
        self.unsynced = []
        self.unsynced_ids = set()

    def crash(self) -> None:
        self.unsynced = []
        self.unsynced_ids = set()
        self.fatal = False

    def holds(self, job_id, synced_only: bool) -> bool:
        """Whether a job record for job_id was written (fsynced, if asked)."""
        return job_id in self.synced_ids or (not synced_only and job_id in self.unsynced_ids)

    def image(self) -> bytes:
        """The file as a restarted process reads it (header added by the reader)."""
        data = self.synced + self.unsynced
        return file_header() + b"".join(data) if data else b""

    # -- damage: what a disk does to a stopped host's file (the chaos suite's
    # aof-truncate, aof-bitflip and power-loss faults, chaos/disk.py). Offsets
    # are the file's (header included); damage stays past the file header. The
    # ids written are kept as they were: ``holds`` then says what was written,
    # not what survived.

    def records(self) -> list:
        """(offset, end) of each whole record of the file, in order."""
        out = []
        scanner = Scanner()
        image = self.image()
        for offset, payload in scanner.feed(image):
            out.append((offset, offset + REC_HEADER_SIZE + len(payload)))
        return out

    def _set(self, image: bytes) -> None:
        body = image[FILE_HEADER_SIZE:]
        self.synced = [body] if body else []
        self.unsynced = []

    def truncate(self, offset: int) -> None:
        """The file cut at ``offset`` (a crash mid-write, a lost tail)."""
        self._set(self.image()[:max(offset, FILE_HEADER_SIZE)])

    def flip_bit(self, bit: int) -> None:
        """Bit ``bit`` of the file inverted (a disk's silent corruption)."""
        image = bytearray(self.image())
        image[bit // 8] ^= 1 << (bit % 8)
        self._set(bytes(image))

    def duplicate(self, start: int, end: int) -> None:
        """The bytes ``start:end`` (a record) written twice in a row."""
        image = self.image()
        self._set(image[:end] + image[start:end] + image[end:])

    def torn_write(self, keep: int) -> None:
        """A power cut in the middle of writing back the unsynced data: its
        first ``keep`` bytes reached the disk (the next ``crash`` drops the rest)."""
        data = b"".join(self.unsynced)[:keep]
        if data:
            self.synced.append(data)
        self.unsynced = []

    def check_aof_fix(self, force: bool) -> Any:
        """``disquette-check-aof --fix [--force]`` on this file: a torn tail
        (and, with ``force``, corruption) cut off. Returns the check's Summary."""
        summary = check_chunks([self.image()])
        damage = summary.corrupt if force and summary.corrupt is not None else summary.torn
        if damage is not None and not isinstance(damage, BadHeader):
            self.truncate(damage.offset)
        return summary


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
        self.net_rng = random.Random(self.rng.getrandbits(64))
        self._node_seed_rng = random.Random(self.rng.getrandbits(64))
        self.factory = factory
        self.net = net or NetworkConfig()
        self.tick_interval = tick_interval
        self.codec = codec
        self.max_clock_offset = max_clock_offset
        self.record_deliveries = record_deliveries
        self.now = 0
        self.hosts: dict[str, SimHost] = {}
        self._by_addr: dict[tuple[str, int], SimHost] = {}
        self._blocked: dict[tuple[str, str], bool] = {}   # (src, dst) names -> cut
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
        """kill -9: the process and its memory are gone, its disk (saved) stays.
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
        except AOFError as e:
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
        for gi, ga in enumerate(groups):
            for gj, gb in enumerate(groups):
                if gi != gj:
                    for a in ga:
                        for b in gb:
                            self._blocked[(a, b)] = True
        self._record("partition", tuple(tuple(g) for g in groups))

    def cut(self, src: str, dst: str) -> None:
        """One-way partition: what ``src`` sends to ``dst`` is lost."""
        self._blocked[(src, dst)] = True
        self._record("cut", src, dst)

    def heal(self) -> None:
        self._blocked.clear()
        self._record("heal")

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._blocked

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
                or (src.name, dst.name) in self._blocked):
            self.stats["dropped"] += 1
            return
        self.stats["delivered"] += 1
        if self.record_deliveries:
            self._record("d", src.name, dst.name, getattr(msg, "type", None))
        link = Link(src.ip, dst.ip)
        self._process(dst, dst.node.handle_message(link, msg, dst.now(self.now)))

    def _process(self, host: SimHost, outputs: list) -> None:
        if host.disk.fatal:
            self.crash(host.name)       # the process exits; its last outputs never left
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
        up = dst is not None and dst.alive and (src.name, dst.name) not in self._blocked
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
        rng = self.net_rng
        net = self.net
        if net.drop and rng.random() < net.drop:
            self.stats["dropped"] += 1
            return more
        copies = 2 if net.duplicate and rng.random() < net.duplicate else 1
        if copies == 2:
            self.stats["duplicated"] += 1
        for _ in range(copies):
            latency = rng.randint(net.min_latency, net.max_latency)
            if net.reorder and rng.random() < net.reorder:
                latency += rng.randint(1, net.reorder_delay)
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


def bus_codec(msg):
    """Round-trip a message through the real wire format (catches anything the
    membership puts in a message that msgpack or the decoder would not carry)."""
    return decode_body(encode_body(msg))


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
