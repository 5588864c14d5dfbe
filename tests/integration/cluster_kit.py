"""Helpers for the multi-process cluster tests (test_cluster_*.py).

A module shares one cluster of real nodes (starting and joining five processes
costs a couple of seconds); ``Cluster.heal()`` puts it back in shape between
tests: dead nodes restarted on their port and dir (they rejoin from nodes.conf),
stopped ones continued, LEAVING cleared, everyone reachable, jobs flushed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from typing import Any, Iterator

import redis

from tests.conftest import _FACTORIES
from tests.harness import WAIT_TIMEOUT, NodeFactory, NodeProcess, RawConn, join, wait_until

NODE_TIMEOUT_MS = 1500          # cluster-node-timeout: PFAIL/FAIL within seconds
JOB_ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


# ----------------------------------------------------------------- per node

def client(n: NodeProcess) -> redis.Redis:
    """A redis-py client (RESP3) cached per node process."""
    cached = getattr(n, "_kit_client", None)
    if cached is None or cached[0] != n.pid:
        cached = (n.pid, n.client(protocol=3))
        n._kit_client = cached  # type: ignore[attr-defined]
    return cached[1]


def cmd(n: NodeProcess, *args: Any) -> Any:
    return client(n).execute_command(*args)


def raw_text(n: NodeProcess, *args: Any) -> str:
    """A bulk-string reply (CLUSTER NODES/INFO), byte-exact, as text."""
    with RawConn(n.host, n.port) as r:
        reply = r.call(*args)
    assert reply[:1] in (b"$", b"="), reply
    body = reply.split(b"\r\n", 1)[1][:-2]
    if reply[:1] == b"=":
        body = body[4:]
    return body.decode()


def myid(n: NodeProcess) -> str:
    return cmd(n, "CLUSTER", "MYID").decode()


def nodes_table(n: NodeProcess) -> dict[str, dict]:
    """CLUSTER NODES as {id: {addr, flags (set), ping_sent, pong_recv, link}}."""
    out = {}
    for line in raw_text(n, "CLUSTER", "NODES").splitlines():
        nid, addr, flags, ping_sent, pong_recv, link = line.split(" ")
        out[nid] = {"addr": addr, "flags": set(flags.split(",")),
                    "ping_sent": int(ping_sent), "pong_recv": int(pong_recv), "link": link}
    return out


def cluster_info(n: NodeProcess) -> dict[str, str]:
    return dict(line.split(":", 1) for line in raw_text(n, "CLUSTER", "INFO").splitlines()
                if ":" in line)


def hello(n: NodeProcess) -> tuple[str, dict[str, tuple[str, int, int]]]:
    """HELLO -> (my id, {id: (ip, port, priority)})."""
    reply = cmd(n, "HELLO")
    assert reply[0] == 1, reply
    return reply[1].decode(), {e[0].decode(): (e[1].decode(), int(e[2]), int(e[3]))
                               for e in reply[2:]}


def show(n: NodeProcess, jid: bytes) -> dict | None:
    reply = cmd(n, "SHOW", jid)
    if reply is None:
        return None
    assert isinstance(reply, list) and len(reply) == 30, reply
    d = {reply[i].decode(): reply[i + 1] for i in range(0, 30, 2)}
    for k in ("nodes-delivered", "nodes-confirmed"):
        d[k] = {x.decode() for x in (d[k] or [])}
    d["state"] = d["state"].decode()
    return d


def addjob(n: NodeProcess, queue: str, body: str, timeout_ms: int = 5000, *opts: Any) -> bytes:
    jid = cmd(n, "ADDJOB", queue, body, timeout_ms, *opts)
    assert JOB_ID_RE.match(jid), jid
    return jid


def qlen(n: NodeProcess, queue: str) -> int:
    return cmd(n, "QLEN", queue)


def stop(n: NodeProcess) -> None:
    """SIGSTOP: the node is down for its peers but keeps its memory."""
    os.kill(n.pid, signal.SIGSTOP)


def cont(n: NodeProcess) -> None:
    if n.is_alive():
        os.kill(n.pid, signal.SIGCONT)


# ----------------------------------------------------------------- a cluster

class Cluster:
    def __init__(self, factory: NodeFactory, size: int, chain: bool = False, **directives: Any):
        self.factory = factory
        self.directives = {"cluster_node_timeout": NODE_TIMEOUT_MS, **directives}
        self.nodes = [factory(**self.directives) for _ in range(size)]
        join(self.nodes, chain=chain)   # chain: each meets the previous one
        self.wait_healthy()
        self.ids = [myid(n) for n in self.nodes]

    def __getitem__(self, i: int) -> NodeProcess:
        return self.nodes[i]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeProcess]:
        return iter(self.nodes)

    def index(self, node_id: str | bytes) -> int:
        if isinstance(node_id, bytes):
            node_id = node_id.decode()
        return self.ids.index(node_id)

    def by_id(self, node_id: str | bytes) -> NodeProcess:
        return self.nodes[self.index(node_id)]

    def healthy(self) -> bool:
        """Every node knows exactly the cluster's nodes, none flagged, all
        connected, every other node reachable."""
        want = len(self.nodes)
        for n in self.nodes:
            table = nodes_table(n)
            if len(table) != want:
                return False
            for row in table.values():
                if row["link"] != "connected" or row["flags"] - {"myself", "noflags"}:
                    return False
            info = cluster_info(n)
            if info["cluster_known_nodes"] != str(want) or \
                    info["cluster_reachable_nodes"] != str(want - 1):
                return False
        return True

    def wait_healthy(self, timeout: float = WAIT_TIMEOUT) -> None:
        def describe() -> str:
            parts = []
            for n in self.nodes:
                try:
                    parts.append(f"{n.addr}:\n{raw_text(n, 'CLUSTER', 'NODES')}")
                except Exception as exc:
                    parts.append(f"{n.addr}: {exc!r}")
            return "\n".join(parts)
        wait_until(self.healthy, timeout=timeout, interval=0.05, message=describe,
                   ignore=(OSError, redis.RedisError, AssertionError))

    def heal(self) -> None:
        """Back to a healthy, empty cluster after whatever a test did."""
        for n in self.nodes:
            if n.is_alive():
                cont(n)
            else:
                n.start()
        for n in self.nodes:
            with contextlib.suppress(redis.RedisError):
                cmd(n, "CLUSTER", "LEAVING", "no")
        self.wait_healthy()
        self.flush()

    def flush(self) -> None:
        for n in self.nodes:
            assert cmd(n, "DEBUG", "FLUSHALL") == b"OK"

    def holders(self, jid: bytes) -> list[int]:
        """Indexes of the live nodes that hold jid (SHOW not nil)."""
        return [i for i, n in enumerate(self.nodes)
                if n.is_alive() and show(n, jid) is not None]

    def gone_everywhere(self, jid: bytes, nodes: list[int] | None = None) -> bool:
        idx = range(len(self.nodes)) if nodes is None else nodes
        return all(show(self.nodes[i], jid) is None for i in idx)


def healed(request, factory: NodeFactory, cluster: "Cluster") -> Iterator["Cluster"]:
    """Body of a test's cluster fixture (``yield from healed(...)``): the
    module's cluster healed and flushed, its logs attached to a failure report,
    every node continued afterwards."""
    request.node.stash.setdefault(_FACTORIES, []).append(factory)
    cluster.heal()
    yield cluster
    for n in cluster:
        cont(n)


def wait(pred, timeout: float = WAIT_TIMEOUT, message: Any = None) -> Any:
    return wait_until(pred, timeout=timeout, interval=0.02, message=message,
                      ignore=(OSError, redis.ConnectionError, redis.TimeoutError))


def elapsed_ms(t0: float) -> float:
    return (time.monotonic() - t0) * 1000
