"""A cluster of real nodes whose bus links all pass through fault proxies.

One proxy per directed pair of nodes: ``n1-n2`` carries what n1 dials to reach
n2 (n1's outbound link; n2 answers on the same connection). Each node is told,
with ``cluster-bus-route`` (ext), to dial its peers through those proxies; the
addresses it announces stay real. The proxies live in a fault proxy speaking
Toxiproxy's API: ours (``python -m chaos.proxy``, started here) or a real
Toxiproxy server (``toxiproxy_url``), driven through toxiproxy-python.

Everything is awaited on a condition with a deadline: a node is up when it
answers PING, the cluster is formed when every node's HELLO lists every node.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import redis

from chaos.clock import FakeClock
from chaos.previous_release import Release
from chaos.toxiproxy_client import ChaosProxy, ChaosToxiproxy
from disquette.testing import ServerProcess, free_port

HOST = "127.0.0.1"
THIS_RELEASE = "this"       # a node's release: this checkout's
# server/aof.py's test hook (SyncedSizeNote; named again here: the chaos suite
# imports no node code): the AOF's size at its last fsync, kept beside it.
SYNCED_SIZE_ENV = "DISQUETTE_TEST_SYNCED_SIZE"
SYNCED_SUFFIX = ".synced"


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def child_env() -> dict[str, str]:
    """This environment, with the checkout importable from any directory."""
    root = str(Path(__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.05) -> Any:
    """Poll ``predicate`` (exceptions count as "not yet") until it is truthy."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - "not yet", kept for the message
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}"
                               + (f" (last error: {last})" if last else ""))
        time.sleep(interval)


class Node(ServerProcess):
    """One ``python -m server`` process (disquette.testing's), restartable on
    the same port and dir, with a name and SIGSTOP/SIGCONT (``pause``)."""

    def __init__(self, name: str, port: int, workdir: Path, args: list[str]) -> None:
        super().__init__([sys.executable, "-m", "server"], args=args, port=port, dir=workdir)
        self.name = name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.paused = False
        self.release = THIS_RELEASE       # which release it runs (run_as)
        self._release_env: dict[str, str] = {}

    def run_as(self, release: Release | None) -> None:
        """Start as ``release`` from the next start on (chaos/previous_release.py;
        None: this one, from this checkout)."""
        for key in self._release_env:
            self.env.pop(key, None)
        if release is None:
            self.command = [sys.executable, "-m", "server"]
            self._release_env = {}
            self.release = THIS_RELEASE
        else:
            self.command = release.server_command()
            self._release_env = release.env()
            self.release = release.short
        self.env.update(self._release_env)

    def environment(self) -> dict[str, str]:
        return {**child_env(), **self.env}

    def launch(self) -> None:
        super().launch()
        self.paused = False

    def admin(self, timeout: float = 5.0) -> redis.Redis:
        return redis.Redis(HOST, self.port, socket_timeout=timeout, socket_connect_timeout=timeout,
                           decode_responses=True)

    def kill(self) -> int | None:
        """kill -9, as a crash."""
        self.resume()
        return super().kill()

    def pause(self) -> None:
        if self.proc is not None and self.is_running():
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.is_running() and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 10.0) -> int | None:
        self.resume()
        return super().stop(timeout)


class ProxyServer:
    """Our fault proxy as a subprocess (``python -m chaos.proxy --port 0``)."""

    def __init__(self, seed: int | None, log_path: Path) -> None:
        argv = [sys.executable, "-m", "chaos.proxy", "--host", HOST, "--port", "0",
                "--log-level", "WARNING"]
        if seed is not None:
            argv += ["--seed", str(seed)]
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, env=child_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"http://([^\s]+):(\d+)", line)
        if m is None:
            self.stop()
            raise RuntimeError(f"the fault proxy did not start: {line!r}")
        self.host, self.port = m.group(1), int(m.group(2))

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


