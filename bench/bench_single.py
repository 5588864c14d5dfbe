#!/usr/bin/env python3
"""One Disquette node against the C Disque and Redis, side by side (issues 2 and 24).

    make bench                               # or: .venv/bin/python bench/bench_single.py
    DISQUE_SERVER=/path/to/disque-server .venv/bin/python bench/bench_single.py --quick
    .venv/bin/python bench/bench_single.py --only addjob,getjob --rounds 5
    .venv/bin/python bench/bench_single.py --profile addjob   # where our microseconds go

The servers run at the same time on free loopback ports: our node, the C Disque
(``disque-server`` taken from the DISQUE_SERVER environment variable, built
outside this repository; without it its column is left out and the rows whose
target is against Disque print "-" and "n/a") and Debian's redis-server, which
answers the Redis equivalents (LPUSH, RPOP) as a reference. They are driven by
``redis-benchmark`` with 50 clients and 100-byte bodies; every throughput figure
is measured in rounds that rotate which server goes first, so load from
whatever else runs on the machine hits them alike, and the ratio is the median
of the rounds' ours/Disque ratios. ``--quick`` runs every row at a tenth of its
size, one round.

Rows (``--only`` takes their names, comma-separated):

  addjob         ADDJOB q <100 B> 0, -c 50        (LPUSH for Redis)  >= 0.9x Disque
  addjob-p16     the same with -P 16                                 >= 1.2x Disque
  getjob         GETJOB NOHANG FROM q (RPOP; queues pre-filled)      >= 0.9x Disque
  addjob-4k      ADDJOB with a 4 KB body                             >= 0.9x Disque
  rss            RSS bytes per queued job after 1M ADDJOBs (pipelined)
                 (Redis: per LPUSHed element; where the bytes go:
                 bench/job_bytes.py)                                 <= 0.75x Disque
                 (issue 39: the 0.5x of issue 24 is withdrawn)
  stall          longest PING round trip of one more client while 2M
                 ADDJOBs arrive (-c 50 -P 64)                        <= 1.5x Disque
  ack-stall      longest PING round trip while 1M live jobs, fetched by
                 GETJOB COUNT, are acked (ACKJOB pipelined; Redis: RPOP) <= 25 ms
  rss-cycle      RSS after 1M jobs added, fetched and acked, against RSS
                 at start (same run as ack-stall)                    <= 1.5x
  ceiling...     the ceiling of the row above it: the same requests answered
                 by a do-nothing RESP server in plain Python on the same event
                 loop (bench/ceiling_server.py); no target
  ceiling-rss    the rss row's ceiling: the same 1M ADDJOBs held by
                 ceiling_server.py --hold, which keeps only each job's id and
                 body (two bytes objects, a dict entry, a deque slot); no target

``--profile ROW`` runs that one row once with py-spy recording our node (the
``bench`` extra installs it) and prints its functions by self time, beside the
table, so a MISS can be explained.

To add a row, write a function ``ctx -> Result`` and append a ``Metric`` to
METRICS; bench/common.py has the process, redis-benchmark, stall and RSS
helpers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from common import (
    PingStall, Profiler, Server, body, bulk_load, call_bulk, call_int, disque_path,
    encode_command, environment, fetch_job_ids, load_average, median, parse_bench_args,
    pipelined, redis_benchmark, settle, start_ceiling, start_disque, start_disquette, start_redis,
)

BODY = body(100)
BODY_4K = body(4096)


@dataclass
class Result:
    ours: float
    disque: float | None        # None: DISQUE_SERVER unset
    redis: float | None
    unit: str                   # "rps", "B/job", "ms", "x", "ms p50"
    ratio: float | None = None  # ours / Disque; rows measured in rounds give the
                                # median of the per-round ratios
    redis_unit: str = ""        # when it differs ("B/elem")

    def __post_init__(self) -> None:
        if self.ratio is None and self.disque:
            self.ratio = self.ours / self.disque


@dataclass
class Metric:
    name: str                          # what --only and --profile select
    title: str                         # row label
    kind: str                          # "min-ratio": ours/Disque >= target;
                                       # "max-ratio": ours/Disque <= target;
                                       # "max": ours <= target (needs no Disque);
                                       # "info": no target (the ceilings)
    target: float | None
    run: Callable[["Context"], Result]


class Context:
    """Run options, plus one Disquette node, one Disque (when DISQUE_SERVER is
    set) and one redis-server shared by the throughput rows (started on first use)."""

    def __init__(self, args) -> None:
        self.args = args
        self.quick = args.quick
        self.rounds = args.rounds or (1 if args.quick or args.profile else 3)
        self.has_disque = disque_path() is not None
        self._servers: dict[str, Server] = {}
        self.cycles: dict[str, tuple[float, float]] = {}   # ack-stall and rss-cycle's run
        self.rss: dict[str, float] = {}                    # rss's figures, for ceiling-rss
        self.row = ""                                      # the row running (for the log)

    def n(self, full: int) -> int:
        """Request count for a row: ``full``, or a tenth of it with --quick."""
        n = full // 10 if self.quick else full
        return max(1000, int(n * self.args.scale))

    def _server(self, kind: str, start: Callable[[], Server]) -> Server:
        if kind not in self._servers:
            self._servers[kind] = start()
        return self._servers[kind]

    @property
    def ours(self) -> Server:
        return self._server("disquette", start_disquette)

    @property
    def disque(self) -> Server | None:
        return self._server("disque", start_disque) if self.has_disque else None

    @property
    def redis(self) -> Server:
        return self._server("redis", start_redis)

    @property
    def ceiling(self) -> Server:
        return self._server("ceiling", start_ceiling)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# For the rows that hold millions of jobs: above 75% of the default maxmemory
# (1 GB) Disque replicates externally only, and a lone node then refuses every
# ADDJOB (NOREPL ... I'm out of memory). Both get the same room.
BIG_MAXMEMORY = ("--maxmemory", "8gb")


def fresh_servers(ctx: Context, big: bool = False) -> list[tuple[str, Callable[[], Server]]]:
    """For the rows that need just-started processes: (kind, start) of each side;
    ``big``: both job servers with BIG_MAXMEMORY."""
    extra = BIG_MAXMEMORY if big else ()
    sides = [("disquette", lambda: start_disquette(*extra))]
    if ctx.has_disque:
        sides.append(("disque", lambda: start_disque(*extra)))
    return sides + [("redis", start_redis)]


def count_queued(server: Server) -> int:
    return call_int(server.port, "LLEN" if server.kind == "redis" else "QLEN", "q")


# ---------------------------------------------------------------------------
# throughput rows
# ---------------------------------------------------------------------------

def side_by_side(ctx: Context, ours_cmd: list, redis_cmd: list, n: int,
                 pipeline: int = 1, prepare: Callable[[Server], None] | None = None,
                 ours: Server | None = None) -> Result:
    """Median requests/s over ctx.rounds rounds; which side goes first rotates.
    Disque runs ``ours_cmd`` too. The ratio is the median of the rounds' ours/
    Disque ratios: each round compares the servers under the same background load."""
    ours = ours or ctx.ours
    sides = [(ours, ours_cmd)]
    if ctx.disque is not None:
        sides.append((ctx.disque, ours_cmd))
    sides.append((ctx.redis, redis_cmd))
    rates: dict[str, list[float]] = {s.kind: [] for s, _ in sides}
    ratios = []
    for r in range(ctx.rounds):
        k = r % len(sides)
        for server, cmd in sides[k:] + sides[:k]:
            server.flush()
            if prepare is not None:
                prepare(server)
            settle(server, 0.2)
            rates[server.kind].append(redis_benchmark(server.port, cmd, n, pipeline=pipeline))
        line = ", ".join(f"{s.kind} {rates[s.kind][-1]:,.0f} rps" for s, _ in sides)
        if ctx.disque is not None:
            ratios.append(rates[ours.kind][-1] / rates["disque"][-1])
            line += f", ratio {ratios[-1]:.2f}x"
        log(f"  {ctx.row} round {r + 1}/{ctx.rounds}: {line}")
    for server, _ in sides:
        server.flush()
    return Result(median(rates[ours.kind]),
                  median(rates["disque"]) if ctx.disque is not None else None,
                  median(rates["redis"]), "rps", median(ratios) if ratios else None)


def run_addjob(ctx: Context, ours: Server | None = None) -> Result:
    return side_by_side(ctx, ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(200_000), ours=ours)


def run_addjob_p16(ctx: Context, ours: Server | None = None) -> Result:
    return side_by_side(ctx, ["ADDJOB", "q", BODY, "0"], ["LPUSH", "q", BODY],
                        ctx.n(1_000_000), pipeline=16, ours=ours)


def run_addjob_4k(ctx: Context, ours: Server | None = None) -> Result:
    # 100k 4 KB jobs: 400 MB held by each side at the end of its run.
    return side_by_side(ctx, ["ADDJOB", "q", BODY_4K, "0"],
                        ["LPUSH", "q", BODY_4K], ctx.n(100_000), ours=ours)


def run_getjob(ctx: Context, ours: Server | None = None) -> Result:
    n = ctx.n(200_000)

    def prefill(server: Server) -> None:
        if server.kind == "ceiling":
            return                          # answers GETJOB without holding jobs
        # More than n, so the queue never runs dry during the run.
        want = n + n // 10 + 1000
        cmd = ["LPUSH", "q", BODY] if server.kind == "redis" else ["ADDJOB", "q", BODY, "0"]
        bulk_load(server.port, cmd, want)
        have = count_queued(server)
        if have < n + 50:   # 50 clients may overshoot n by one request each
            raise RuntimeError(f"{server}: pre-filled {have} < {n}")

    return side_by_side(ctx, ["GETJOB", "NOHANG", "FROM", "q"], ["RPOP", "q"], n,
                        prepare=prefill, ours=ours)


def ceiling_of(run: Callable[..., Result]) -> Callable[[Context], Result]:
    """The same row with bench/ceiling_server.py in our place."""
    return lambda ctx: run(ctx, ours=ctx.ceiling)


# ---------------------------------------------------------------------------
# memory and stalls: fresh processes, one after the other
# ---------------------------------------------------------------------------

def rss_per_item(server: Server, n: int) -> tuple[float, int]:
    settle(server, 0.5)
    before = server.rss()
    cmd = ["LPUSH", "q", BODY] if server.kind == "redis" else ["ADDJOB", "q", BODY, "0"]
    bulk_load(server.port, cmd, n, pipeline=64)
    settle(server, 1.0)
    have = count_queued(server)
    return (server.rss() - before) / have, have


def rss_figures(ctx: Context, sides: list[tuple[str, Callable[[], Server]]]) -> dict[str, float]:
    """RSS per item of each side, each a fresh process (so 'before' is a
    just-started server); a side measured earlier in this run is not run again."""
    n = ctx.n(1_000_000)
    for kind, start in sides:
        if kind in ctx.rss:
            continue
        server = start()
        try:
            ctx.rss[kind], have = rss_per_item(server, n)
            log(f"  rss: {kind} {ctx.rss[kind]:.0f} B per item over {have:,} items")
        finally:
            server.stop()
    return ctx.rss


def run_rss(ctx: Context) -> Result:
    per = rss_figures(ctx, fresh_servers(ctx))
    return Result(per["disquette"], per.get("disque"), per["redis"], "B/job",
                  redis_unit="B/elem")


def run_rss_ceiling(ctx: Context) -> Result:
    sides = [("ceiling", lambda: start_ceiling(hold=True)), *fresh_servers(ctx)[1:]]
    per = rss_figures(ctx, sides)
    return Result(per["ceiling"], per.get("disque"), per["redis"], "B/job",
                  redis_unit="B/elem")


def run_stall(ctx: Context) -> Result:
    """Fresh processes: the stall grows with the jobs the node holds (the GC)."""
    n = ctx.n(2_000_000)
    stall: dict[str, float] = {}
    for kind, start in fresh_servers(ctx, big=True):
        server = start()
        try:
            cmd = ["LPUSH", "q", BODY] if kind == "redis" else ["ADDJOB", "q", BODY, "0"]
            with PingStall(server.port) as p:
                bulk_load(server.port, cmd, n, pipeline=64)
            stall[kind] = p.worst_ms
            log(f"  stall: {kind} {p.worst_ms:.1f} ms over {count_queued(server):,} items")
        finally:
            server.stop()
    return Result(stall["disquette"], stall.get("disque"), stall["redis"], "ms")


def registered_jobs(server: Server) -> int:
    for line in call_bulk(server.port, "INFO", "jobs").splitlines():
        if line.startswith(b"registered_jobs:"):
            return int(line.split(b":", 1)[1])
    raise RuntimeError(f"no registered_jobs in INFO jobs of {server}")


def life_cycle(server: Server, n: int) -> tuple[float, float]:
    """Add n jobs, fetch them all (GETJOB COUNT), then ack them pipelined (10
    connections, 64 ACKJOBs in flight on each) while pinger.py times PINGs;
    Redis LPUSHes and RPOPs instead. (longest PING ms, RSS after / RSS at start)"""
    settle(server, 0.5)
    start_rss = server.rss()
    if server.kind == "redis":
        bulk_load(server.port, ["LPUSH", "q", BODY], n, pipeline=64)
        commands = [encode_command("RPOP", "q")] * count_queued(server)
    else:
        bulk_load(server.port, ["ADDJOB", "q", BODY, "0"], n, pipeline=64)
        commands = [encode_command("ACKJOB", i) for i in fetch_job_ids(server.port, "q")]
    with PingStall(server.port) as p:
        pipelined(server.port, commands)
    settle(server, 1.0)
    left = count_queued(server) if server.kind == "redis" else registered_jobs(server)
    end_rss = server.rss()
    log(f"  cycle: {server.kind} {len(commands):,} items, longest PING {p.worst_ms:.1f} ms, "
        f"RSS {start_rss / 2**20:.0f} MB -> {end_rss / 2**20:.0f} MB ({left:,} left)")
    return p.worst_ms, end_rss / start_rss


def cycle(ctx: Context) -> dict[str, tuple[float, float]]:
    """ack-stall's and rss-cycle's one run per side, done once for both rows."""
    if not ctx.cycles:
        n = ctx.n(1_000_000)
        for kind, start in fresh_servers(ctx):
            server = start()
            try:
                ctx.cycles[kind] = life_cycle(server, n)
            finally:
                server.stop()
    return ctx.cycles


def run_ack_stall(ctx: Context) -> Result:
    c = cycle(ctx)
    return Result(c["disquette"][0], c["disque"][0] if "disque" in c else None,
                  c["redis"][0], "ms")


def run_rss_cycle(ctx: Context) -> Result:
    c = cycle(ctx)
    return Result(c["disquette"][1], c["disque"][1] if "disque" in c else None,
                  c["redis"][1], "x")


CEILING = "ceiling (do-nothing RESP server, same loop): "
METRICS: list[Metric] = [
    Metric("addjob", "ADDJOB, -c 50 (Redis: LPUSH)", "min-ratio", 0.9, run_addjob),
    Metric("ceiling", CEILING + "ADDJOB, -c 50", "info", None, ceiling_of(run_addjob)),
    Metric("addjob-p16", "ADDJOB, -c 50 -P 16", "min-ratio", 1.2, run_addjob_p16),
    Metric("ceiling-p16", CEILING + "ADDJOB, -c 50 -P 16", "info", None,
           ceiling_of(run_addjob_p16)),
    Metric("getjob", "GETJOB NOHANG, -c 50 (Redis: RPOP)", "min-ratio", 0.9, run_getjob),
    Metric("ceiling-getjob", CEILING + "GETJOB NOHANG, -c 50", "info", None,
           ceiling_of(run_getjob)),
    Metric("addjob-4k", "ADDJOB with 4 KB bodies, -c 50", "min-ratio", 0.9, run_addjob_4k),
    Metric("ceiling-4k", CEILING + "ADDJOB 4 KB, -c 50", "info", None, ceiling_of(run_addjob_4k)),
    Metric("rss", "RSS per queued job (1M jobs, 100 B bodies)", "max-ratio", 0.75, run_rss),
    Metric("ceiling-rss", "ceiling (id and body as bytes in a dict and a deque, nothing else): "
           "RSS per job", "info", None, run_rss_ceiling),
    Metric("stall", "longest PING stall while 2M ADDJOBs arrive (-c 50 -P 64)", "max-ratio", 1.5,
           run_stall),
    Metric("ack-stall", "longest PING stall while 1M live jobs are acked", "max", 25,
           run_ack_stall),
    Metric("rss-cycle", "RSS after 1M jobs added, fetched, acked / at start", "max", 1.5,
           run_rss_cycle),
]


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------

def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "us":
        return f"{v:,.1f} us"
    if unit.startswith("ms"):
        decimals = 3 if v < 1 else 2 if v < 10 else 1 if v < 100 else 0
        return f"{v:,.{decimals}f} {unit}"
    return f"{v:,.0f} {unit}"


def fmt_target(kind: str, target: float, unit: str) -> str:
    if kind == "min-ratio":
        return f">= {target:g}x"
    if kind == "max-ratio":
        return f"<= {target:g}x"
    return f"<= {target:g}x" if unit == "x" else f"<= {target:g} {unit}"


def cells(title: str, kind: str, target: float | None, r: Result, has_disque: bool) -> list[str]:
    """One table row: metric, ours, [disque,] redis, ours/disque, target, result.
    Against-Disque targets print "n/a" when Disque did not run."""
    ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
    if kind == "info":
        target_s, result = "-", "-"
    else:
        target_s = fmt_target(kind, target, r.unit)
        if kind == "max":
            ok = r.ours <= target
        elif r.ratio is None:
            ok = None
        else:
            ok = r.ratio >= target if kind == "min-ratio" else r.ratio <= target
        result = "n/a" if ok is None else "PASS" if ok else "MISS"
    out = [title, fmt_value(r.ours, r.unit)]
    if has_disque:
        out.append(fmt_value(r.disque, r.unit))
    return out + [fmt_value(r.redis, r.redis_unit or r.unit), ratio, target_s, result]


def print_table(rows: list[list[str]], has_disque: bool) -> None:
    head = ["metric", "ours", *(["disque"] if has_disque else []), "redis", "ours/disque",
            "target", "result"]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for x in [head, None, *rows]:
        if x is None:
            print(line)
            continue
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(x, widths))))
    print(line)


def select(args, names: list[str]) -> list[str]:
    """The row names --only / --profile select (all when neither is given).
    Names of the other script's rows are passed over: `make bench` hands the same
    BENCH_ARGS to bench_single.py and bench_cluster.py."""
    wanted = [args.profile] if args.profile else args.names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        log(f"{args.parser.prog}: passing over rows not here: {', '.join(unknown)} "
            f"(rows: {', '.join(names)})")
    return [n for n in names if not wanted or n in wanted]


def add_profile_option(ap) -> None:
    ap.add_argument("--profile", default="", metavar="ROW",
                    help="run ROW once with py-spy on our node(s); print functions by self time")


def measure_rows(rows: list, measure: Callable[..., list[str]],
                 profiler: Profiler | None) -> list[list[str]]:
    """Each row's table cells, ``measure(row)``; py-spy stops after the last."""
    try:
        return [measure(row) for row in rows]
    finally:
        if profiler is not None:
            profiler.stop()


