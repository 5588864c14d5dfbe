"""Helpers shared by the benchmark scripts in bench/ (scripts, not tests).

Everything a side-by-side benchmark needs: free loopback ports, a Disquette node,
the C Disque (``disque-server`` from the DISQUE_SERVER environment variable, built
outside this repository) or a Debian ``redis-server`` started as a real process in
a temporary directory (stopped and removed at exit, whatever happens),
``redis-benchmark`` runs with their "requests per second" (or latency) parsed,
bulk loading, a tiny RESP client for control commands, RSS read from /proc, and
py-spy attached to the Disquette nodes a run starts (``--profile``).

    # a script in bench/ has bench/ on sys.path
    from common import start_disquette, start_redis, redis_benchmark
    ours, redis = start_disquette(), start_redis()
    rps = redis_benchmark(ours.port, ["ADDJOB", "q", body, "0"], n=100_000)
"""

from __future__ import annotations

import atexit
import csv
import os
import platform
import re
import shutil
import signal
import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import hiredis

from disquette.testing import free_port as _free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
BUS_PORT_OFFSET = 10000       # Disquette's cluster bus listens on port + 10000
BENCH_CLIENTS = 50            # the issue's figures are for 50 clients
# The C Disque to compare against: a path to disque-server, or unset (its
# column is then left out).
DISQUE_ENV = "DISQUE_SERVER"


# ---------------------------------------------------------------------------
# ports
# ---------------------------------------------------------------------------

# A loopback port free now whose bus port (+10000) is free too, never the same
# twice in one run: the SDK's test helper (disquette/testing.py) picks them.
free_port = _free_port     # (used by every bench script)


# ---------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------

_running: list["Server"] = []
_tmpdirs: list[str] = []


def _cleanup() -> None:
    for s in list(_running):
        s.stop()
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)
    _tmpdirs.clear()


def _on_signal(signum, frame):
    _cleanup()
    sys.exit(128 + signum)


atexit.register(_cleanup)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _on_signal)


def temp_dir(prefix: str) -> str:
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


class Server:
    """A server process on a loopback port; ``kind`` is "disquette", "disque",
    "redis" or "ceiling"."""

    def __init__(self, kind: str, argv: list[str], port: int, workdir: str,
                 env: dict | None = None) -> None:
        self.kind = kind
        self.port = port
        self.dir = workdir
        self.log_path = os.path.join(workdir, "stdout.log")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=workdir, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env)
        _running.append(self)
        try:
            self.wait_ready()
        except Exception:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}; "
                                   f"log:\n{self.log_tail()}")
            try:
                if self.call("PING").startswith(b"+"):   # +PONG (the ceiling: its status)
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.kind} on port {self.port} not ready; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def call(self, *args) -> bytes:
        """One command, one reply line (status, error or integer replies only)."""
        return call(self.port, *args)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def flush(self) -> None:
        """Drop everything the server holds (the ceiling holds nothing)."""
        if self.kind == "ceiling":
            return
        # The C Disque frees a million jobs slowly (about two minutes on a loaded
        # 2-CPU machine): a flush gets far longer than one command's timeout.
        args = ("FLUSHALL",) if self.kind == "redis" else ("DEBUG", "FLUSHALL")
        r = call(self.port, *args, timeout=900.0)
        if r != b"+OK":
            raise RuntimeError(f"flush {self}: {r!r}")

    def stop(self) -> None:
        if self in _running:
            _running.remove(self)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __repr__(self) -> str:
        return f"<{self.kind} pid={self.pid} port={self.port}>"


def start_disquette(*directives: str, port: int | None = None,
                    root: Path = REPO_ROOT) -> Server:
    """``python -m server --port P --dir D [--directive value ...]`` with this
    interpreter (``make bench`` runs the project venv), from the tree at ``root``
    (this checkout unless a script built another copy)."""
    port = port or free_port()
    d = temp_dir("disquette-bench-")
    argv = [sys.executable, "-m", "server", "--port", str(port), "--dir", d, *directives]
    # The node runs in its temp dir: make the tree importable from there.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    server = Server("disquette", argv, port, d, env=env)
    for hook in on_disquette_start:
        hook(server)
    return server


# Called with every Disquette node started from now on (--profile attaches py-spy).
on_disquette_start: list = []


