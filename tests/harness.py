"""Integration-test harness: real broker processes on loopback, real clients.

Everything here talks to nodes the way a user would: a subprocess started with
``python -m server``, TCP on 127.0.0.1, redis-py (RESP2 and RESP3), a raw socket
for byte-exact checks, ``redis-cli`` and pydisque (in its own venv, because it
needs redis<5).  No mocks, no fixed sleeps: readiness and conditions are awaited
(polled), and a deadline (WAIT_TIMEOUT) only guards against a hang: a loaded
machine may be many times slower than a quiet one, and must still pass.

Typical use (through the fixtures in ``conftest.py``)::

    def test_ping(node):
        assert node.client().ping()
        assert node.raw().call("PING") == b"+PONG\\r\\n"
        assert node.cli("PING") == "PONG\\n"

    def test_two(node_factory, wait_until):
        a, b = node_factory(), node_factory("--appendonly", "yes")
        ...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import pytest
import redis

from disquette.testing import NodeStartError, ServerProcess, directive_args, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
PYDISQUE_PYTHON = REPO_ROOT / ".venv-pydisque" / "bin" / "python"
HOST = "127.0.0.1"
# How long any wait (a condition, a reply, a start, an exit) may take before
# the test calls it a hang: far above what a loaded machine needs, under the
# pytest timeout (pyproject.toml).
WAIT_TIMEOUT = 60.0
START_TIMEOUT = WAIT_TIMEOUT
# A node-side timeout (ms: a blocked GETJOB's TIMEOUT, a sync ADDJOB's) where
# the test awaits what must come: a guard like WAIT_TIMEOUT, under the
# clients' 60 s socket timeout.
NODE_WAIT_MS = 50_000
# Polling starts fast and slows down to this: a long wait costs the machine
# (and the node, asked over its socket) little.
POLL_CAP = 0.1

T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# ---------------------------------------------------------------------------
# polling helper
# ---------------------------------------------------------------------------

def wait_until(
    predicate: Callable[[], T],
    timeout: float = WAIT_TIMEOUT,
    interval: float = 0.01,
    message: str | Callable[[], str] | None = None,
    ignore: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` until it returns something truthy; return that value.

    The pause between calls starts at ``interval`` and grows to ``POLL_CAP``
    (or ``interval`` if larger).  Raises AssertionError after ``timeout``
    seconds, a guard against a hang, not a measure of speed.  Exceptions
    listed in ``ignore`` count as "not yet" (the last one is chained to the
    failure).
    """
    deadline = time.monotonic() + timeout
    pause, longest = interval, max(interval, POLL_CAP)
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:  # type: ignore[misc]
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = message() if callable(message) else message
            name = getattr(predicate, "__name__", repr(predicate))
            text = f"condition not met within {timeout}s: {msg or name}"
            if last_exc is not None:
                raise AssertionError(f"{text} (last error: {last_exc!r})") from last_exc
            raise AssertionError(text)
        time.sleep(pause)
        pause = min(pause * 1.5, longest)


# ---------------------------------------------------------------------------
# raw RESP connection (byte-exact checks)
# ---------------------------------------------------------------------------