def report(table: list[list[str]], has_disque: bool, quick: bool, rounds: int,
           profiler: Profiler | None) -> None:
    """The table, the load average after it, and --profile's functions."""
    print_table(table, has_disque)
    print(f"load average at the end: {load_average()}; {rounds} round(s) per throughput row"
          + ("; --quick: every row at a tenth of its size" if quick else ""))
    if profiler is not None:
        print("(the row ran once under py-spy: its figures are not the benchmark's)")
        profiler.report()


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [m.name for m in METRICS],
                            extra=add_profile_option)
    chosen = select(args, [m.name for m in METRICS])
    if not chosen:
        return 0
    profiler = Profiler() if args.profile else None
    ctx = Context(args)
    print(environment(ctx.ours), flush=True)
    measure_metrics(ctx, METRICS, chosen, profiler)
    return 0


def measure_metrics(ctx, metrics: list[Metric], chosen: list[str],
                    profiler: Profiler | None) -> None:
    """The chosen metrics' rows, then the report. ``ctx``: what their ``run``
    takes, with ``row`` (set to the row running), ``has_disque``, ``quick``
    and ``rounds``."""
    def measure(m: Metric) -> list[str]:
        log(f"{m.name}: {m.title}")
        ctx.row = m.name
        return cells(m.title, m.kind, m.target, m.run(ctx), ctx.has_disque)

    table = measure_rows([m for m in metrics if m.name in chosen], measure, profiler)
    report(table, ctx.has_disque, ctx.quick, ctx.rounds, profiler)


if __name__ == "__main__":
    sys.exit(main())
