"""Which node a client talks to: Disque's client guidelines, with no I/O.

The clients feed it what they learn (HELLO replies, connection failures,
``-LEAVING``, the ids of the jobs a consumer receives) with the current
monotonic time, and read ``current``: the node to send the next command to.

* Start from the listed nodes, in the order given (``shuffle`` to randomise).
* HELLO on the current node lists every node with a priority (1 ok, 5 no link,
  10 PFAIL, 100 FAIL or leaving): the client prefers the lowest, and stays
  where it is while its node is among the best.
* A node that failed a connection, or answered ``-LEAVING``/``-LOADING``, is
  avoided for ``retry_down_after`` seconds.
* Consumers: every job id carries the first 8 hex chars of the id of the node
  that created it.  After ``switch_min_jobs`` received jobs, if one other node
  produced a strict majority of them, the client moves there (fewer federation
  hops).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterable, NamedTuple, Sequence
from urllib.parse import unquote, urlsplit

DEFAULT_PORT = 7711
# The creating node's id prefix in a job id (D-<prefix>-...), taken in C: the
# consumer counts it for every job it receives.
_ORIGIN = itemgetter(slice(2, 10))
DOWN_PRIORITY = 1000  # below every HELLO priority (100 is FAIL/leaving)


class NodeInfo(NamedTuple):
    """One node of a HELLO reply."""

    id: str
    host: str
    port: int
    priority: int

    @property
    def addr(self) -> str:
        return format_addr(self.host, self.port)


class Hello(NamedTuple):
    """The Disque HELLO reply: format version, the answering node's id, every node."""

    version: int
    node_id: str
    nodes: list[NodeInfo]


def format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"``, ``"[::1]:7711"`` or ``"host"`` (port 7711)."""
    addr = addr.strip()
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    if addr.count(":") == 1:
        host, port = addr.split(":")
        return host, int(port)
    return addr, DEFAULT_PORT


@dataclass
class NodeSpec:
    """What ``Client(nodes)`` was given: seed addresses and URL options."""

    addrs: list[str]
    username: str | None = None
    password: str | None = None
    ssl: bool = False


def parse_nodes(nodes: Any) -> NodeSpec:
    """``"disque://[user:pass@]h:p,h:p"`` (``disques://`` for TLS), ``"h:p,h:p"``,
    or a list of ``"h:p"`` / ``(host, port)``."""
    if nodes is None:
        nodes = f"127.0.0.1:{DEFAULT_PORT}"
    if isinstance(nodes, str):
        spec = NodeSpec([])
        text = nodes.strip()
        if "://" in text:
            url = urlsplit(text)
            if url.scheme not in ("disque", "disques"):
                raise ValueError(f"unknown scheme {url.scheme!r} (use disque:// or disques://)")
            spec.ssl = url.scheme == "disques"
            userinfo, _, hosts = url.netloc.rpartition("@")
            if userinfo:
                user, _, password = userinfo.partition(":")
                spec.username = unquote(user) or None
                spec.password = unquote(password) or None
            text = hosts
        spec.addrs = [format_addr(*parse_addr(a)) for a in text.split(",") if a.strip()]
    else:
        spec = NodeSpec([format_addr(*(parse_addr(n) if isinstance(n, str) else n))
                         for n in nodes])
    if not spec.addrs:
        raise ValueError("no node address given")
    return spec