def disque_path() -> str | None:
    """The disque-server named by $DISQUE_SERVER, or None when unset."""
    path = os.environ.get(DISQUE_ENV)
    if not path:
        return None
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{DISQUE_ENV}={path} is not an executable disque-server")
    return path


def start_disque(*directives: str, port: int | None = None) -> Server:
    """The C Disque ($DISQUE_SERVER), no AOF, in a temp dir (its nodes.conf too)."""
    path = disque_path()
    if path is None:
        raise RuntimeError(f"{DISQUE_ENV} is not set")
    port = port or free_port()
    d = temp_dir("disque-bench-")
    argv = [path, "--port", str(port), "--bind", HOST, "--dir", d, "--appendonly", "no",
            *directives]
    return Server("disque", argv, port, d)


def start_redis(*directives: str, port: int | None = None) -> Server:
    """Debian's redis-server, no persistence (unless ``directives`` say
    otherwise: they come last), as the reference."""
    port = port or free_port()
    d = temp_dir("redis-bench-")
    argv = ["redis-server", "--port", str(port), "--bind", HOST, "--save", "",
            "--appendonly", "no", "--dir", d, *directives]
    return Server("redis", argv, port, d)


def start_ceiling(port: int | None = None, hold: bool = False) -> Server:
    """bench/ceiling_server.py: a do-nothing RESP server on the same event loop;
    ``hold``: one that keeps each ADDJOB's id and body (the memory ceiling)."""
    port = port or free_port()
    d = temp_dir("ceiling-bench-")
    argv = [sys.executable, str(REPO_ROOT / "bench" / "ceiling_server.py"), str(port),
            *(["--hold"] if hold else [])]
    return Server("ceiling", argv, port, d)


def start_disquette_cluster(n: int, *directives: str) -> list[Server]:
    """n nodes; every other node CLUSTER MEETs the first. Waiting until they all
    see each other (wait_cluster_joined) is left to the caller."""
    return _meet([start_disquette(*directives) for _ in range(n)])


def start_disque_cluster(n: int) -> list[Server]:
    """n C Disque nodes joined the same way (Disque's CLUSTER MEET also takes
    the client port; the bus is on port + 10000)."""
    return _meet([start_disque() for _ in range(n)])


def _meet(nodes: list[Server]) -> list[Server]:
    for s in nodes[1:]:
        r = s.call("CLUSTER", "MEET", HOST, nodes[0].port)
        if r != b"+OK":
            raise RuntimeError(f"CLUSTER MEET on {s}: {r!r}")
    return nodes


# ---------------------------------------------------------------------------
# talking to servers
# ---------------------------------------------------------------------------

