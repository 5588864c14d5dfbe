#!/usr/bin/env python3
"""A 3-node Disquette cluster against one Debian redis-server, side by side (issue 3).

    make bench                                # runs bench_single.py, then this
    .venv/bin/python bench/bench_cluster.py
    .venv/bin/python bench/bench_cluster.py --quick
    .venv/bin/python bench/bench_cluster.py --only sync --rounds 5

A 3-node cluster (joined by CLUSTER MEET, every node reachable from every node)
and a redis-server run at the same time on free loopback ports and are driven by
``redis-benchmark`` with 50 clients, all against the first node; every figure is
measured in rounds that alternate which side goes first, so load from whatever
else runs on the machine hits both alike. The table shows the medians.

Rows (``--only`` takes their names, comma-separated), each vs ``LPUSH q <100 B>``
on the single redis-server with the same client count and pipelining:

  sync        ADDJOB q <100 B> 0 REPLICATE 3          the target: >= 0.4x
  sync-p16    the same with -P 16                      (reported, same 0.4x bar)
  async       ADDJOB q <100 B> 0 REPLICATE 3 ASYNC     (reported, same 0.4x bar)

The issue's target is the first row: a synchronously replicated ADDJOB (the
client's answer waits for GOTJOB from two peers) at 0.4x of a Redis LPUSH that
replicates nothing, all 50 clients on one node.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from bench_single import environment, print_table
from common import (
    Server, body, call_bulk, median, parse_bench_args, redis_benchmark, settle,
    start_disquette_cluster, start_redis, wait_cluster_joined,
)

BODY = body(100)
TARGET = 0.4
NODES = 3


@dataclass
class Row:
    name: str
    title: str
    ours_cmd: list
    pipeline: int
    full_n: int


ROWS = [
    Row("sync", "ADDJOB REPLICATE 3 vs LPUSH, -c 50",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"], 1, 100_000),
    Row("sync-p16", "ADDJOB REPLICATE 3 vs LPUSH, -c 50 -P 16",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"], 16, 300_000),
    Row("async", "ADDJOB REPLICATE 3 ASYNC vs LPUSH, -c 50",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3", "ASYNC"], 1, 100_000),
]
REDIS_CMD = ["LPUSH", "q", BODY]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def flush_all(servers: list[Server]) -> None:
    for s in servers:
        r = s.call("DEBUG", "FLUSHALL") if s.kind == "disquette" else s.call("FLUSHALL")
        if r != b"+OK":
            raise RuntimeError(f"flush {s}: {r!r}")


def registered_jobs(server: Server) -> int:
    for line in call_bulk(server.port, "INFO", "jobs").splitlines():
        if line.startswith(b"registered_jobs:"):
            return int(line.split(b":", 1)[1])
    raise RuntimeError(f"no registered_jobs in INFO jobs of {server}")


def wait_replicated(nodes: list[Server], timeout: float = 30.0) -> None:
    """After an ASYNC run, until every node holds the same number of jobs (each job
    has a copy everywhere), so background replication does not spill into the
    next measurement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len({registered_jobs(s) for s in nodes}) == 1:
            return
        time.sleep(0.1)
    log("  warning: replication still running after the run")


def measure(row: Row, cluster: list[Server], redis: Server, rounds: int, n: int
            ) -> tuple[float, float]:
    rates: dict[str, list[float]] = {"disquette": [], "redis": []}
    for r in range(rounds):
        sides = [("disquette", cluster[0], row.ours_cmd), ("redis", redis, REDIS_CMD)]
        if r % 2:
            sides.reverse()
        for kind, server, cmd in sides:
            flush_all(cluster if kind == "disquette" else [redis])
            settle(server, 0.3)
            rates[kind].append(redis_benchmark(server.port, cmd, n, pipeline=row.pipeline))
            if kind == "disquette":
                wait_replicated(cluster)
        o, d = rates["disquette"][-1], rates["redis"][-1]
        log(f"  {row.name} round {r + 1}/{rounds}: ours {o:,.0f} rps, redis {d:,.0f} rps, "
            f"ratio {o / d:.2f}x")
    flush_all(cluster + [redis])
    return median(rates["disquette"]), median(rates["redis"])


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [r.name for r in ROWS])
    names = args.names
    rows = [r for r in ROWS if not names or r.name in names]
    if not rows:
        # `make bench BENCH_ARGS="--only addjob"` passes bench_single.py's row
        # names here too: nothing of ours selected, nothing to do.
        log(f"bench_cluster: no row selected by --only {args.only} "
            f"(rows: {', '.join(r.name for r in ROWS)})")
        return 0
    rounds = args.rounds or (1 if args.quick else 3)

    print(environment(), flush=True)
    log(f"starting a {NODES}-node cluster and redis-server")
    cluster = start_disquette_cluster(NODES)
    wait_cluster_joined(cluster)
    redis = start_redis()

    table = []
    for row in rows:
        log(f"{row.name}: {row.title}")
        n = row.full_n // 5 if args.quick else row.full_n
        n = max(1000, int(n * args.scale))
        ours, theirs = measure(row, cluster, redis, rounds, n)
        ratio = ours / theirs
        table.append([row.title, f"{ours:,.0f} rps", f"{theirs:,.0f} rps", f"{ratio:.2f}x",
                      f">= {TARGET:g}x", "PASS" if ratio >= TARGET else "MISS"])
    print_table(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
