#!/usr/bin/env python3
"""One Disquette node against Debian's redis-server, side by side (issue 2).

    make bench                               # or: .venv/bin/python bench/bench_single.py
    .venv/bin/python bench/bench_single.py --quick
    .venv/bin/python bench/bench_single.py --only addjob,getjob --rounds 5

Both servers run at the same time on free loopback ports and are driven by
``redis-benchmark`` with 50 clients; every throughput figure is measured in
rounds that alternate which server goes first, so load from whatever else runs on
the machine hits both alike. The table shows the median of the rounds.

Rows (``--only`` takes their names, comma-separated):

  addjob      ADDJOB q <100 B> 0      vs  LPUSH q <100 B>          target >= 0.9x
  addjob-p16  the same with -P 16                                     target >= 0.4x
  getjob      GETJOB NOHANG FROM q    vs  RPOP q (queues pre-filled)  target >= 0.95x
  rss         RSS bytes per queued job after 1M ADDJOBs (pipelined),
              Redis RSS per LPUSHed element for reference           target <= 520 B
  stall       longest PING round trip of one more client while 2M ADDJOBs
              arrive pipelined (-c 50 -P 64), LPUSH for Redis         target <= 50 ms
  ceiling     the ceiling: a do-nothing RESP server in plain Python on the same
              event loop (bench/ceiling_server.py) answering ADDJOB, vs LPUSH
  ceiling-p16 the same with -P 16

To add a row (e.g. ADDJOB REPLICATE 3 on a 3-node cluster), write a function
``ctx -> Result`` and append a ``Metric`` to METRICS; bench/common.py has the
process, redis-benchmark and RSS helpers (``start_disquette_cluster``...).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from common import (
    HOST, Server, body, bulk_load, call_int, median, parse_bench_args, redis_benchmark, settle,
    start_ceiling, start_disquette, start_redis,
)

BODY = body(100)


@dataclass
class Result:
    ours: float
    redis: float | None
    unit: str                   # "rps" or "B/job"
    ratio: float | None = None  # default ours / redis; rows measured in rounds
                                # give the median of the per-round ratios
    redis_unit: str = ""        # when it differs ("B/elem")

    def __post_init__(self) -> None:
        if self.ratio is None and self.redis:
            self.ratio = self.ours / self.redis


@dataclass
class Metric:
    name: str                          # what --only selects
    title: str                         # row label
    kind: str                          # "ratio": ours/redis >= target; "max": ours <= target;
                                       # "info": no target (the ceiling)
    target: float | None
    run: Callable[["Context"], Result]


class Context:
    """Run options, plus one Disquette node and one redis-server shared by the
    throughput rows (started on first use)."""

    def __init__(self, args) -> None:
        self.args = args
        self.quick = args.quick
        self.rounds = args.rounds or (1 if args.quick else 3)
        self._ours: Server | None = None
        self._redis: Server | None = None
        self._ceiling: Server | None = None

    def n(self, full: int) -> int:
        """Request count for a row: ``full``, or a fifth of it with --quick."""
        n = full // 5 if self.quick else full
        return max(1000, int(n * self.args.scale))

    @property
    def ours(self) -> Server:
        if self._ours is None:
            self._ours = start_disquette()
        return self._ours

    @property
    def redis(self) -> Server:
        if self._redis is None:
            self._redis = start_redis()
        return self._redis

    @property
    def ceiling(self) -> Server:
        if self._ceiling is None:
            self._ceiling = start_ceiling()
        return self._ceiling


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------

def flush(server: Server) -> None:
    if server.kind == "ceiling":
        return                              # holds nothing
    r = server.call("DEBUG", "FLUSHALL") if server.kind == "disquette" else server.call("FLUSHALL")
    if r != b"+OK":
        raise RuntimeError(f"flush {server}: {r!r}")


def side_by_side(ctx: Context, name: str, ours_cmd: list, redis_cmd: list, n: int,
                 pipeline: int = 1, prepare: Callable[[Server], None] | None = None,
                 ours: Server | None = None) -> Result:
    """Median requests/s over ctx.rounds rounds; the side going first alternates.
    The ratio is the median of the rounds' ratios: each round compares the two
    servers under the same background load."""
    ours = ours or ctx.ours
    rates: dict[str, list[float]] = {ours.kind: [], "redis": []}
    ratios = []
    for r in range(ctx.rounds):
        sides = [(ours, ours_cmd), (ctx.redis, redis_cmd)]
        if r % 2:
            sides.reverse()
        for server, cmd in sides:
            flush(server)
            if prepare is not None:
                prepare(server)
            settle(server, 0.2)
            rates[server.kind].append(redis_benchmark(server.port, cmd, n, pipeline=pipeline))
        o, d = rates[ours.kind][-1], rates["redis"][-1]
        ratios.append(o / d)
        log(f"  {name} round {r + 1}/{ctx.rounds}: ours {o:,.0f} rps, redis {d:,.0f} rps, "
            f"ratio {o / d:.2f}x")
    for server in (ours, ctx.redis):
        flush(server)
    return Result(median(rates[ours.kind]), median(rates["redis"]), "rps", median(ratios))


def run_addjob(ctx: Context) -> Result:
    return side_by_side(ctx, "addjob", ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(200_000))


def run_addjob_p16(ctx: Context) -> Result:
    return side_by_side(ctx, "addjob-p16", ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(1_000_000), pipeline=16)


def run_getjob(ctx: Context) -> Result:
    n = ctx.n(200_000)

    def prefill(server: Server) -> None:
        # More than n, so the queue never runs dry during the run.
        want = n + n // 10 + 1000
        if server.kind == "disquette":
            bulk_load(server.port, ["ADDJOB", "q", BODY, "0"], want)
            have = call_int(server.port, "QLEN", "q")
        else:
            bulk_load(server.port, ["LPUSH", "q", BODY], want)
            have = call_int(server.port, "LLEN", "q")
        if have < n + 50:   # 50 clients may overshoot n by one request each
            raise RuntimeError(f"{server}: pre-filled {have} < {n}")

    return side_by_side(ctx, "getjob", ["GETJOB", "NOHANG", "FROM", "q"], ["RPOP", "q"], n,
                        prepare=prefill)


def run_ceiling(ctx: Context) -> Result:
    return side_by_side(ctx, "ceiling", ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(200_000), ours=ctx.ceiling)


def run_ceiling_p16(ctx: Context) -> Result:
    return side_by_side(ctx, "ceiling-p16", ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(1_000_000), pipeline=16, ours=ctx.ceiling)


def rss_per_item(server: Server, cmd: list, count_cmd: list, n: int) -> tuple[float, int]:
    settle(server, 0.5)
    before = server.rss()
    bulk_load(server.port, cmd, n, pipeline=64)
    settle(server, 1.0)
    have = call_int(server.port, *count_cmd)
    after = server.rss()
    return (after - before) / have, have


def run_rss(ctx: Context) -> Result:
    """Fresh processes, so 'before' is a just-started server."""
    n = ctx.n(1_000_000)
    ours = start_disquette()
    try:
        per_job, have = rss_per_item(ours, ["ADDJOB", "q", BODY, "0"], ["QLEN", "q"], n)
        log(f"  rss: ours {per_job:.0f} B/job over {have:,} queued jobs")
    finally:
        ours.stop()
    redis = start_redis()
    try:
        per_elem, rhave = rss_per_item(redis, ["LPUSH", "q", BODY], ["LLEN", "q"], n)
        log(f"  rss: redis {per_elem:.0f} B/element over {rhave:,} elements")
    finally:
        redis.stop()
    return Result(per_job, per_elem, "B/job", redis_unit="B/elem")


def longest_ping_stall(server: Server, cmd: list, n: int) -> float:
    """The longest PING round trip (ms) seen by one more client, pinging every
    millisecond, while ``n`` commands arrive from 50 clients pipelining 64 each."""
    stop = threading.Event()
    worst = [0.0]

    def pinger() -> None:
        with socket.create_connection((HOST, server.port)) as s:
            while not stop.is_set():
                t0 = time.perf_counter()
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = b""
                while not reply.endswith(b"\r\n"):
                    reply += s.recv(64)
                worst[0] = max(worst[0], time.perf_counter() - t0)
                time.sleep(0.001)

    t = threading.Thread(target=pinger, daemon=True)
    t.start()
    try:
        bulk_load(server.port, cmd, n, pipeline=64)
    finally:
        stop.set()
        t.join()
    return worst[0] * 1000


def run_stall(ctx: Context) -> Result:
    """Fresh processes: the stall grows with the jobs the node holds (the GC)."""
    n = ctx.n(2_000_000)
    ours = start_disquette()
    try:
        stall = longest_ping_stall(ours, ["ADDJOB", "q", BODY, "0"], n)
        log(f"  stall: ours {stall:.0f} ms over {call_int(ours.port, 'QLEN', 'q'):,} jobs")
    finally:
        ours.stop()
    redis = start_redis()
    try:
        rstall = longest_ping_stall(redis, ["LPUSH", "q", BODY], n)
        log(f"  stall: redis {rstall:.0f} ms")
    finally:
        redis.stop()
    return Result(stall, rstall, "ms", ratio=None)


METRICS: list[Metric] = [
    Metric("addjob", "ADDJOB vs LPUSH, -c 50", "ratio", 0.9, run_addjob),
    Metric("addjob-p16", "ADDJOB vs LPUSH, -c 50 -P 16", "ratio", 0.4, run_addjob_p16),
    Metric("getjob", "GETJOB NOHANG vs RPOP, -c 50", "ratio", 0.95, run_getjob),
    Metric("rss", "RSS per queued job (100 B body)", "max", 520, run_rss),
    Metric("stall", "longest PING round trip while 2M ADDJOBs arrive (-c 50 -P 64)", "max", 50,
           run_stall),
    Metric("ceiling", "ceiling (do-nothing RESP, same loop) vs LPUSH, -c 50", "info", None,
           run_ceiling),
    Metric("ceiling-p16", "ceiling vs LPUSH, -c 50 -P 16", "info", None, run_ceiling_p16),
]


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------

def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f} {unit}"


def row(m: Metric, r: Result) -> list[str]:
    ratio = r.ratio
    if m.kind == "info":
        return [m.title, fmt_value(r.ours, r.unit), fmt_value(r.redis, r.unit),
                f"{ratio:.2f}x" if ratio is not None else "-", "-", "-"]
    if m.kind == "ratio":
        ok = ratio is not None and ratio >= m.target
        target = f">= {m.target:g}x"
    else:
        ok = r.ours <= m.target
        target = f"<= {m.target:g} {r.unit}"
    return [m.title, fmt_value(r.ours, r.unit), fmt_value(r.redis, r.redis_unit or r.unit),
            f"{ratio:.2f}x" if ratio is not None else "-", target, "PASS" if ok else "MISS"]


def print_table(rows: list[list[str]]) -> None:
    head = ["metric", "ours", "redis", "ratio", "target", "result"]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for x in [head, None, *rows]:
        if x is None:
            print(line)
            continue
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(x, widths))))
    print(line)


def environment() -> str:
    try:
        import uvloop  # noqa: F401  (optional: not on Windows)
        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    try:
        import hiredis  # optional: the pure-Python reader runs without it
        reader = f"hiredis {hiredis.__version__}"
    except ImportError:
        reader = "pure-Python reader"
    rv = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    redis_version = next((w[2:] for w in rv if w.startswith("v=")), "?")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"Python {platform.python_version()} ({loop}, {reader}), redis-server {redis_version}, "
            f"{os.cpu_count()} CPUs, load average {load}")


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [m.name for m in METRICS])
    names = args.names
    unknown = set(names) - {m.name for m in METRICS}
    if unknown:
        args.parser.error(f"unknown row(s): {', '.join(sorted(unknown))}")
    metrics = [m for m in METRICS if not names or m.name in names]

    print(environment(), flush=True)
    ctx = Context(args)
    rows = []
    for m in metrics:
        log(f"{m.name}: {m.title}")
        rows.append(row(m, m.run(ctx)))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