def encode_command(*args: Any) -> bytes:
    """RESP array of bulk strings, as clients send commands."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        elif not isinstance(a, (bytes, bytearray, memoryview)):
            raise TypeError(f"cannot encode {type(a).__name__}")
        a = bytes(a)
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


_LINE_TYPES = b"+-:_#,("  # simple string, error, int, null, bool, double, big number
_BULK_TYPES = b"$!="  # bulk string, bulk error, verbatim string
_AGGR_TYPES = b"*~>"  # array, set, push
_PAIR_TYPES = b"%|"  # map, attribute


def resp_frame_end(buf: bytes, pos: int = 0) -> int | None:
    """Offset just past the RESP2/RESP3 reply starting at ``pos``, or None if
    ``buf`` does not hold a complete reply yet.  Raises ValueError on bytes
    that are not RESP."""
    if pos >= len(buf):
        return None
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind = buf[pos:pos + 1]
    head = buf[pos + 1:nl]
    after = nl + 2
    if kind[0] in _LINE_TYPES:
        return after
    if kind[0] in _BULK_TYPES:
        n = int(head)
        if n < 0:
            return after
        end = after + n + 2
        return end if len(buf) >= end else None
    if kind[0] in _AGGR_TYPES or kind[0] in _PAIR_TYPES:
        n = int(head)
        if n < 0:
            return after
        if kind[0] in _PAIR_TYPES:
            n *= 2
        p = after
        for _ in range(n):
            p = resp_frame_end(buf, p)
            if p is None:
                return None
        if kind == b"|":  # an attribute is followed by the actual reply
            return resp_frame_end(buf, p)
        return p
    raise ValueError(f"not a RESP reply at offset {pos}: {buf[pos:pos + 40]!r}")


class RawConn:
    """A plain TCP socket to a node: send exact bytes, read exact replies."""

    def __init__(self, host: str, port: int, timeout: float = WAIT_TIMEOUT):
        self.host, self.port, self.timeout = host, port, timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False

    # -- sending
    def send(self, data: bytes) -> None:
        self.sock.settimeout(self.timeout)     # a read may have left it non-blocking
        self.sock.sendall(data)

    def call(self, *args: Any) -> bytes:
        """Send one command as a RESP array; return the raw bytes of its reply."""
        self.send(encode_command(*args))
        return self.read_reply()

    def request(self, data: bytes) -> bytes:
        """Send ``data`` verbatim (e.g. an inline command); return one raw reply."""
        self.send(data)
        return self.read_reply()

    # -- receiving
    def _fill(self, deadline: float) -> bool:
        if self.eof:
            return False
        # Past the deadline (or a timeout of 0): only what has already arrived.
        self.sock.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_reply(self, timeout: float | None = None) -> bytes:
        """Bytes of exactly one complete reply (RESP2 or RESP3)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            end = resp_frame_end(self.buf)
            if end is not None:
                reply, self.buf = self.buf[:end], self.buf[end:]
                return reply
            if not self._fill(deadline):
                state = "connection closed" if self.eof else "timed out"
                raise TimeoutError(f"{state} waiting for a reply; have {self.buf[:200]!r}")

    def read_replies(self, n: int, timeout: float | None = None) -> list[bytes]:
        return [self.read_reply(timeout) for _ in range(n)]

    def read_available(self, timeout: float = 0.2) -> bytes:
        """Whatever arrives within ``timeout`` seconds (or until EOF); with 0,
        what has arrived already.  ``== b""`` shows that nothing came in a
        window, which holds however slow the machine: a loaded one makes the
        check weaker, never false."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        data, self.buf = self.buf, b""
        return data

    def read_until_closed(self, timeout: float | None = None) -> bytes:
        """Everything until the peer closes; TimeoutError if it does not."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.eof:
            if not self._fill(deadline) and not self.eof:
                raise TimeoutError(f"peer did not close; have {self.buf[:200]!r}")
        data, self.buf = self.buf, b""
        return data

    def is_closed(self, timeout: float = WAIT_TIMEOUT) -> bool:
        """True if the peer closes the connection within ``timeout`` seconds."""
        try:
            self.read_until_closed(timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> "RawConn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# node processes
# ---------------------------------------------------------------------------

class NodeProcess(ServerProcess):
    """One node as a real subprocess (disquette.testing's, with this suite's
    clients): ``<cmd> --port P --dir D [args ...]``, so ``args`` may say
    otherwise; stdout+stderr appended to ``D/node.log``.

    ``cmd`` defaults to ``[sys.executable, "-m", "server"]`` run from this
    checkout; pass e.g. ``["redis-server"]`` to run something else with the
    same conventions.  If ``port`` is None a free one is picked (and picked
    again if another process takes it before the node binds).
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        port: int | None = None,
        args: Sequence[str] = (),
        *,
        cmd: Sequence[str] | None = None,
        host: str = HOST,
        env: dict[str, str] | None = None,
        start_timeout: float = START_TIMEOUT,
    ):
        super().__init__(cmd if cmd is not None else [sys.executable, "-m", "server"],
                         args=args, port=port, dir=dir, host=host, env=env,
                         start_timeout=start_timeout)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._clients: list[Any] = []
        self._raws: list[RawConn] = []

    def argv(self) -> list[str]:
        return [*self.command, "--port", str(self.port), "--dir", str(self.dir), *self.args]

    def environment(self) -> dict[str, str]:
        env = os.environ.copy()
        env.update(
            PYTHONUNBUFFERED="1",
            PYTHONFAULTHANDLER="1",
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p),
        )
        env.update(self.env)
        return env

    def __repr__(self) -> str:
        state = "running" if self.is_alive() else f"exited {self.returncode}"
        return f"<NodeProcess {self.addr} {state} dir={self.dir}>"

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _close_clients(self) -> None:
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        for r in self._raws:
            r.close()
        self._clients.clear()
        self._raws.clear()

    def terminate(self, timeout: float = WAIT_TIMEOUT) -> int | None:
        return super().terminate(timeout)

    def wait_exit(self, timeout: float = WAIT_TIMEOUT) -> int:
        """Wait for the process to exit on its own (e.g. after SHUTDOWN)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def restart(self, kill: bool = False) -> "NodeProcess":
        """Stop (SIGTERM, or SIGKILL with ``kill=True``) and start again on the
        same port and dir."""
        self._close_clients()
        if kill:
            self.kill()
        else:
            self.terminate()
        self._auto_port = False  # keep the address peers know
        return self.start()

    def stop(self, timeout: float = 5.0) -> int | None:
        """Teardown: close clients, SIGTERM, SIGKILL if needed."""
        self._close_clients()
        return super().stop(timeout)

    # -- clients
    def client(self, protocol: int = 3, **kwargs: Any) -> redis.Redis:
        """redis-py client (RESP3 by default), bytes replies."""
        kwargs.setdefault("socket_connect_timeout", 5)
        kwargs.setdefault("socket_timeout", 60)
        c = redis.Redis(
            host=self.host, port=self.port, protocol=protocol, decode_responses=False, **kwargs
        )
        self._clients.append(c)
        return c

    def aclient(self, protocol: int = 3, **kwargs: Any) -> Any:
        """redis.asyncio client; close it (``await c.aclose()``) in the test."""
        import redis.asyncio

        kwargs.setdefault("socket_connect_timeout", 5)
        kwargs.setdefault("socket_timeout", 60)
        return redis.asyncio.Redis(
            host=self.host, port=self.port, protocol=protocol, decode_responses=False, **kwargs
        )

    def raw(self, timeout: float = WAIT_TIMEOUT) -> RawConn:
        r = RawConn(self.host, self.port, timeout=timeout)
        self._raws.append(r)
        return r

    def cli(
        self,
        *args: Any,
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = 30,
        binary: bool = False,
    ) -> Any:
        """Run ``redis-cli -h HOST -p PORT args...``; return its stdout (str,
        undecodable bytes replaced; raw bytes with ``binary=True``)."""
        exe = shutil.which("redis-cli")
        if exe is None:
            raise RuntimeError("redis-cli not found: run `make deps` (Debian package redis-tools)")
        res = subprocess.run(
            [exe, "-h", self.host, "-p", str(self.port), *map(str, args)],
            input=input.encode() if isinstance(input, str) else input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and res.returncode != 0:
            raise RuntimeError(
                f"redis-cli {' '.join(map(str, args))} exited {res.returncode}: "
                f"{res.stderr.decode(errors='replace').strip()}"
            )
        return res.stdout if binary else res.stdout.decode(errors="replace")

    def __enter__(self) -> "NodeProcess":
        if not self.is_alive():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NodeFactory:
    """Starts nodes in ``base_dir/node<i>``; ``stop_all()`` cleans up.

    ``factory(*args, port=None, cmd=None, **directives)`` -> started NodeProcess;
    directives are written as ``--name value`` with ``_`` -> ``-``.
    """

    def __init__(self, base_dir: str | os.PathLike[str], cmd: Sequence[str] | None = None):
        self.base_dir = Path(base_dir)
        self.cmd = cmd
        self.nodes: list[NodeProcess] = []

    def __call__(
        self,
        *args: Any,
        port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        cmd: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        start: bool = True,
        **directives: Any,
    ) -> NodeProcess:
        d = Path(dir) if dir is not None else self.base_dir / f"node{len(self.nodes)}"
        n = NodeProcess(
            d,
            port,
            [*map(str, args), *directive_args((), directives)],
            cmd=cmd if cmd is not None else self.cmd,
            env=env,
        )
        self.nodes.append(n)
        return n.start() if start else n

    def cluster(self, size: int, *args: Any, timeout: float = WAIT_TIMEOUT, chain: bool = False,
                **directives: Any) -> list[NodeProcess]:
        """Start ``size`` nodes, CLUSTER MEET them (see ``join``), wait until all
        see each other."""
        nodes = [self(*args, **directives) for _ in range(size)]
        join(nodes, timeout=timeout, chain=chain)
        return nodes

    def stop_all(self) -> None:
        """Stop every node; a node that logged an internal error (a bug of
        ours, which the process survives and counts) fails the test."""
        for n in reversed(self.nodes):
            n.stop()
        bugs = [f"{n.addr}: {n.log_path}" for n in self.nodes
                if "Internal error in" in n.log()]
        assert not bugs, f"internal error logged (a bug in our code) by {bugs}"


def module_factory(tmp_path_factory, name: str):
    """Body of a module-scoped fixture: a NodeFactory whose nodes are all
    stopped when the module is done (``yield from module_factory(...)``)."""
    factory = NodeFactory(tmp_path_factory.mktemp(name))
    try:
        yield factory
    finally:
        factory.stop_all()


def cluster_info(n: NodeProcess) -> dict[str, str]:
    with RawConn(n.host, n.port) as r:
        text = r.call("CLUSTER", "INFO")
    body = text.split(b"\r\n", 1)[1] if text[:1] in (b"$", b"=") else text
    if text[:1] == b"=":
        body = body[4:]  # RESP3 verbatim string: "txt:" prefix
    out: dict[str, str] = {}
    for line in body.decode(errors="replace").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def join(nodes: Sequence[NodeProcess], timeout: float = WAIT_TIMEOUT, chain: bool = False) -> None:
    """MEET every node with the first one (``chain=True``: each node meets only
    the previous one, so gossip must spread the rest) and wait until each knows
    all of them and reaches all the others."""
    for i, n in enumerate(nodes[1:], 1):
        other = nodes[i - 1] if chain else nodes[0]
        with RawConn(n.host, n.port) as r:
            reply = r.call("CLUSTER", "MEET", other.host, other.port)
        assert reply.startswith(b"+"), f"CLUSTER MEET on {n.addr}: {reply!r}"

    def everyone_sees_everyone() -> bool:
        for n in nodes:
            info = cluster_info(n)
            if info.get("cluster_known_nodes") != str(len(nodes)):
                return False
            if info.get("cluster_reachable_nodes") != str(len(nodes) - 1):
                return False
        return True

    wait_until(everyone_sees_everyone, timeout=timeout, interval=0.05,
               message=lambda: "; ".join(f"{n.addr}: {cluster_info(n)}" for n in nodes))


# ---------------------------------------------------------------------------
# pydisque (redis<5) in its own venv
# ---------------------------------------------------------------------------

_PYDISQUE_PRELUDE = """\
import sys
HOST = sys.argv[1]
PORT = int(sys.argv[2])
ADDR = f"{HOST}:{PORT}"
"""


def pydisque_run(code: str, port: int, host: str = HOST, timeout: float = 60.0) -> str:
    """Run ``code`` with ``.venv-pydisque/bin/python``; return its stdout.

    The snippet sees ``HOST``, ``PORT`` and ``ADDR`` ("host:port"), e.g.
    ``Client([ADDR])``.  Fails the test on a non-zero exit (stderr included).
    A missing venv skips the test locally but fails it under CI.
    """
    if not PYDISQUE_PYTHON.exists():
        msg = ".venv-pydisque is missing: run `make pydisque-venv` (or `make test`)"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    script = _PYDISQUE_PRELUDE + textwrap.dedent(code)
    res = subprocess.run(
        [str(PYDISQUE_PYTHON), "-I", "-c", script, host, str(port)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if res.returncode != 0:
        pytest.fail(
            f"pydisque snippet exited {res.returncode}\n--- stdout ---\n{res.stdout}"
            f"\n--- stderr ---\n{res.stderr}",
            pytrace=False,
        )
    return res.stdout


__all__ = [
    "NODE_WAIT_MS",
    "HOST",
    "REPO_ROOT",
    "NodeFactory",
    "NodeProcess",
    "NodeStartError",
    "RawConn",
    "WAIT_TIMEOUT",
    "cluster_info",
    "encode_command",
    "free_port",
    "in_ci",
    "join",
    "pydisque_run",
    "resp_frame_end",
    "wait_until",
]
