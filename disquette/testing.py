"""Real nodes for your tests: a Disquette node, or a cluster of them, as
subprocesses on free loopback ports, ready when they answer, gone (with their
data dirs) once closed, as testcontainers and pytest-redis do for their servers.

The pytest plugin (disquette/pytest_plugin.py) hands them out as fixtures;
they also work alone::

    with DisquetteCluster(3) as cluster:
        cluster.client.add_job("emails", {"to": 42})

A node runs ``python -m server`` by default (the server installed beside this
SDK); ``command`` runs another one (``["disquette-server"]``, or Disque's own
``disque-server``: the nodes are driven only with Disque's commands). The SDK
imports nothing of the server: the node is a process, as in production.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Self, Sequence

import redis

from .aio import AsyncClient
from .client import Client
from .topology import format_addr, parse_hello

HOST = "127.0.0.1"
BUS_OFFSET = 10000          # a node's cluster bus listens on port + 10000
START_TIMEOUT = 60.0        # a guard against a hang, far above a loaded machine's start
LOG_NAME = "node.log"

# Client ports from 10000 to 21999 keep the bus ports (+10000) under 32768:
# outside Linux's ephemeral range, where outgoing connections (this test run's
# and other processes') take their local ports and could take a node's first.
PORT_RANGE = (10000, 22000)
_handed_out: set[int] = set()
_ports = random.Random()


def can_bind(port: int, host: str = HOST) -> bool:
    """Whether a listener could bind ``host:port`` now."""
    with socket.socket() as s:
        # As the node's listener does: a port in TIME_WAIT is still usable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, bus_offset: int = BUS_OFFSET) -> int:
    """A port free now whose bus port (+10000; ``bus_offset=0``: none) is
    free too, never handed out twice by this process.  Another process may
    still take it before the node binds: the node then fails to start and is
    started again on another port."""
    for _ in range(1000):
        port = _ports.randrange(*PORT_RANGE)
        if port not in _handed_out and can_bind(port, host) and (
                not bus_offset or can_bind(port + bus_offset, host)):
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port pair (port, port + 10000) found")


def directive_args(config: Iterable[str] = (), directives: Mapping[str, Any] | None = None
                   ) -> list[str]:
    """Config-file lines and keyword directives as command-line options:
    ``["appendonly yes"]`` and ``cluster_node_timeout=2000`` ->
    ``["--appendonly", "yes", "--cluster-node-timeout", "2000"]`` (True/False
    as yes/no, a list as several arguments)."""
    out: list[str] = []
    for line in config:
        words = shlex.split(line)
        if words:
            out += ["--" + words[0].removeprefix("--"), *words[1:]]
    for key, value in (directives or {}).items():
        out.append("--" + key.replace("_", "-"))
        values = value if isinstance(value, (list, tuple)) else [value]
        out += ["yes" if v is True else "no" if v is False else str(v) for v in values]
    return out


def default_command() -> list[str]:
    """The server installed with this SDK, run by this interpreter."""
    return [sys.executable, "-m", "server"]


def _wait(predicate: Callable[[], Any], deadline: float, what: Callable[[], str]) -> Any:
    """Poll ``predicate`` until it returns something truthy; the pause grows
    from 10 ms to 100 ms (a start takes a fraction of a second, a loaded
    machine's much more)."""
    pause = 0.01
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise NodeStartError(what())
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)


class NodeStartError(RuntimeError):
    """A node did not start, or a cluster did not form: the message holds why
    (and the tail of the node's log)."""