def encode_command(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = b"%d" % a
        out.append(b"$%d\r\n%b\r\n" % (len(a), a))
    return b"".join(out)


def _recv(s: socket.socket, port: int) -> bytes:
    chunk = s.recv(65536)
    if not chunk:
        raise ConnectionError(f"port {port} closed the connection")
    return chunk


def _first_line(s: socket.socket, port: int) -> tuple[bytes, bytes]:
    """Read until the reply's first CRLF: (that line, what came after it)."""
    buf = b""
    while b"\r\n" not in buf:
        buf += _recv(s, port)
    head, rest = buf.split(b"\r\n", 1)
    return head, rest


def call(port: int, *args, timeout: float = 60.0) -> bytes:
    """Send one command on a fresh connection; return its reply's first line
    without CRLF (enough for +OK, -ERR, :n)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(encode_command(*args))
        return _first_line(s, port)[0]


def call_int(port: int, *args) -> int:
    r = call(port, *args)
    if not r.startswith(b":"):
        raise RuntimeError(f"{args[0]} on port {port}: {r!r}")
    return int(r[1:])


def rss_bytes(pid: int) -> int:
    """Resident set size from /proc/PID/status (VmRSS, kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time a process has used so far (/proc/PID/stat):
    per request, a figure other load on the machine disturbs less than rps."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / hz, int(fields[12]) / hz


def settle(server: Server, seconds: float = 0.3) -> None:
    """Let a server finish closing connections and freeing their buffers."""
    time.sleep(seconds)
    server.call("PING")


# ---------------------------------------------------------------------------
# redis-benchmark
# ---------------------------------------------------------------------------

_RPS = re.compile(rb"([0-9]+(?:\.[0-9]+)?) requests per second")


def parse_rps(output: bytes) -> float:
    """The final "requests per second" figure of ``redis-benchmark -q``.

    Progress lines are separated by \\r, not \\n, and also contain "rps=", so
    only the last line that reads "N requests per second" counts."""
    lines = re.split(rb"[\r\n]+", output)
    for line in reversed(lines):
        m = _RPS.search(line)
        if m:
            return float(m.group(1))
    raise ValueError(f"no 'requests per second' in redis-benchmark output: {output[-500:]!r}")


def redis_benchmark(port: int, command: list, n: int, clients: int = BENCH_CLIENTS,
                    pipeline: int = 1, timeout: float = 900.0) -> float:
    """Run ``redis-benchmark -q`` with a custom command; return requests/s.

    With ``-P k`` it may issue up to one pipeline more than n requests."""
    argv = ["redis-benchmark", "-h", HOST, "-p", str(port), "-c", str(clients),
            "-n", str(n), "-q"]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    argv += [a if isinstance(a, str) else a.decode() for a in command]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed ({p.returncode}): {p.stdout[-500:]!r}")
    return parse_rps(p.stdout)


def bulk_load(port: int, command: list, n: int, pipeline: int = 64,
              clients: int = BENCH_CLIENTS) -> None:
    """Issue about n copies of a command as fast as possible (redis-benchmark
    pipelined); callers count what actually landed (QLEN/LLEN)."""
    redis_benchmark(port, command, n, clients=clients, pipeline=pipeline)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    k = len(s)
    return s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2


def body(size: int = 100) -> str:
    """A job body of ``size`` printable bytes (redis-benchmark takes argv strings)."""
    return ("0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]


def call_bulk(port: int, *args, timeout: float = 60.0) -> bytes:
    """Send one command on a fresh connection; return its bulk string reply."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(encode_command(*args))
        head, rest = _first_line(s, port)
        if not head.startswith(b"$"):
            raise RuntimeError(f"{args[0]} on port {port}: {head!r}")
        size = int(head[1:])
        while len(rest) < size + 2:
            rest += _recv(s, port)
        return rest[:size]


def wait_cluster_joined(nodes: list[Server], timeout: float = 30.0) -> None:
    """Until every node knows every other one and reaches it (CLUSTER INFO)."""
    want = [b"cluster_known_nodes:%d\r\n" % len(nodes),
            b"cluster_reachable_nodes:%d\r\n" % (len(nodes) - 1)]
    deadline = time.monotonic() + timeout
    while True:
        infos = [call_bulk(s.port, "CLUSTER", "INFO") for s in nodes]
        if all(w in info for info in infos for w in want):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster of {len(nodes)} nodes did not join within "
                               f"{timeout} s: {infos!r}")
        time.sleep(0.1)


def parse_bench_args(argv, description: str, row_names: list[str], extra=None):
    """The options every bench script takes (``extra(parser)`` adds a script's own)."""
    ap = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(ap)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: smaller request counts (each script says how much), one round")
    ap.add_argument("--only", default="", help="comma-separated rows: " + ", ".join(row_names))
    ap.add_argument("--rounds", type=int, default=0, help="rounds per throughput row "
                    "(default 3, 1 with --quick)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    args = ap.parse_args(argv)
    args.names = [x.strip() for x in args.only.split(",") if x.strip()]
    args.parser = ap
    return args


def redis_benchmark_csv(port: int, command: list, n: int, clients: int = BENCH_CLIENTS,
                        pipeline: int = 1, timeout: float = 900.0) -> dict[str, float]:
    """``redis-benchmark --csv``: rps, avg/min/p50/p95/p99/max latency (ms),
    keyed as in its header ("rps", "p50_latency_ms"...)."""
    argv = ["redis-benchmark", "-h", HOST, "-p", str(port), "-c", str(clients),
            "-n", str(n), "--csv"]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    argv += [a if isinstance(a, str) else a.decode() for a in command]
    # Its warnings (no CONFIG command on Disque) go to stderr, apart from the CSV.
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed ({p.returncode}): "
                           f"{(p.stdout + p.stderr)[-500:]!r}")
    rows = list(csv.reader(p.stdout.decode().splitlines()))
    if len(rows) < 2 or rows[0][:2] != ["test", "rps"]:
        raise ValueError(f"no CSV rows in redis-benchmark output: {p.stdout[-500:]!r}")
    return {k: float(v) for k, v in zip(rows[0][1:], rows[-1][1:])}


# ---------------------------------------------------------------------------
# what runs: versions for the header
# ---------------------------------------------------------------------------

def info(port: int, section: str) -> dict[str, str]:
    """One INFO section as a dict of strings."""
    out = {}
    for line in call_bulk(port, "INFO", section).decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def binary_version(argv: list[str]) -> str:
    """The v=... word of ``redis-server --version`` / ``disque-server --version``."""
    words = subprocess.run([*argv, "--version"], capture_output=True, text=True).stdout.split()
    return next((w[2:] for w in words if w.startswith("v=")), "?")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def environment(node: Server | None) -> str:
    """The header line: Python, the reader the running node uses (INFO server's
    resp_parser and compiled_core), Disque's and Redis's versions, CPUs, load."""
    parts = [f"Python {platform.python_version()}"]
    if node is not None:
        s = info(node.port, "server")
        parts.append(f"{s.get('multiplexing_api', '?')}, reader {s.get('resp_parser', '?')}, "
                     f"compiled_core {s.get('compiled_core', '?')}")
    dq = disque_path()
    parts.append(f"Disque {binary_version([dq])}" if dq else f"Disque: not run (${DISQUE_ENV} unset)")
    parts.append(f"redis-server {binary_version(['redis-server'])}")
    parts.append(f"{os.cpu_count()} CPUs, load average {load_average()}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------
# stalls: a PINGing client in a process of its own, pipelined drivers
# ---------------------------------------------------------------------------

PINGER = REPO_ROOT / "bench" / "pinger.py"


class PingStall:
    """``with PingStall(port) as p: <load>``, then ``p.worst_ms``: the longest
    PING round trip a separate client saw meanwhile (bench/pinger.py, another
    process, so this one's threads and GIL cannot delay it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst_ms = 0.0

    def __enter__(self) -> "PingStall":
        self.proc = subprocess.Popen([sys.executable, str(PINGER), str(self.port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.proc.stdout.readline().strip() != b"ready":   # its first PONG came back
            raise RuntimeError(f"pinger on port {self.port} did not start")
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self.proc.communicate(timeout=60)             # closing stdin stops it
        if not exc[0]:
            self.worst_ms = float(out)


def fetch_job_ids(port: int, queue: str, count: int = 1000) -> list[bytes]:
    """GETJOB NOHANG COUNT ``count`` FROM queue until it is empty: the ids fetched."""
    ids: list[bytes] = []
    cmd = encode_command("GETJOB", "NOHANG", "COUNT", count, "FROM", queue)
    reader = hiredis.Reader()
    with socket.create_connection((HOST, port), timeout=60) as s:
        while True:
            s.sendall(cmd)
            reply = reader.gets()
            while reply is False:
                reader.feed(_recv(s, port))
                reply = reader.gets()
            if not reply:                      # nil: the queue is empty
                return ids
            if isinstance(reply, hiredis.ReplyError):
                raise RuntimeError(f"GETJOB on port {port}: {reply}")
            ids.extend(job[1] for job in reply)


def pipelined(port: int, commands: list[bytes], connections: int = 10,
              window: int = 64) -> None:
    """Send pre-encoded commands over ``connections`` connections (a thread
    each), ``window`` of them in flight on each, until every reply is in."""
    errors: list[BaseException] = []

    def drive(share: list[bytes]) -> None:
        reader = hiredis.Reader()
        try:
            with socket.create_connection((HOST, port), timeout=120) as s:
                for i in range(0, len(share), window):
                    batch = share[i:i + window]
                    s.sendall(b"".join(batch))
                    left = len(batch)
                    while left:
                        reply = reader.gets()
                        if reply is False:
                            reader.feed(_recv(s, port))
                        elif isinstance(reply, hiredis.ReplyError):
                            raise RuntimeError(f"port {port}: {reply}")
                        else:
                            left -= 1
        except BaseException as e:              # re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=drive, args=(commands[k::connections],))
               for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------------
# --profile: py-spy on the Disquette nodes
# ---------------------------------------------------------------------------

class Profiler:
    """While on, attaches ``py-spy record --native`` (by function) to every
    Disquette node started; ``stop()`` then ``report()`` prints each node's
    functions by self time (the leaf frame of each sample). With --native the
    C underneath shows (uvloop, the compiled reader, the syscalls, the GC)
    instead of being charged to the Python function that called it; samples are
    wall-clock, so time the node spends waiting for a CPU on a loaded machine
    shows in the call it was in (often write or epoll_pwait)."""

    def __init__(self, rate: int = 250) -> None:
        exe = shutil.which("py-spy", path=os.pathsep.join(
            [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        if exe is None:
            raise SystemExit("--profile needs py-spy: pip install -e '.[bench]'")
        self.exe, self.rate = exe, rate
        self.runs: list[tuple[Server, subprocess.Popen, str]] = []
        # pid -> (on CPU s, waiting for a CPU s), wall s: from attach to stop
        self.sched: dict[int, tuple[tuple[float, float], float]] = {}
        self.dir = temp_dir("pyspy-bench-")
        on_disquette_start.append(self.attach)

    def attach(self, server: Server) -> None:
        out = os.path.join(self.dir, f"{server.port}.txt")
        log = open(os.path.join(self.dir, f"{server.port}.log"), "wb")
        argv = [self.exe, "record", "--pid", str(server.pid), "--format", "raw", "--function",
                "--native", "--rate", str(self.rate), "-o", out]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 10
        while b"Sampling" not in Path(log.name).read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"py-spy did not attach to {server}: "
                                   f"{Path(log.name).read_text(errors='replace')[-500:]}")
            time.sleep(0.05)
        self.runs.append((server, proc, out))
        self.sched[server.pid] = (schedstat(server.pid), time.monotonic())

    def stop(self) -> None:
        on_disquette_start.remove(self.attach)
        for server, proc, _ in self.runs:
            (cpu0, wait0), t0 = self.sched[server.pid]
            if server.proc.poll() is None:
                cpu, wait = schedstat(server.pid)
                self.sched[server.pid] = ((cpu - cpu0, wait - wait0), time.monotonic() - t0)
            else:
                del self.sched[server.pid]          # stopped inside the row
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)    # py-spy writes its file on Ctrl-C
        for _, proc, _ in self.runs:
            proc.wait(60)

    def report(self, top: int = 25) -> None:
        for server, _, out in self.runs:
            self_samples: dict[str, int] = {}
            total_samples: dict[str, int] = {}
            n = 0
            if os.path.exists(out):
                with open(out) as f:
                    for line in f:
                        stack, _, count = line.rstrip("\n").rpartition(" ")
                        frames, k = stack.split(";"), int(count)
                        n += k
                        self_samples[frames[-1]] = self_samples.get(frames[-1], 0) + k
                        for fr in set(frames):
                            total_samples[fr] = total_samples.get(fr, 0) + k
            print(f"\npy-spy --native, node on port {server.port} (pid {server.pid}): {n:,} "
                  f"samples at {self.rate}/s; top {top} functions by self time "
                  f"(epoll_pwait: idle)")
            if server.pid in self.sched:
                (cpu, wait), wall = self.sched[server.pid]
                print(f"its main thread over {wall:.1f} s: on a CPU {cpu:.1f} s, waiting for "
                      f"one {wait:.1f} s (/proc/PID/schedstat; the rest idle)")
            print(f"{'self':>7}  {'total':>7}  function (file)")
            for fr, k in sorted(self_samples.items(), key=lambda x: -x[1])[:top]:
                print(f"{100 * k / max(n, 1):6.1f}%  {100 * total_samples[fr] / max(n, 1):6.1f}%  "
                      f"{_short_frame(fr)}")


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds a process's main thread has run on a CPU, and waited runnable
    for one (/proc/PID/schedstat)."""
    with open(f"/proc/{pid}/schedstat") as f:
        on_cpu, waiting = f.read().split()[:2]
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def _short_frame(frame: str) -> str:
    """'handle (/long/path/broker/node.py:12)' -> 'handle (broker/node.py:12)'."""
    name, _, where = frame.partition(" (")
    root = str(REPO_ROOT) + os.sep
    where = where.replace(root, "")
    return f"{name} ({where}" if where else name
