#!/usr/bin/env python3
"""The job cycle, durable mode and replicated latency, side by side (issue 39).

    make bench                               # runs bench_single.py, bench_cluster.py, this...
    DISQUE_SERVER=/path/to/disque-server .venv/bin/python bench/bench_cycle.py --quick
    .venv/bin/python bench/bench_cycle.py --only cycle,gen-check --rounds 5
    .venv/bin/python bench/bench_cycle.py --profile cycle   # py-spy on our node(s)

Our node(s), the C Disque (``disque-server`` from the DISQUE_SERVER
environment variable, built outside this repository; without it the rows
judged against Disque print "n/a") and Debian's redis-server, on the nearest
workload, run side by side on free loopback ports; every figure is measured in
rounds that rotate which server goes first, and the ratio is the median of the
rounds' ours / Disque ratios. 100-byte bodies.

The cycle rows are driven by ``bench/cyclegen.c`` (built here with the C
compiler): 50 connections, one request in flight each, each looping over a
sequence of commands, the job id of one reply sent in the next. The
``gen-check`` row shows it is not the limit: it and ``redis-benchmark`` drive
Disque's ADDJOB at the same rate in the same run. The durable rows and the
p99 row are driven by ``redis-benchmark``.

Rows (``--only`` takes their names, comma-separated):

  gen-check      ADDJOB -c 50 on Disque: cyclegen / redis-benchmark       >= 0.9x
  cycle          the job cycle, one node: ADDJOB q <100 B> 0 -> GETJOB TIMEOUT 1000
                 COUNT 1 FROM q -> ACKJOB id, -c 50 (Redis: LPUSH ->
                 BRPOPLPUSH q p 1 -> LREM p 1 value)                      >= 1.1x Disque
  ceiling-cycle  the same three requests answered by the do-nothing RESP
                 server on the same event loop (bench/ceiling_server.py)
  cycle-r3       the cycle on 3 nodes, ADDJOB ... REPLICATE 3, clients on one
                 node (Redis: a master and 2 replicas, WAIT 2 0 after LPUSH) >= 1.1x Disque
  rtt            one connection, one command at a time: the cycle's ADDJOB,
                 GETJOB and ACKJOB round trips (median, us: on a shared
                 machine the mean is the other load's), a row each        <= 1.1x Disque's
  aof-everysec   ADDJOB -c 50, appendonly yes, appendfsync everysec (each
                 server its own AOF on the same disk; Redis: LPUSH)       >= 1.0x Disque
  aof-everysec-p16  the same, -P 16                                       >= 1.2x Disque
  aof-always     ADDJOB -c 50, appendfsync always                         >= 1.0x Disque
  aof-always-p16 the same, -P 16                                          >= 1.0x Disque
  aof-always-p99 ADDJOB p99 latency, appendfsync always, -c 10            <= 1.2x Disque's
  r3-p50         ADDJOB REPLICATE 3 p50 latency, -c 10, 3 nodes (Redis:
                 LPUSH + WAIT 2 0, a master and 2 replicas)              <= 1.1x Disque's
  r3-5nodes      ADDJOB REPLICATE 3, -c 50, 5 nodes (Redis: LPUSH + WAIT 2 0,
                 a master and 4 replicas)                                >= 1.0x Disque
  worker         the SDK Worker end to end (no-op async handler, 20,000 jobs
                 added meanwhile by cyclegen -c 50) against its own node's
                 cycle rate (the cycle row's load, same node, same round)  >= 0.8x

Each log line of a round gives every server's CPU use over the run (busy %:
user + system time / wall time), to tell a saturated server from one waiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

from bench_sdk import async_noop, sdk_worker
from bench_single import Metric, Result, add_profile_option, log, measure_metrics, select
from common import (
    HOST, REPO_ROOT, Profiler, Server, body, cpu_seconds, disque_path,
    environment, info, median, parse_bench_args, redis_benchmark, redis_benchmark_csv,
    settle, start_ceiling, start_disque, start_disque_cluster, start_disquette,
    start_disquette_cluster, start_redis, temp_dir, wait_cluster_joined,
)

BODY = body(100)
CLIENTS = 50
ADDJOB = ["ADDJOB", "q", BODY, "0"]
GETJOB = ["GETJOB", "TIMEOUT", "1000", "COUNT", "1", "FROM", "q"]
ACKJOB = ["ACKJOB", "{id}"]
CYCLE = [ADDJOB, GETJOB, ACKJOB]
SYNC3 = ADDJOB + ["REPLICATE", "3"]
CYCLE_R3 = [SYNC3, GETJOB, ACKJOB]
LPUSH = ["LPUSH", "q", BODY]
REDIS_CYCLE = [LPUSH, ["BRPOPLPUSH", "q", "p", "1"], ["LREM", "p", "1", "{id}"]]
WAIT2 = ["WAIT", "2", "0"]
REDIS_CYCLE_R3 = [LPUSH, WAIT2, *REDIS_CYCLE[1:]]
# No automatic rewrite on any side during the durable rows.
NO_REWRITE = ("--auto-aof-rewrite-percentage", "0")


# ---------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------

_generator: list[str] = []


def generator() -> str:
    """bench/cyclegen.c built once per run (in a temp dir)."""
    if not _generator:
        out = os.path.join(temp_dir("cyclegen-"), "cyclegen")
        subprocess.run(["gcc", "-O2", "-o", out, str(REPO_ROOT / "bench" / "cyclegen.c")],
                       check=True)
        _generator.append(out)
    return _generator[0]


def cycle_argv(port: int, steps: list[list[str]], cycles: int, clients: int) -> list[str]:
    argv = [generator(), HOST, str(port), str(clients), str(cycles)]
    for k, step in enumerate(steps):
        argv += ([";"] if k else []) + step
    return argv


def cyclegen(port: int, steps: list[list[str]], cycles: int,
             clients: int = CLIENTS) -> dict[str, float]:
    """Run the generator: its figures (rate in cycles/s, stepN_mean_us,
    stepN_p50_us, stepN_p99_us, cycle_p50_us...)."""
    p = subprocess.run(cycle_argv(port, steps, cycles, clients), capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"cyclegen on port {port} failed: {p.stderr.strip()}")
    return {k: float(v) for k, v in (w.split("=") for w in p.stdout.split())}


# ---------------------------------------------------------------------------
# the servers: a set per kind of row, started on first use
# ---------------------------------------------------------------------------

@dataclass
class Side:
    kind: str                   # "disquette", "disque", "redis", "ceiling"
    nodes: list[Server]         # the clients talk to nodes[0]

    @property
    def entry(self) -> Server:
        return self.nodes[0]

    def flush(self) -> None:
        # (Redis's replicas follow their master's FLUSHALL.)
        for s in self.nodes[:1] if self.kind == "redis" else self.nodes:
            s.flush()
        settle(self.entry, 0.2)

    def cpu(self) -> float:
        return sum(cpu_seconds(self.entry.pid))


def start_redis_replicated(replicas: int, *directives: str) -> list[Server]:
    """A redis-server and ``replicas`` replicas of it, linked."""
    master = start_redis(*directives)
    nodes = [master] + [start_redis("--replicaof", HOST, str(master.port), *directives)
                        for _ in range(replicas)]
    deadline = time.monotonic() + 30
    while info(master.port, "replication").get("connected_slaves") != str(replicas) or any(
            info(s.port, "replication").get("master_link_status") != "up" for s in nodes[1:]):
        if time.monotonic() > deadline:
            raise RuntimeError("redis replicas did not link")
        time.sleep(0.1)
    return nodes


def aof_directives(fsync: str) -> tuple[str, ...]:
    return ("--appendonly", "yes", "--appendfsync", fsync, *NO_REWRITE)


class Context:
    """Run options and the sets of servers the rows share."""

    def __init__(self, args) -> None:
        self.args = args
        self.quick = args.quick
        self.rounds = args.rounds or (1 if args.quick or args.profile else 3)
        self.has_disque = disque_path() is not None
        self.sets: dict[str, list[Side]] = {}
        self.row = ""
        self.rtt_runs: dict[str, list[dict[str, float]]] = {}   # kind -> cyclegen's figures

    def n(self, full: int) -> int:
        n = full // 10 if self.quick else full
        return max(100, int(n * self.args.scale))

    def sides(self, name: str) -> list[Side]:
        """A set of servers: "plain" (no AOF, and the ceiling), "everysec",
        "always" (each its own AOF), "cluster3", "cluster5"."""
        if name not in self.sets:
            self.sets[name] = self._start(name)
        return self.sets[name]

    def _start(self, name: str) -> list[Side]:
        dq = self.has_disque
        if name == "plain":
            out = [Side("disquette", [start_disquette()])]
            out += [Side("disque", [start_disque()])] if dq else []
            return out + [Side("redis", [start_redis()]), Side("ceiling", [start_ceiling()])]
        if name in ("everysec", "always"):
            d = aof_directives(name)
            out = [Side("disquette", [start_disquette(*d)])]
            out += [Side("disque", [start_disque(*d)])] if dq else []
            return out + [Side("redis", [start_redis(*d)])]
        size = {"cluster3": 3, "cluster5": 5}[name]
        out = [Side("disquette", start_disquette_cluster(size))]
        if dq:
            out.append(Side("disque", start_disque_cluster(size)))
        for side in out:
            wait_cluster_joined(side.nodes)
        return out + [Side("redis", start_redis_replicated(size - 1))]


# ---------------------------------------------------------------------------
# rounds
# ---------------------------------------------------------------------------

def in_rounds(ctx: Context, sides: list[Side], run: Callable[[Side], float],
              unit: str, ours: str = "disquette", against: str = "disque",
              fmt: str = ",.0f") -> Result:
    """``run(side)`` once per side a round, the order rotating; each side
    flushed before its run. The ratio: the median of the rounds' ``ours`` /
    ``against`` (the sides named so)."""
    values: dict[str, list[float]] = {s.kind: [] for s in sides}
    ratios = []
    for r in range(ctx.rounds):
        k = r % len(sides)
        busy = {}
        for side in sides[k:] + sides[:k]:
            side.flush()
            cpu0, t0 = side.cpu(), time.monotonic()
            values[side.kind].append(run(side))
            busy[side.kind] = (side.cpu() - cpu0) / (time.monotonic() - t0)
        line = ", ".join(f"{s.kind} {values[s.kind][-1]:{fmt}} {unit} "
                         f"(busy {100 * busy[s.kind]:.0f}%)" for s in sides)
        if against in values:
            ratios.append(values[ours][-1] / values[against][-1])
            line += f", ratio {ratios[-1]:.2f}x"
        log(f"  {ctx.row} round {r + 1}/{ctx.rounds}: {line}")
    for side in sides:
        side.flush()
    mid = {k: median(v) for k, v in values.items()}
    return Result(mid[ours], mid.get(against), mid.get("redis"), unit,
                  median(ratios) if ratios else None)


def job_sides(ctx: Context, name: str) -> list[Side]:
    """Ours, Disque, Redis (not the ceiling)."""
    return [s for s in ctx.sides(name) if s.kind != "ceiling"]


# ---------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------

def run_gen_check(ctx: Context) -> Result:
    disque = next((s for s in ctx.sides("plain") if s.kind == "disque"), None)
    if disque is None:
        return Result(0.0, None, None, "rps")
    n = ctx.n(200_000)
    tools = [Side("cyclegen", disque.nodes), Side("redis-benchmark", disque.nodes)]
    return in_rounds(ctx, tools, lambda t: (
        cyclegen(t.entry.port, [ADDJOB], n)["rate"] if t.kind == "cyclegen"
        else redis_benchmark(t.entry.port, ADDJOB, n)), "rps",
        ours="cyclegen", against="redis-benchmark")


def cycle_rate(side: Side, n: int, steps=CYCLE, redis_steps=REDIS_CYCLE) -> float:
    return cyclegen(side.entry.port, redis_steps if side.kind == "redis" else steps, n)["rate"]


def run_cycle(ctx: Context) -> Result:
    n = ctx.n(100_000)
    return in_rounds(ctx, job_sides(ctx, "plain"), lambda s: cycle_rate(s, n), "cycles/s")


def run_ceiling_cycle(ctx: Context) -> Result:
    n = ctx.n(100_000)
    sides = [s for s in ctx.sides("plain") if s.kind in ("ceiling", "disque", "redis")]
    return in_rounds(ctx, sides, lambda s: cycle_rate(s, n), "cycles/s", ours="ceiling")


def run_cycle_r3(ctx: Context) -> Result:
    n = ctx.n(50_000)
    return in_rounds(ctx, job_sides(ctx, "cluster3"),
                     lambda s: cycle_rate(s, n, CYCLE_R3, REDIS_CYCLE_R3), "cycles/s")


def rtt(step: int) -> Callable[[Context], Result]:
    """One connection's round trips, the cycle's ``step`` (1 ADDJOB, 2 GETJOB,
    3 ACKJOB); the three rows share one run."""
    def run(ctx: Context) -> Result:
        runs = ctx.rtt_runs
        if not runs:
            n = ctx.n(30_000)

            def one(side: Side) -> float:
                steps = REDIS_CYCLE if side.kind == "redis" else CYCLE
                figures = cyclegen(side.entry.port, steps, n, clients=1)
                runs.setdefault(side.kind, []).append(figures)
                return figures["cycle_p50_us"]

            in_rounds(ctx, job_sides(ctx, "plain"), one, "us per cycle (p50)", fmt=".1f")
        field = f"step{step}_p50_us"
        per = {k: [f[field] for f in v] for k, v in runs.items()}
        ratios = ([a / b for a, b in zip(per["disquette"], per["disque"])]
                  if "disque" in per else [])
        return Result(median(per["disquette"]),
                      median(per["disque"]) if "disque" in per else None,
                      median(per["redis"]), "us", median(ratios) if ratios else None)
    return run


def durable(fsync: str, pipeline: int, full: int) -> Callable[[Context], Result]:
    def run(ctx: Context) -> Result:
        n = ctx.n(full)
        return in_rounds(ctx, ctx.sides(fsync), lambda s: redis_benchmark(
            s.entry.port, LPUSH if s.kind == "redis" else ADDJOB, n, pipeline=pipeline), "rps")
    return run


def run_always_p99(ctx: Context) -> Result:
    n = ctx.n(50_000)
    return in_rounds(ctx, ctx.sides("always"), lambda s: redis_benchmark_csv(
        s.entry.port, LPUSH if s.kind == "redis" else ADDJOB, n,
        clients=10)["p99_latency_ms"], "ms p99", fmt=".3f")


def run_r3_p50(ctx: Context) -> Result:
    n = ctx.n(50_000)
    return in_rounds(ctx, job_sides(ctx, "cluster3"), lambda s: cyclegen(
        s.entry.port, [LPUSH, WAIT2] if s.kind == "redis" else [SYNC3], n,
        clients=10)["cycle_p50_us"] / 1000, "ms p50", fmt=".3f")


def run_r3_5nodes(ctx: Context) -> Result:
    n = ctx.n(100_000)
    return in_rounds(ctx, job_sides(ctx, "cluster5"), lambda s: cyclegen(
        s.entry.port, [LPUSH, WAIT2] if s.kind == "redis" else [SYNC3], n)["rate"], "rps")


WORKER_JOBS = 20_000


def worker_rate(port: int, n: int) -> float:
    """Jobs/s through the SDK Worker (async no-op handler) while cyclegen -c 50
    adds the n jobs: n / the time from the first add to the n-th job handled."""
    class Node:
        addr = f"{HOST}:{port}"

    t0 = time.perf_counter()
    producer = subprocess.Popen(cycle_argv(port, [ADDJOB], n, CLIENTS),
                                stdout=subprocess.DEVNULL)
    started = time.perf_counter() - t0
    # (sdk_worker's time runs from the Worker's start to its n-th job.)
    elapsed = started + sdk_worker(Node, n, async_noop)     # type: ignore[arg-type]
    if producer.wait(60) != 0:
        raise RuntimeError("the producer failed")
    return n / elapsed


def run_worker(ctx: Context) -> Result:
    n_cycle = ctx.n(100_000)
    ours = job_sides(ctx, "plain")[0]
    modes = [Side("worker", ours.nodes), Side("cycle", ours.nodes)]
    r = in_rounds(ctx, modes, lambda m: worker_rate(m.entry.port, WORKER_JOBS)
                  if m.kind == "worker" else cycle_rate(m, n_cycle), "jobs/s",
                  ours="worker", against="cycle")
    return Result(r.ours, None, None, "jobs/s", r.ratio)


CEILING = "ceiling (do-nothing RESP server, same loop): "
METRICS: list[Metric] = [
    Metric("gen-check", "load generator check: ADDJOB -c 50 on Disque, cyclegen (ours column) "
           "vs redis-benchmark (disque column)", "min-ratio", 0.9, run_gen_check),
    Metric("cycle", "job cycle ADDJOB -> GETJOB TIMEOUT -> ACKJOB, -c 50, one node "
           "(Redis: LPUSH -> BRPOPLPUSH -> LREM)", "min-ratio", 1.1, run_cycle),
    Metric("ceiling-cycle", CEILING + "the cycle's requests, -c 50", "info", None,
           run_ceiling_cycle),
    Metric("cycle-r3", "job cycle, ADDJOB REPLICATE 3, 3 nodes, clients on one "
           "(Redis: + WAIT 2 0, 2 replicas)", "min-ratio", 1.1, run_cycle_r3),
    Metric("rtt", "round trip p50, one connection: ADDJOB (Redis: LPUSH)", "max-ratio", 1.1, rtt(1)),
    Metric("rtt", "round trip p50, one connection: GETJOB (Redis: BRPOPLPUSH)", "max-ratio", 1.1,
           rtt(2)),
    Metric("rtt", "round trip p50, one connection: ACKJOB (Redis: LREM)", "max-ratio", 1.1, rtt(3)),
    Metric("aof-everysec", "ADDJOB, appendfsync everysec, -c 50 (Redis: LPUSH)", "min-ratio",
           1.0, durable("everysec", 1, 200_000)),
    Metric("aof-everysec-p16", "ADDJOB, appendfsync everysec, -c 50 -P 16", "min-ratio", 1.2,
           durable("everysec", 16, 500_000)),
    Metric("aof-always", "ADDJOB, appendfsync always, -c 50", "min-ratio", 1.0,
           durable("always", 1, 100_000)),
    Metric("aof-always-p16", "ADDJOB, appendfsync always, -c 50 -P 16", "min-ratio", 1.0,
           durable("always", 16, 300_000)),
    Metric("aof-always-p99", "ADDJOB p99 latency, appendfsync always, -c 10", "max-ratio", 1.2,
           run_always_p99),
    Metric("r3-p50", "ADDJOB REPLICATE 3 p50 latency, -c 10, 3 nodes "
           "(Redis: LPUSH + WAIT 2 0)", "max-ratio", 1.1, run_r3_p50),
    Metric("r3-5nodes", "ADDJOB REPLICATE 3, -c 50, 5 nodes (Redis: LPUSH + WAIT 2 0, "
           "4 replicas)", "min-ratio", 1.0, run_r3_5nodes),
    Metric("worker", f"SDK Worker end to end, async no-op, {WORKER_JOBS:,} jobs, against its "
           "node's cycle rate (ratio column)", "min-ratio", 0.8, run_worker),
]


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0],
                            list(dict.fromkeys(m.name for m in METRICS)),
                            extra=add_profile_option)
    chosen = select(args, list(dict.fromkeys(m.name for m in METRICS)))
    if not chosen:
        return 0
    profiler = Profiler() if args.profile else None
    ctx = Context(args)
    print(environment(ctx.sides("plain")[0].entry), flush=True)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    measure_metrics(ctx, METRICS, chosen, profiler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
