"""The faults of each scenario, laid over the run's seconds; every choice
(which nodes, when, how long) comes from the run's seeded generator, so a seed
replays the same faults at the same offsets.

A scenario is a function ``(faults, rng, seconds)`` that applies and stops
faults while the workload runs; the runner then heals everything
(``Faults.heal``), drains and checks. Faults are recorded in the history as
``fault`` start/stop events, which the report draws as bands.

Link faults act on the proxies of chaos/launcher.py: ``n1-n2`` carries what n1
sends to n2 on n1's own link, and n2's answers on it. Nodes also answer on the
links their peers opened, so cutting "n1 cannot reach n2" is: disable ``n1-n2``
and drop (a ``timeout`` toxic of 0) what flows from n1 to n2 on ``n2-n1``.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from chaos import disk, previous_release, upgrade
from chaos.clock import Strobe, TtlProbe
from chaos.history import HistoryWriter
from chaos.launcher import ChaosCluster, Node
from chaos.netns import LossRules

_loss_tags = itertools.count(1)       # names each packet-loss fault's iptables rules


class Faults:
    """The fault verbs, each recorded in the history."""

    def __init__(self, cluster: ChaosCluster, history: HistoryWriter, deadline: float) -> None:
        self.cluster, self.history = cluster, history
        self.deadline = deadline              # monotonic time the scenario must end by
        # each fault's undo; what an undo returns is written on the fault's stop
        self.active: dict[int, Callable[[], dict[str, object] | None]] = {}
        self.killed: set[str] = set()

    # -- time --------------------------------------------------------------------
    def sleep_until(self, offset: float, t0: float) -> None:
        """Sleep until ``offset`` seconds after ``t0`` (never past the deadline)."""
        delay = min(t0 + offset, self.deadline) - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _start(self, name: str, undo: Callable[[], dict[str, object] | None],
               **detail: object) -> int:
        fault = self.history.fault_started(name, **detail)
        self.active[fault] = undo
        return fault

    def stop(self, fault: int) -> None:
        undo = self.active.pop(fault, None)
        if undo is not None:
            outcome = undo()
            self.history.fault_stopped(fault, **(outcome if isinstance(outcome, dict) else {}))

    def heal(self) -> None:
        """Stop every fault: proxies back to clean links, nodes running."""
        for fault in list(self.active):
            self.stop(fault)
        self.cluster.api.reset()              # every proxy enabled, every toxic gone
        for node in self.cluster.nodes:
            if not node.is_running():
                node.start()
            node.resume()
        self.history.healed()

    # -- links ---------------------------------------------------------------------
    def _cut(self, src: str, dst: str) -> Callable[[], None]:
        """``src`` can no longer send to ``dst`` (both its own link and its
        answers on the link ``dst`` opened)."""
        out = self.cluster.link(src, dst)
        back = self.cluster.link(dst, src)
        out.disable()
        toxic = back.add_toxic(type="timeout", stream="downstream", toxicity=1.0,
                               name=f"cut-{src}-{dst}", attributes={"timeout": 0})

        def undo() -> None:
            out.enable()
            try:
                back.destroy_toxic(toxic.name)
            except Exception:  # noqa: BLE001 - already gone (a reset)
                pass
        return undo

    def _cuts(self, pairs: list[tuple[str, str]]) -> Callable[[], None]:
        undos = [self._cut(a, b) for a, b in pairs]
        return lambda: [u() for u in undos]

    def partition(self, *groups: list[str]) -> int:
        """No traffic between nodes of different groups (both ways)."""
        pairs = [(a, b) for g in groups for h in groups if g is not h for a in g for b in h]
        return self._start("partition", self._cuts(pairs), groups=[list(g) for g in groups])

    def one_way(self, pairs: list[tuple[str, str]]) -> int:
        """Each ``(a, b)``: a's messages no longer reach b; b's still reach a."""
        return self._start("one-way", self._cuts(pairs), cut=[f"{a}->{b}" for a, b in pairs])

    def _toxics(self, links: list[tuple[str, str]], **toxic: object) -> Callable[[], None]:
        made = []
        for a, b in links:
            for stream in ("upstream", "downstream"):
                proxy = self.cluster.link(a, b)
                made.append((proxy, proxy.add_toxic(stream=stream, toxicity=1.0,
                                                    name=f"{toxic['type']}-{stream}", **toxic)))

        def undo() -> None:
            for proxy, t in made:
                try:
                    proxy.destroy_toxic(t.name)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        return undo

    def latency(self, ms: int, jitter: int) -> int:
        links = list(self.cluster.links)
        return self._start("latency", self._toxics(links, type="latency",
                                                   attributes={"latency": ms, "jitter": jitter}),
                           latency_ms=ms, jitter_ms=jitter)

    def slow_node(self, node: str, rate_kb: int) -> int:
        links = [k for k in self.cluster.links if node in k]
        return self._start("bandwidth", self._toxics(links, type="bandwidth",
                                                     attributes={"rate": rate_kb}),
                           node=node, rate_kb_s=rate_kb)

    # -- processes -------------------------------------------------------------------
    def kill(self, node: Node) -> int:
        node.kill()
        return self._start("kill -9", node.start, node=node.name)

    def pause(self, node: Node) -> int:
        node.pause()
        return self._start("SIGSTOP", node.resume, node=node.name)

    def leave(self, node: Node) -> int:
        with node.admin() as r:
            r.execute_command("CLUSTER", "LEAVING", "yes")

        def undo() -> None:
            with node.admin() as r:
                r.execute_command("CLUSTER", "LEAVING", "no")
        return self._start("leaving", undo, node=node.name)

    # -- packets (in the run's own network namespace) ------------------------------
    def packet_loss(self, probability: float, *, links: Sequence[tuple[str, str]] = (),
                    nodes: Sequence[str] = ()) -> int:
        """Drop ``probability`` of the TCP packets, both ways, on each link
        ``(a, b)`` (a's connection to its proxy ``a-b``) and on every bus
        connection each of ``nodes`` accepts (its bus port). The counters of
        the rules are written on the fault's stop."""
        ports = [int(self.cluster.link(a, b).listen.rsplit(":", 1)[1]) for a, b in links]
        ports += [self.cluster.node(n).bus_port for n in nodes]
        rules = LossRules(f"chaos-loss-{next(_loss_tags)}", ports, probability)
        rules.add()
        return self._start("packet-loss", rules.remove, probability=probability,
                           links=[f"{a}->{b}" for a, b in links], nodes=list(nodes))

    # -- disks and power (chaos/disk.py) ------------------------------------------------
    def aof_truncate(self, node: Node, rng: random.Random, load_truncated: bool = True) -> int:
        return disk.aof_truncate(self, node, rng, load_truncated)

    def aof_bitflip(self, node: Node, rng: random.Random) -> int:
        return disk.aof_bitflip(self, node, rng)

    def disk_full(self, node: Node) -> int:
        return disk.disk_full(self, node, self.cluster.appendfsync)

    def power_loss(self, rng: random.Random) -> int:
        return disk.power_loss(self, rng, self.cluster.appendfsync)

    def backlog(self) -> int:
        return disk.backlog(self)

    # -- releases (chaos/upgrade.py: a cluster started as the previous release) -------
    def upgrade(self, node: Node, after_stop: Callable[[], None] | None = None) -> int:
        return upgrade.upgrade(self, node, after_stop)

    # -- clocks (chaos/clock.py: nodes under libfaketime) ------------------------------
    def _set_clock(self, node: str, offset: float) -> None:
        """One step of a node's clock, recorded as a ``clock`` event (node,
        offset and step in seconds): the checker knows which nodes' clocks
        stepped forward, and when."""
        clock = self.cluster.clocks[node]
        step = offset - clock.offset
        clock.set(offset)
        self.history.event("clock", node=node, offset=round(offset, 3), step=round(step, 3),
                           node_lead=self.node_lead(node))

    def node_lead(self, name: str) -> float | None:
        """How far ahead of true time the node's own clock is (its TIME), in
        seconds: what the node made of its clock's steps (server/clock.py)."""
        try:
            with self.cluster.node(name).admin(1) as r:
                before = time.time()
                secs, usecs = r.execute_command("TIME")
                after = time.time()
        except Exception:  # noqa: BLE001 - down or paused: not measured
            return None
        return round(int(secs) + int(usecs) / 1e6 - (before + after) / 2, 3)

    def clock_skew(self) -> int:
        """The offsets the nodes started with (ChaosCluster clock_offsets), as a
        fault: a machine's clock is off for the whole run. Healing leaves them:
        setting a clock right is a jump of its own."""
        offsets = {n: c.offset for n, c in self.cluster.clocks.items()}
        leads = {n: self.node_lead(n) for n in offsets}
        return self._start("clock-skew", lambda: None, offsets_s=offsets, node_leads_s=leads)

    def clock_jump(self, node: str, delta: float) -> int:
        """The node's clock (wall and monotonic) jumps ``delta`` seconds, and
        back when the fault stops."""
        base = self.cluster.clocks[node].offset
        self._set_clock(node, base + delta)
        return self._start("clock-jump", lambda: self._set_clock(node, base), node=node,
                           delta_s=delta)

    def clock_strobe(self, node: str, delta: float, period: float) -> int:
        """The node's clock flips ``delta`` seconds away and back every
        ``period`` seconds until the fault stops."""
        base = self.cluster.clocks[node].offset
        strobe = Strobe(self.cluster.clocks[node], base, base + delta, period,
                        lambda old, new: self._set_clock(node, new))
        return self._start("clock-strobe", strobe.stop, node=node, delta_s=delta,
                           period_s=period)


# ------------------------------------------------------------------------------
# The scenarios.

@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    faults: Callable[[Faults, random.Random, float, float], None]
    kind: str = "network"           # the summary's table: network, process, clock, disk,
                                    # power or mixed (chaos/report.py KINDS)
    netns: bool = False             # runs in a network namespace of its own (chaos/netns.py)
    appendonly: bool = False
    appendfsync: str = "everysec"
    replicate: tuple[int, ...] = (1, 2, 3)
    retry0_share: float = 0.1
    # (clock) each node's clock offset in seconds, set before it starts
    skew: Callable[[random.Random, list[str]], dict[str, float]] | None = None
    # the nodes start as the previous release (chaos/previous_release.py)
    previous_release: bool = False


def _split(rng: random.Random, names: list[str]) -> tuple[list[str], list[str]]:
    shuffled = rng.sample(names, len(names))
    minority = len(names) // 2 if len(names) > 2 else 1
    return shuffled[minority:], shuffled[:minority]


def _window(f: Faults, t0: float, seconds: float, start: float, end: float,
            apply: Callable[[], int]) -> None:
    f.sleep_until(start * seconds, t0)
    fault = apply()
    f.sleep_until(end * seconds, t0)
    f.stop(fault)


def majority_minority(f, rng, t0, s):
    majority, minority = _split(rng, f.cluster.names)
    _window(f, t0, s, 0.2, 0.7, lambda: f.partition(majority, minority))


def bridge(f, rng, t0, s):
    names = rng.sample(f.cluster.names, len(f.cluster.names))
    mid = names[0]
    rest = names[1:]
    left, right = rest[: len(rest) // 2], rest[len(rest) // 2:]
    pairs = [(a, b) for a in left for b in right] + [(b, a) for a in left for b in right]
    _window(f, t0, s, 0.2, 0.7, lambda: f._start("bridge", f._cuts(pairs), bridge=mid,
                                                  sides=[left, right]))


def isolated(f, rng, t0, s):
    lone = rng.choice(f.cluster.names)
    others = [n for n in f.cluster.names if n != lone]
    _window(f, t0, s, 0.2, 0.7, lambda: f.partition([lone], others))


def one_way(f, rng, t0, s):
    """One node's messages reach nobody; it still hears everyone."""
    mute = rng.choice(f.cluster.names)
    pairs = [(mute, n) for n in f.cluster.names if n != mute]
    _window(f, t0, s, 0.2, 0.7, lambda: f.one_way(pairs))


def flapping(f, rng, t0, s):
    at = 0.1
    while at < 0.8:
        majority, minority = _split(rng, f.cluster.names)
        length = rng.uniform(0.04, 0.1)
        _window(f, t0, s, at, min(at + length, 0.85), lambda: f.partition(majority, minority))
        at += length + rng.uniform(0.02, 0.06)


def latency(f, rng, t0, s):
    _window(f, t0, s, 0.2, 0.8, lambda: f.latency(rng.choice([50, 100, 200]),
                                                  rng.choice([20, 50])))


def slow_link(f, rng, t0, s):
    node = rng.choice(f.cluster.names)
    _window(f, t0, s, 0.2, 0.8, lambda: f.slow_node(node, rng.choice([4, 16])))


def kill_restart(f, rng, t0, s):
    for start in (0.2, 0.5):
        node = rng.choice(f.cluster.nodes)
        _window(f, t0, s, start, start + 0.15, lambda: f.kill(node))


def pause(f, rng, t0, s):
    node = rng.choice(f.cluster.nodes)
    # longer than cluster-node-timeout, so the others flag it PFAIL/FAIL
    length = max(3 * f.cluster.node_timeout_ms / 1000 / s, 0.2)
    _window(f, t0, s, 0.2, min(0.2 + length, 0.85), lambda: f.pause(node))


def leaving(f, rng, t0, s):
    node = rng.choice(f.cluster.nodes)
    _window(f, t0, s, 0.2, 0.8, lambda: f.leave(node))


def mixed(f, rng, t0, s):
    """Random faults one after another, each for a random stretch."""
    verbs = [
        lambda: f.partition(*_split(rng, f.cluster.names)),
        lambda: f.partition([n := rng.choice(f.cluster.names)],
                            [m for m in f.cluster.names if m != n]),
        lambda: f.one_way(_one_way_pair(rng, f.cluster.names)),
        lambda: f.latency(rng.choice([50, 150]), 30),
        lambda: f.slow_node(rng.choice(f.cluster.names), 8),
        lambda: f.kill(rng.choice(f.cluster.nodes)),
        lambda: f.pause(rng.choice(f.cluster.nodes)),
    ]
    at = 0.1
    while at < 0.75:
        length = rng.uniform(0.05, 0.15)
        _window(f, t0, s, at, min(at + length, 0.85), rng.choice(verbs))
        at += length + rng.uniform(0.02, 0.05)


def packet_loss(f, rng, t0, s):
    """Loss rates that change over the run, on a few links, on every link of
    one node, or on every bus connection of the cluster."""
    names = f.cluster.names
    pairs = [(a, b) for a in names for b in names if a != b]
    at = 0.1
    while at < 0.8:
        probability = rng.choice([0.02, 0.05, 0.1, 0.2, 0.35])
        where = rng.choice(["links", "node", "all"])
        if where == "links":
            target = {"links": rng.sample(pairs, rng.randint(1, min(3, len(pairs))))}
        else:
            target = {"nodes": [rng.choice(names)] if where == "node" else names}
        length = rng.uniform(0.06, 0.12)
        _window(f, t0, s, at, min(at + length, 0.85),
                lambda: f.packet_loss(probability, **target))
        at += length + rng.uniform(0.0, 0.03)


def _one_way_pair(rng: random.Random, names: list[str]) -> list[tuple[str, str]]:
    a, b = rng.sample(names, 2)
    return [(a, b)]


def _rounds(f: Faults, t0: float, s: float, n: int, apply: Callable[[int], int]) -> None:
    """``n`` windows spread over 15%..80% of the run, ``apply(i)`` in each."""
    step = 0.65 / n
    for i in range(n):
        start = 0.15 + i * step
        _window(f, t0, s, start, start + step / 2, lambda: apply(i))


def aof_truncate(f, rng, t0, s):
    """A node's AOF cut while it is down, once per 30 s (twice at least): it
    repairs the torn tail itself, or, started with aof-load-truncated no every
    other time, refuses naming the offset and the operator fixes the file."""
    _rounds(f, t0, s, max(2, int(s // 30)), lambda i: f.aof_truncate(
        rng.choice(f.cluster.nodes), rng, load_truncated=i % 2 == 0))


def aof_bitflip(f, rng, t0, s):
    """A stopped node's AOF damaged (a record twice, a bit flipped), once per 30 s."""
    _rounds(f, t0, s, max(1, int(s // 30)),
            lambda i: f.aof_bitflip(rng.choice(f.cluster.nodes), rng))


def disk_full(f, rng, t0, s):
    node = rng.choice(f.cluster.nodes)
    _window(f, t0, s, 0.2, 0.6, lambda: f.disk_full(node))


def power_loss(f, rng, t0, s):
    """Deliveries paused from 30% of the run, every node's power cut at 50%
    and back at 55%, deliveries resumed."""
    f.sleep_until(0.3 * s, t0)
    paused = f.backlog()
    _window(f, t0, s, 0.5, 0.55, lambda: f.power_loss(rng))
    f.stop(paused)


def rolling_upgrade(f, rng, t0, s):
    """The nodes upgraded from the previous release one at a time, in a
    seeded order, at 20%, 45% and 70% of the run (spread over 15%..75% for
    another size); in each mixed phase a REPLICATE 3 probe added on a node of
    each release, its copies counted, and again while the next node is down;
    the probes acked at the end."""
    f.history.event("upgrade", what="releases", nodes=upgrade.releases(f))
    order = rng.sample(f.cluster.nodes, len(f.cluster.nodes))
    probes = upgrade.Probes(f)
    n = len(order)
    at = [0.2, 0.45, 0.7] if n == 3 else [0.15 + 0.6 * i / max(n - 1, 1) for i in range(n)]
    for i, node in enumerate(order):
        f.sleep_until(at[i] * s, t0)
        f.upgrade(node, after_stop=probes.check_held if probes.ids else None)
        if len(set(upgrade.releases(f).values())) > 1:
            probes.add()
    f.sleep_until(0.85 * s, t0)
    probes.ack_all()
    upgrade.malformed(f)


# -- clocks (issue 25) --------------------------------------------------------------
def _probe(f: Faults, rng: random.Random, s: float) -> TtlProbe:
    """TTL probes (chaos/clock.py) for the run: TTLs from 2 s to a quarter of it."""
    probe = TtlProbe(f.cluster.nodes, f.history, rng.randrange(1 << 32),
                     ttl=(2, max(4, int(s / 4))))
    probe.start()
    return probe


def _skew(rng: random.Random, names: list[str]) -> dict[str, float]:
    """Seconds to minutes, ahead and behind: one node ahead, one behind, the
    others anywhere in between."""
    ahead, behind = rng.choice([5, 45, 150]), -rng.choice([5, 45, 150])
    rest = [rng.choice([-90, -20, -2, 0, 2, 20, 90]) for _ in names[2:]]
    offsets = [ahead, behind] + rest
    rng.shuffle(offsets)
    return dict(zip(names, map(float, offsets)))


def clock_skew(f, rng, t0, s):
    """Clocks off from the start, for the whole run (ChaosCluster clock_offsets)."""
    probe = _probe(f, rng, s)
    f.clock_skew()
    f.sleep_until(0.85 * s, t0)
    probe.stop()


def clock_jump(f, rng, t0, s):
    """One node at a time: its clock jumps forward or back, and back again."""
    probe = _probe(f, rng, s)
    at = 0.1
    while at < 0.75:
        node = rng.choice(f.cluster.names)
        delta = rng.choice([-1, 1]) * rng.choice([3.0, 30.0, 120.0])
        length = rng.uniform(0.1, 0.25)
        _window(f, t0, s, at, min(at + length, 0.85), lambda: f.clock_jump(node, delta))
        at += length + rng.uniform(0.02, 0.05)
    probe.stop()


def clock_strobe(f, rng, t0, s):
    """One node's clock flips back and forth, seconds to a minute, several
    times a second."""
    probe = _probe(f, rng, s)
    node = rng.choice(f.cluster.names)
    delta = rng.choice([-1, 1]) * rng.choice([2.0, 10.0, 60.0])
    period = rng.choice([0.1, 0.25, 0.5])
    _window(f, t0, s, 0.15, 0.8, lambda: f.clock_strobe(node, delta, period))
    probe.stop()


def cluster_options(scenario: Scenario, rng: random.Random, size: int) -> dict:
    """What ChaosCluster needs for the scenario: the release its nodes start
    as; for the clock scenarios, its nodes under libfaketime, their clocks set
    off before they start. Raises previous_release.Unavailable when the
    scenario needs the previous release and it cannot be had here."""
    if scenario.previous_release:
        return {"release": previous_release.previous_release()}
    if scenario.kind != "clock":
        return {}
    names = [f"n{i + 1}" for i in range(size)]
    return {"faketime": True,
            "clock_offsets": scenario.skew(rng, names) if scenario.skew else {}}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("majority-minority", "the cluster split in a majority and a minority",
             majority_minority),
    Scenario("bridge", "two halves that only one node (the bridge) sees both of", bridge),
    Scenario("isolated", "one node cut off from all others", isolated),
    Scenario("one-way", "one node's messages reach nobody; it hears everyone", one_way),
    Scenario("flapping", "majority/minority splits that come and go", flapping),
    Scenario("latency", "latency and jitter on every link", latency),
    Scenario("slow-link", "every link of one node down to a few KB/s", slow_link),
    Scenario("kill-aof-always", "kill -9 and restart with appendfsync always",
             kill_restart, kind="process", appendonly=True, appendfsync="always"),
    # everysec may lose the last second of a killed node's writes: only jobs
    # with another copy are promised to survive it (docs/operations.md, Persistence), so
    # no REPLICATE 1 (nor RETRY 0, which is REPLICATE 1) jobs here.
    Scenario("kill-aof-everysec", "kill -9 and restart with appendfsync everysec",
             kill_restart, kind="process", appendonly=True, appendfsync="everysec",
             replicate=(2, 3), retry0_share=0.0),
    Scenario("pause", "SIGSTOP longer than cluster-node-timeout, then SIGCONT", pause,
             kind="process"),
    Scenario("leaving", "a node leaving the cluster under load", leaving, kind="process"),
    Scenario("packet-loss", "random packet loss (iptables statistic) on bus links, "
             "at rates that change over the run", packet_loss, netns=True),
    Scenario("mixed", "random faults of every kind, one after another", mixed, kind="mixed",
             appendonly=True, appendfsync="always"),
    Scenario("clock-skew", "node clocks off by seconds to minutes, ahead and behind",
             clock_skew, kind="clock", skew=_skew),
    Scenario("clock-jump", "one node's clock at a time jumps forward or back, and back",
             clock_jump, kind="clock"),
    Scenario("clock-strobe", "one node's clock flips back and forth several times a second",
             clock_strobe, kind="clock"),
)}
# Disk and power faults (issue 25; chaos/disk.py). One node's damaged AOF costs
# its copies: only jobs with another copy are promised to survive it, so no
# REPLICATE 1 (nor RETRY 0) jobs in aof-truncate and aof-bitflip. A power loss
# costs what the policy allows (chaos/disk.py POWER_LOSS_WINDOW, the checker's
# power_loss figures).
SCENARIOS.update({s.name: s for s in (
    Scenario("aof-truncate", "a stopped node's AOF cut at a random point, then restarted",
             aof_truncate, appendonly=True, replicate=(2, 3), retry0_share=0.0, kind="disk"),
    Scenario("aof-bitflip", "a bit flipped and a record duplicated in a stopped node's AOF",
             aof_bitflip, appendonly=True, replicate=(2, 3), retry0_share=0.0, kind="disk"),
    Scenario("disk-full", "a node's AOF unwritable under everysec (-MISCONF), then space back",
             disk_full, appendonly=True, appendfsync="everysec", kind="disk"),
    Scenario("disk-full-always", "a node's AOF unwritable under always (it exits), then "
             "space back", disk_full, appendonly=True, appendfsync="always", kind="disk"),
    Scenario("power-loss", "every node loses power at once (appendfsync always)", power_loss,
             appendonly=True, appendfsync="always", kind="power"),
    Scenario("power-loss-everysec", "every node loses power at once (appendfsync everysec)",
             power_loss, appendonly=True, appendfsync="everysec", kind="power"),
    Scenario("power-loss-no", "every node loses power at once (appendfsync no)", power_loss,
             appendonly=True, appendfsync="no", kind="power"),
)})
# A rolling upgrade (issue 37; chaos/upgrade.py): the previous release upgraded
# to this one a node at a time, on the same AOFs, under REPLICATE 3 adds.
SCENARIOS["rolling-upgrade"] = Scenario(
    "rolling-upgrade", "the previous release upgraded to this one a node at a time, "
    "under REPLICATE 3 adds", rolling_upgrade, kind="process", appendonly=True,
    appendfsync="everysec", replicate=(3,), retry0_share=0.0, previous_release=True)