class ChaosCluster:
    """N nodes, a proxy per directed pair, formed and ready."""

    def __init__(self, size: int, *, workdir: str | Path | None = None,
                 toxiproxy_url: str | None = None, node_timeout_ms: int = 2000,
                 appendonly: bool = False, appendfsync: str = "everysec",
                 seed: int | None = None, extra_args: Iterable[str] = (),
                 faketime: bool = False, clock_offsets: dict[str, float] | None = None,
                 release: Release | None = None) -> None:
        if size < 2:
            raise ValueError("a chaos cluster needs at least 2 nodes")
        self.size = size
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="disquette-chaos-")).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.toxiproxy_url = toxiproxy_url
        self.node_timeout_ms = node_timeout_ms
        self.appendonly, self.appendfsync = appendonly, appendfsync
        self.seed = seed
        self.extra_args = list(extra_args)
        self.nodes: list[Node] = []
        self.links: dict[tuple[str, str], ChaosProxy] = {}
        self.proxy_server: ProxyServer | None = None
        self.api: ChaosToxiproxy | None = None
        # Clock faults (chaos/clock.py): every node under libfaketime, its clock
        # set off by clock_offsets (seconds, by node name) before it starts.
        self.faketime = faketime
        self.clock_offsets = dict(clock_offsets or {})
        self.clocks: dict[str, FakeClock] = {}
        # The release the nodes start as (None: this one; a rolling upgrade
        # starts from the previous one, chaos/upgrade.py).
        self.release = release

    # -- start and stop --------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "ChaosCluster":
        try:
            self._start_proxies()
            self._start_nodes()
            self.wait_formed(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_proxies(self) -> None:
        if self.toxiproxy_url:
            m = re.fullmatch(r"(?:https?://)?([^:/]+):(\d+)/?", self.toxiproxy_url)
            if m is None:
                raise ValueError(f"--toxiproxy: expected http://host:port, got {self.toxiproxy_url}")
            host, port = m.group(1), int(m.group(2))
        else:
            self.proxy_server = ProxyServer(self.seed, self.dir / "proxy.log")
            host, port = self.proxy_server.host, self.proxy_server.port
        self.api = ChaosToxiproxy(host, port)
        self.api.reset()
        ports = [free_port() for _ in range(self.size)]
        names = [f"n{i + 1}" for i in range(self.size)]
        self.nodes = [Node(name, port, self.dir / name, []) for name, port in zip(names, ports)]
        wanted = [{"name": f"{a.name}-{b.name}", "listen": f"{HOST}:0",
                   "upstream": f"{HOST}:{b.bus_port}", "enabled": True}
                  for a in self.nodes for b in self.nodes if a is not b]
        for proxy in self.api.populate_server(wanted):
            a, b = proxy.name.split("-")
            self.links[(a, b)] = proxy

    def _node_args(self, node: Node) -> list[str]:
        routes = ",".join(f"{HOST}:{peer.bus_port}={self.links[(node.name, peer.name)].listen}"
                          for peer in self.nodes if peer is not node)
        seeds = ",".join(peer.addr for peer in self.nodes if peer is not node)
        args = ["--cluster-bus-route", routes, "--cluster-seeds", seeds,
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync, "--loglevel", "notice"]
        return args + self.extra_args

    def _start_nodes(self) -> None:
        for node in self.nodes:
            node.args = self._node_args(node)
            node.run_as(self.release)
            if self.appendonly:
                # server/aof.py's test hook: the AOF's size at its last fsync
                # (the power-loss fault, chaos/disk.py, cuts the file there).
                node.env[SYNCED_SIZE_ENV] = "1"
            if self.faketime:
                clock = FakeClock(node.dir / "faketime", self.clock_offsets.get(node.name, 0.0))
                self.clocks[node.name] = clock
                node.env.update(clock.env())
            node.start()

    def wait_formed(self, timeout: float = 30.0, nodes: list[Node] | None = None) -> None:
        """Until every (given, running) node's HELLO lists every node of the cluster."""
        def formed() -> bool:
            for node in nodes or self.nodes:
                with node.admin(1) as r:
                    hello = r.execute_command("HELLO")
                if len(hello) - 2 < self.size:
                    return False
            return True
        wait_for(formed, timeout, f"the {self.size}-node cluster to form")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.proxy_server is not None:
            self.proxy_server.stop()
            self.proxy_server = None
        elif self.api is not None:
            try:
                for proxy in self.links.values():
                    proxy.destroy()
            except Exception:  # noqa: BLE001 - best effort on someone else's server
                pass
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ChaosCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lookups -----------------------------------------------------------------
    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def link(self, src: str, dst: str) -> ChaosProxy:
        """The proxy carrying what ``src`` dials to reach ``dst``."""
        return self.links[(src, dst)]

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]
