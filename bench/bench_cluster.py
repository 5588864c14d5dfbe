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
  sync-c1-p64 the sync ADDJOB from one client, -P 64     (reported, same 0.4x bar)

The issue's target is the first row: a synchronously replicated ADDJOB (the
client's answer waits for GOTJOB from two peers) at 0.4x of a Redis LPUSH that
replicates nothing, all 50 clients on one node.

``--security`` measures what securing the bus costs instead (no Redis): the
same rows on four 3-node clusters run side by side, the order rotating every
round: plain, ``cluster-auth-pass`` (authenticated links, a tag per frame),
``tls-cluster yes`` (certificates made on the spot) and both; each figure
with the CPU time the three nodes spent per job (from /proc).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass
from pathlib import Path

from bench_single import environment, print_table
from common import (
    REPO_ROOT, Server, body, call_bulk, median, parse_bench_args, redis_benchmark, settle,
    start_disquette_cluster, start_redis, wait_cluster_joined,
)

sys.path.insert(0, str(REPO_ROOT))      # the checkout's packages (and tests/)
from protocol import bus as B  # noqa: E402

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
    clients: int = 50


ROWS = [
    Row("sync", "ADDJOB REPLICATE 3 vs LPUSH, -c 50",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"], 1, 100_000),
    Row("sync-p16", "ADDJOB REPLICATE 3 vs LPUSH, -c 50 -P 16",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"], 16, 300_000),
    Row("async", "ADDJOB REPLICATE 3 ASYNC vs LPUSH, -c 50",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3", "ASYNC"], 1, 100_000),
    # One producer pipelining (a Spark task, SDK batches): its sync ADDJOBs are
    # replicated in parallel, not one per round trip.
    Row("sync-c1-p64", "ADDJOB REPLICATE 3 vs LPUSH, -c 1 -P 64",
        ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"], 64, 100_000, clients=1),
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
            rates[kind].append(redis_benchmark(server.port, cmd, n, clients=row.clients,
                                               pipeline=row.pipeline))
            if kind == "disquette":
                wait_replicated(cluster)
        o, d = rates["disquette"][-1], rates["redis"][-1]
        log(f"  {row.name} round {r + 1}/{rounds}: ours {o:,.0f} rps, redis {d:,.0f} rps, "
            f"ratio {o / d:.2f}x")
    flush_all(cluster + [redis])
    return median(rates["disquette"]), median(rates["redis"])


# -- --security: the cost of cluster-auth-pass and tls-cluster ------------------------
SECURED = ("plain", "auth", "tls", "tls+auth")
# One client: every bus message in a frame of its own (no batching), the most
# frames per job, so the most tags and TLS records per job.
SECURITY_ROWS = [
    Row("sync-c1", "ADDJOB REPLICATE 3, -c 1", ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"],
        1, 20_000, clients=1),
]


def secured_directives(kind: str, pki_dir: Path) -> list[str]:
    out = []
    if "auth" in kind:
        out += ["--cluster-auth-pass", "a bench secret"]
    if "tls" in kind:
        # optional: the tests' certificate maker needs cryptography (the test extra)
        from tests.security.certs import CA

        ca = CA(pki_dir / kind.replace("+", "-"))
        node = ca.issue("node")
        out += ["--tls-cluster", "yes", "--tls-cert-file", str(node.cert),
                "--tls-key-file", str(node.key), "--tls-ca-cert-file", str(ca.cert_file)]
    return out


def cpu_seconds(servers: list[Server]) -> float:
    """User + system CPU time the processes used so far (/proc/PID/stat)."""
    total = 0
    for s in servers:
        with open(f"/proc/{s.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def tag_cost_us(size: int) -> float:
    """CPU time to tag one frame of ``size`` bytes and check it on arrival
    (in this process: what cluster-auth-pass adds per frame, both ends)."""
    key = B.session_keys("secret", b"d" * 32, b"l" * 32)[0]
    msg = B.BusMessage(B.GOTJOB, "a" * 40, "127.0.0.1", 7711, 17711, 0, [], b"x" * size)
    frame = B.encode_frame(msg)
    signer = B.FrameSigner(key)
    count = 20_000
    data = b"".join(frame + signer.tag(frame) for _ in range(count))
    reader = B.FrameReader()
    reader.feed(data)
    reader.authenticate(key)
    check = timeit.timeit(lambda: next(reader), number=count)
    plain = B.FrameReader()
    plain.feed(frame * count)
    decode = timeit.timeit(lambda: next(plain), number=count)
    sign = timeit.timeit(lambda: signer.tag(frame), number=count)
    return (sign + check - decode) / count * 1e6


def security_cost(rows: list[Row], rounds: int, quick: bool, scale: float) -> None:
    for size in (100, 2000):
        log(f"tag + check of one {size}-byte frame: {tag_cost_us(size):.2f} us")
    pki_dir = Path(tempfile.mkdtemp(prefix="bench-pki-"))
    clusters = {}
    for kind in SECURED:
        log(f"starting a {NODES}-node cluster: {kind}")
        clusters[kind] = start_disquette_cluster(NODES, *secured_directives(kind, pki_dir))
    for nodes in clusters.values():
        wait_cluster_joined(nodes)
    table = []
    for row in rows:
        n = max(1000, int((row.full_n // 5 if quick else row.full_n) * scale))
        rates: dict[str, list[float]] = {k: [] for k in SECURED}
        cpu: dict[str, list[float]] = {k: [] for k in SECURED}
        for r in range(rounds):
            order = list(SECURED[r % len(SECURED):] + SECURED[:r % len(SECURED)])
            for kind in order:
                nodes = clusters[kind]
                flush_all(nodes)
                settle(nodes[0], 0.3)
                before = cpu_seconds(nodes)
                rates[kind].append(redis_benchmark(nodes[0].port, row.ours_cmd, n,
                                                   clients=row.clients, pipeline=row.pipeline))
                wait_replicated(nodes)
                cpu[kind].append((cpu_seconds(nodes) - before) / n * 1e6)
            log(f"  {row.name} round {r + 1}/{rounds}: " + ", ".join(
                f"{k} {rates[k][-1]:,.0f} rps" for k in SECURED))
        plain = median(rates["plain"])
        cells = [row.title.replace(" vs LPUSH", "")]
        for kind in SECURED:
            rate = median(rates[kind])
            ratio = "" if kind == "plain" else f" ({rate / plain:.2f}x)"
            cells.append(f"{rate:,.0f} rps{ratio}, {median(cpu[kind]):.0f} us/job")
        table.append(cells)
    print("| row | " + " | ".join(SECURED) + " |")
    print("| --- | " + " | ".join("---:" for _ in SECURED) + " |")
    for cells in table:
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [r.name for r in ROWS],
                            extra=lambda ap: ap.add_argument(
                                "--security", action="store_true",
                                help="the cost of cluster-auth-pass and tls-cluster instead"))
    names = args.names
    rows = [r for r in ROWS if not names or r.name in names]
    if not rows:
        # `make bench BENCH_ARGS="--only addjob"` passes bench_single.py's row
        # names here too: nothing of ours selected, nothing to do.
        log(f"bench_cluster: no row selected by --only {args.only} "
            f"(rows: {', '.join(r.name for r in ROWS)})")
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    if args.security:
        print(environment(), flush=True)
        security_cost([r for r in rows if r.pipeline == 1] + SECURITY_ROWS, max(rounds, 2),
                      args.quick, args.scale)
        return 0

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