def parse_hello(reply: Any) -> Hello:
    """``[1, my-id, [id, ip, port, priority]...]`` (bulk or int fields)."""
    def s(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    nodes = [NodeInfo(s(n[0]), s(n[1]), int(n[2]), int(n[3])) for n in reply[2:]]
    return Hello(int(reply[0]), s(reply[1]), nodes)


@dataclass
class _Node:
    addr: str
    seed: bool
    order: int
    id: str | None = None
    priority: int = 1
    down_until: float = 0.0


class Topology:
    """The client's view of the cluster (see the module doc)."""

    def __init__(self, seeds: Iterable[str], *, shuffle: bool = False,
                 retry_down_after: float = 5.0, refresh_interval: float = 60.0,
                 switch_min_jobs: int = 100, follow_producers: bool = True,
                 rng: random.Random | None = None) -> None:
        seeds = list(dict.fromkeys(seeds))
        if shuffle:
            (rng or random.Random()).shuffle(seeds)
        self._nodes: dict[str, _Node] = {a: _Node(a, True, i) for i, a in enumerate(seeds)}
        self._order = len(seeds)
        self.retry_down_after = retry_down_after
        self.refresh_interval = refresh_interval
        self.switch_min_jobs = switch_min_jobs
        self.follow_producers = follow_producers
        self.next_refresh = 0.0       # refresh at the first command
        self._origins: Counter[str] = Counter()
        self.current: str = seeds[0]  # the first seed until something better is known
        self.switches = 0             # times the consumer rule moved the client

    # -- what the client asks
    def addrs(self) -> list[str]:
        """Every known node, best first."""
        return [n.addr for n in sorted(self._nodes.values(), key=self._rank_key(0.0))]

    def node_id(self, addr: str) -> str | None:
        n = self._nodes.get(addr)
        return n.id if n else None

    def addr_of_prefix(self, prefix: str) -> str | None:
        for n in self._nodes.values():
            if n.id and n.id.startswith(prefix):
                return n.addr
        return None

    def refresh_due(self, now: float) -> bool:
        return now >= self.next_refresh

    # -- what the client reports
    def hello(self, addr: str, hello: Hello, now: float) -> None:
        """A HELLO reply from ``addr``: learn the nodes, their ids and priorities."""
        me = self._nodes.get(addr)
        if me is None:
            me = self._add(addr, seed=False)
        me.id = hello.node_id
        me.down_until = 0.0
        listed: set[str] = set()
        for info in hello.nodes:
            node = me if info.id == me.id else self._by_id(info.id) or self._nodes.get(info.addr)
            if node is None:
                node = self._add(info.addr, seed=False)
            node.id = info.id
            node.priority = info.priority
            listed.add(node.addr)
        for addr_, n in list(self._nodes.items()):
            if not n.seed and addr_ not in listed:
                del self._nodes[addr_]  # forgotten by the cluster
            elif n.id == me.id and n is not me and not n.seed:
                del self._nodes[addr_]  # the same node under another address
        self.next_refresh = now + self.refresh_interval
        self._choose(now)

    def failed(self, addr: str, now: float, priority: int | None = None) -> None:
        """``addr`` failed a connection (or said LEAVING/LOADING: ``priority``)."""
        n = self._nodes.get(addr)
        if n is None:
            return
        n.down_until = now + self.retry_down_after
        if priority is not None:
            n.priority = max(n.priority, priority)
        if addr == self.current:
            self.next_refresh = 0.0  # learn the cluster again from the next node
        self._choose(now)

    def observe_jobs(self, job_ids: Sequence[str], now: float) -> str | None:
        """Count where received jobs were created; return the address the
        client just moved to, if the consumer rule moved it."""
        if not self.follow_producers or not job_ids:
            return None
        head = job_ids[0][:10]  # "D-" and the prefix of the node that made it
        if len(head) == 10 and "\n".join(job_ids).count("\n" + head) == len(job_ids) - 1:
            # One producer made the whole batch (the usual case): counted at
            # once, with one search of the joined ids instead of a count each.
            self._origins[_ORIGIN(head)] += len(job_ids)
        else:
            self._origins.update(map(_ORIGIN, job_ids))
        total = sum(self._origins.values())
        if total < self.switch_min_jobs:
            return None
        prefix, count = self._origins.most_common(1)[0]
        self._origins.clear()
        target = self.addr_of_prefix(prefix)
        if target is None:
            self.next_refresh = 0.0  # a node we do not know yet produces our jobs
            return None
        if target == self.current or count * 2 <= total:
            return None
        key = self._rank_key(now)
        if key(self._nodes[target])[0] > key(self._nodes[self.current])[0]:
            return None  # it is worse off than where we are
        self.current = target
        self.switches += 1
        return target

    # -- internals
    def _add(self, addr: str, seed: bool) -> _Node:
        node = self._nodes[addr] = _Node(addr, seed, self._order)
        self._order += 1
        return node

    def _by_id(self, node_id: str) -> _Node | None:
        for n in self._nodes.values():
            if n.id == node_id:
                return n
        return None

    @staticmethod
    def _rank_key(now: float):
        def key(n: _Node) -> tuple[int, float, int]:
            down = n.down_until > now
            return (DOWN_PRIORITY if down else n.priority, n.down_until if down else 0.0, n.order)
        return key

    def _choose(self, now: float) -> None:
        key = self._rank_key(now)
        best = min(self._nodes.values(), key=key)
        cur = self._nodes.get(self.current)
        if cur is None or key(cur)[0] > key(best)[0]:
            self.current = best.addr