class _Clients:
    """The clients of a node or a cluster (``seeds()``: its addresses)."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._clients: list[Client] = []

    def seeds(self) -> list[str]:
        raise NotImplementedError

    @property
    def client(self) -> Client:
        """A ``disquette.Client`` knowing these nodes, made on first use,
        closed with them."""
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self, **options: Any) -> Client:
        """Another ``Client`` (``protocol=3``, ``serializer=``...), closed with the nodes."""
        c = Client(self.seeds(), **options)
        self._clients.append(c)
        return c

    def async_client(self, **options: Any) -> AsyncClient:
        """An ``AsyncClient``; close it in your test's event loop
        (``async with node.async_client() as c:``)."""
        return AsyncClient(self.seeds(), **options)

    def close_clients(self) -> None:
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        self._clients.clear()
        self._client = None


class ServerProcess:
    """One server process on a loopback port, with its data dir and its log
    (``D/node.log``): what every node runner of this project shares (this
    module's :class:`DisquetteNode`, the test suite's and the chaos suite's
    nodes).

    ``port=None`` picks a free one (and another, if a process takes it before
    the server binds).  ``env`` is added to this environment.  It is ready
    when it answers PING (``-NOAUTH`` counts: a password is the test's
    business) and, where ``/proc`` can tell, when the listener is its own.
    """

    def __init__(self, command: Sequence[str], *, args: Iterable[str] = (),
                 port: int | None = None, dir: str | os.PathLike[str] | None = None,
                 host: str = HOST, env: Mapping[str, str] | None = None,
                 start_timeout: float = START_TIMEOUT) -> None:
        self.command: list[str] = list(command)
        self.args: list[str] = [str(a) for a in args]
        self.host = host
        self._auto_port = port is None
        self.port: int = free_port(host) if port is None else port
        self._own_dir = dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="disquette-node-") if dir is None else dir)
        self.dir = self.dir.resolve()
        self.env: dict[str, str] = dict(env or {})
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    # -- where it is
    @property
    def addr(self) -> str:
        """``"127.0.0.1:<port>"``, what ``Client`` takes."""
        return format_addr(self.host, self.port)

    @property
    def bus_port(self) -> int:
        return self.port + BUS_OFFSET

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.dir / LOG_NAME

    def argv(self) -> list[str]:
        # Port and dir last: they are this object's, whatever the config says.
        return [*self.command, *self.args, "--port", str(self.port), "--dir", str(self.dir)]

    def environment(self) -> dict[str, str]:
        """The process's environment (asked at each launch: the port may
        have changed)."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- the process
    def start(self) -> Self:
        """Start the process and wait until it answers; NodeStartError, with
        the log's tail, if it exits or does not answer within
        ``start_timeout`` seconds."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting (a cluster starts all its nodes
        first, then waits for them)."""
        if self.is_running():
            raise RuntimeError(f"node {self.addr} is already running")
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== disquette.testing: {shlex.join(self.argv())}\n".encode())
            log.flush()
            # Its own session: Ctrl-C reaches the test run, whose teardown stops it.
            self.proc = subprocess.Popen(
                self.argv(), cwd=self.dir, env=self.environment(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=death_signal())
        _live.add(self)

    def wait_ready(self) -> Self:
        """Until the launched process answers; a port taken meanwhile by
        another process means a new free port and a new launch."""
        for attempt in range(3):
            try:
                _wait(self._answers, time.monotonic() + self.start_timeout,
                      lambda: f"node {self.addr} did not answer within {self.start_timeout}s"
                              f"\n--- {self.log_path} (tail) ---\n{self.log_tail()}")
                return self
            except _PortTaken:
                if not self._auto_port or attempt == 2:
                    raise NodeStartError(f"port {self.port} or {self.bus_port} is taken"
                                         f"\n--- {self.log_path} (tail) ---\n{self.log_tail()}"
                                         ) from None
                self.port = free_port(self.host)
                self.launch()
            except BaseException:
                self.kill()
                raise
        raise AssertionError("unreachable")

    def _answers(self) -> bool:
        if self.proc is None:
            raise NodeStartError(f"node {self.addr} was never launched")
        if self.proc.poll() is not None:
            _live.discard(self)
            if "address already in use" in self.log_tail(20).lower():
                raise _PortTaken()
            raise NodeStartError(f"node {self.addr} exited with code {self.proc.returncode}"
                                 f"\n--- {self.log_path} (tail) ---\n{self.log_tail()}")
        reply = self.ping()
        if reply is None or not reply.startswith((b"+PONG", b"-NOAUTH")):
            return False            # not yet listening, or -LOADING
        # Another process on our port answers too: only our listener is ours
        # (it then fails to bind, exits, and starts again on another port).
        owner = pid_listens_on(self.proc.pid, self.port)
        if owner is None and reply.startswith(b"+PONG"):     # no /proc: ask for its dir
            owner = self._serves_our_dir()
        return owner is not False

    def _serves_our_dir(self) -> bool | None:
        try:
            with redis.Redis(self.host, self.port, protocol=2, socket_timeout=5,
                             socket_connect_timeout=1, single_connection_client=True) as r:
                reply = r.execute_command("CONFIG", "GET", "dir")
        except (redis.RedisError, OSError):
            return None         # no CONFIG GET (or not over plain TCP): PING must do
        if not reply:
            return None
        return reply[1].decode(errors="replace") == str(self.dir)

    def ping(self) -> bytes | None:
        """The first line of the reply to a PING sent on a new connection,
        or None if nothing answers."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.settimeout(2.0)
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                data = b""
                while b"\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                return data or None
        except OSError:
            return None

    def kill(self) -> int | None:
        """SIGKILL, as a crash; the exit code (None if it never ran)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        code = self.proc.wait()
        _live.discard(self)
        return code

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait; TimeoutError (after a SIGKILL) if it does not
        exit within ``timeout`` seconds.  The exit code (None if it never ran)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
                if hasattr(signal, "SIGCONT"):          # a node a test froze (SIGSTOP)
                    self.proc.send_signal(signal.SIGCONT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise TimeoutError(f"node {self.addr} ignored SIGTERM for {timeout}s"
                                   f"\n{self.log_tail()}") from None
        _live.discard(self)
        return self.proc.returncode

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, and SIGKILL after ``timeout`` seconds; the exit code
        (None if it never ran).  Never raises TimeoutError: it runs at teardown."""
        with contextlib.suppress(TimeoutError):     # killed, then
            self.terminate(timeout)
        return self.returncode

    # -- its log
    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


class DisquetteNode(ServerProcess, _Clients):
    """One node as a subprocess: ``<command> [directives] --port P --dir D``,
    its output in ``D/node.log``.

    ``port=None`` picks a free one (and another, if a process takes it first).
    ``dir=None`` makes a temporary data dir, removed by :meth:`close`.
    ``start()``, ``stop()`` (SIGTERM) and ``kill()`` (SIGKILL, as a crash) may
    be called again and again: a node starts again on the same port and dir,
    with what it persisted (its clients stay, and reconnect after a start).
    """

    def __init__(self, command: Sequence[str] | str | None = None, *,
                 config: Iterable[str] = (), port: int | None = None,
                 dir: str | os.PathLike[str] | None = None, host: str = HOST,
                 start_timeout: float = START_TIMEOUT, **directives: Any) -> None:
        if isinstance(command, str):
            command = shlex.split(command)
        ServerProcess.__init__(self, command or default_command(),
                               args=directive_args(config, directives), port=port, dir=dir,
                               host=host, start_timeout=start_timeout)
        _Clients.__init__(self)

    @property
    def url(self) -> str:
        """``"disque://127.0.0.1:<port>"``."""
        return f"disque://{self.addr}"

    # -- clients
    def seeds(self) -> list[str]:
        return [self.addr]

    def admin(self) -> redis.Redis:
        """A plain redis-py connection (RESP2, one socket) for checks and
        admin commands; close it (``with node.admin() as r:``)."""
        return redis.Redis(self.host, self.port, protocol=2, socket_timeout=10,
                           socket_connect_timeout=5, single_connection_client=True)

    def restart(self) -> "DisquetteNode":
        """SIGTERM, then start again on the same port and dir."""
        self.stop()
        return self.start()

    def flush(self) -> None:
        """Empty the node (DEBUG FLUSHALL): no jobs, no queues."""
        with self.admin() as r:
            r.execute_command("DEBUG", "FLUSHALL")

    def close(self) -> None:
        """Close the clients, stop the process, remove the data dir we made.
        Never raises: it runs at teardown."""
        self.close_clients()
        with contextlib.suppress(Exception):
            self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "DisquetteNode":
        return self if self.is_running() else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<DisquetteNode {self.addr} {state} dir={self.dir}>"


class DisquetteCluster(_Clients):
    """``size`` nodes (3 by default) joined with CLUSTER MEET, ready when
    every node's HELLO lists every node as reachable (priority 1).

    ``command``, ``config`` and ``**directives`` go to every node (see
    :class:`DisquetteNode`); ``cluster.nodes[i]`` can be stopped, killed and
    started again, and :meth:`wait_formed` waits until it is back.
    """

    def __init__(self, size: int = 3, command: Sequence[str] | str | None = None, *,
                 config: Iterable[str] = (), host: str = HOST,
                 start_timeout: float = START_TIMEOUT, **directives: Any) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        config = list(config)
        self.start_timeout = start_timeout
        self.nodes: list[DisquetteNode] = [
            DisquetteNode(command, config=config, host=host, start_timeout=start_timeout,
                          **directives)
            for _ in range(size)]
        super().__init__()

    @property
    def addrs(self) -> list[str]:
        return [n.addr for n in self.nodes]

    @property
    def url(self) -> str:
        """``"disque://127.0.0.1:<p1>,127.0.0.1:<p2>,..."``."""
        return "disque://" + ",".join(self.addrs)

    def seeds(self) -> list[str]:
        return self.addrs

    def close_clients(self) -> None:
        super().close_clients()
        for n in self.nodes:
            n.close_clients()

    def start(self) -> "DisquetteCluster":
        """Start every node (all launched, then awaited), MEET them, wait until
        the cluster is formed.  On failure every node is closed."""
        try:
            for n in self.nodes:
                n.launch()
            for n in self.nodes:
                n.wait_ready()
            first = self.nodes[0]
            for n in self.nodes[1:]:
                with n.admin() as r:
                    r.execute_command("CLUSTER", "MEET", first.host, first.port)
            self.wait_formed()
        except BaseException:
            self.close()
            raise
        return self

    def ensure_running(self) -> None:
        """Start again the nodes that were stopped or killed, and wait until
        the cluster is whole again."""
        stopped = [n for n in self.nodes if not n.is_running()]
        for n in stopped:
            n.start()
        if stopped:
            self.wait_formed()

    def wait_formed(self, timeout: float | None = None) -> None:
        """Until every node's HELLO lists every node with priority 1 (known,
        linked, not failing)."""
        size = len(self.nodes)

        def formed() -> bool:
            for n in self.nodes:
                try:
                    with n.admin() as r:
                        hello = parse_hello(r.execute_command("HELLO"))
                except (redis.ConnectionError, redis.TimeoutError):
                    return False
                if len(hello.nodes) != size or any(i.priority != 1 for i in hello.nodes):
                    return False
            return True

        timeout = self.start_timeout if timeout is None else timeout
        _wait(formed, time.monotonic() + timeout,
              lambda: f"the {size}-node cluster {self.addrs} did not form within {timeout}s"
                      + "".join(f"\n--- {n.log_path} (tail) ---\n{n.log_tail(15)}"
                                for n in self.nodes))

    def flush(self) -> None:
        """DEBUG FLUSHALL on every node."""
        for n in self.nodes:
            n.flush()

    def close(self) -> None:
        """Close the clients, stop every node, remove their data dirs."""
        self.close_clients()
        for n in self.nodes:
            n.close()

    def __enter__(self) -> "DisquetteCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<DisquetteCluster {self.addrs}>"


class _PortTaken(Exception):
    """The node exited because its port (or bus port) was taken."""


_live: set[ServerProcess] = set()


def death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` for Popen: on Linux, for a process launched by the
    main thread, have the kernel SIGKILL it when this process dies, even by
    SIGKILL (no atexit then).  Not from another thread: the signal comes
    when *that thread* ends."""
    if _prctl is None or threading.current_thread() is not threading.main_thread():
        return None
    prctl = _prctl

    def set_pdeathsig() -> None:    # in the child, between fork and exec: no more than this
        prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG
    return set_pdeathsig


def _libc_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _libc_prctl()


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except OSError:
            continue
    return inodes


def pid_listens_on(pid: int, port: int) -> bool | None:
    """Whether ``pid`` owns the listener on ``port``; None where ``/proc``
    cannot tell."""
    if not os.path.exists("/proc/net/tcp"):
        return None
    wanted = {f"socket:[{i}]" for i in _listening_inodes(port)}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
    return False


@atexit.register
def _kill_leftovers() -> None:
    for n in list(_live):
        with contextlib.suppress(Exception):
            n.kill()
