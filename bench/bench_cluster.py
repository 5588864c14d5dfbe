#!/usr/bin/env python3
"""A 3-node Disquette cluster against a 3-node C Disque cluster and one Redis,
side by side (issues 3 and 24).

    make bench                                # runs bench_single.py, then this
    DISQUE_SERVER=/path/to/disque-server .venv/bin/python bench/bench_cluster.py --quick
    .venv/bin/python bench/bench_cluster.py --only sync --rounds 5
    .venv/bin/python bench/bench_cluster.py --profile sync   # py-spy on our three nodes

Our 3-node cluster, a 3-node C Disque cluster (``disque-server`` from the
DISQUE_SERVER environment variable, built outside this repository; without it
its column is left out and the rows print "-" and "n/a"), both joined by CLUSTER
MEET, every node reachable from every node, and one redis-server (LPUSH, which
replicates nothing: a reference) run at the same time on free loopback ports
and are driven by ``redis-benchmark``, all clients on the first node; every
figure is measured in rounds that rotate which side goes first, so load from
whatever else runs on the machine hits them alike, and the ratio is the median
of the rounds' ours/Disque ratios. ``--quick``: a tenth of the requests, one round.

Rows (``--only`` takes their names, comma-separated), 100-byte bodies:

  sync        ADDJOB q <100 B> 0 REPLICATE 3, -c 50            >= 1.0x Disque
  async-p16   ADDJOB ... REPLICATE 3 ASYNC, -c 50 -P 16        >= 1.0x Disque
  latency     the sync ADDJOB's p50 latency, -c 10             <= 1.3x Disque's
  sync-p16    the sync ADDJOB, -c 50 -P 16                     (reported)
  async       the ASYNC ADDJOB, -c 50                          (reported)
  sync-c1-p64 the sync ADDJOB from one client, -P 64           (reported)

A synchronously replicated ADDJOB answers once two peers have sent GOTJOB.

``--security`` measures what securing the bus costs instead (no Redis, no
Disque): the same rows on four 3-node clusters run side by side, the order
rotating every round: plain, ``cluster-auth-pass`` (authenticated links, a tag
per frame), ``tls-cluster yes`` (certificates made on the spot) and both; each
figure with the CPU time the three nodes spent per job (from /proc).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass
from pathlib import Path

from bench_single import (
    Result, add_profile_option, cells, measure_rows, registered_jobs, report, select,
)
from common import (
    REPO_ROOT, Profiler, Server, body, disque_path, environment, median, parse_bench_args,
    redis_benchmark, redis_benchmark_csv, settle, start_disque_cluster, start_disquette_cluster,
    start_redis, wait_cluster_joined,
)

sys.path.insert(0, str(REPO_ROOT))      # the checkout's packages (and tests/)
from protocol import bus as B  # noqa: E402

BODY = body(100)
NODES = 3
SYNC = ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"]
ASYNC = SYNC + ["ASYNC"]


@dataclass
class Row:
    name: str
    title: str
    ours_cmd: list
    pipeline: int
    full_n: int
    clients: int = 50
    kind: str = "info"          # as bench_single's Metric.kind
    target: float | None = None
    p50: bool = False           # the p50 latency (ms), not requests/s


ROWS = [
    Row("sync", "ADDJOB REPLICATE 3, -c 50", SYNC, 1, 100_000, kind="min-ratio", target=1.0),
    Row("async-p16", "ADDJOB REPLICATE 3 ASYNC, -c 50 -P 16", ASYNC, 16, 300_000,
        kind="min-ratio", target=1.0),
    Row("latency", "ADDJOB REPLICATE 3 p50 latency, -c 10", SYNC, 1, 50_000, clients=10,
        kind="max-ratio", target=1.3, p50=True),
    Row("sync-p16", "ADDJOB REPLICATE 3, -c 50 -P 16", SYNC, 16, 300_000),
    Row("async", "ADDJOB REPLICATE 3 ASYNC, -c 50", ASYNC, 1, 100_000),
    # One producer pipelining (a Spark task, SDK batches): its sync ADDJOBs are
    # replicated in parallel, not one per round trip.
    Row("sync-c1-p64", "ADDJOB REPLICATE 3, -c 1 -P 64", SYNC, 64, 100_000, clients=1),
]
REDIS_CMD = ["LPUSH", "q", BODY]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def flush_all(servers: list[Server]) -> None:
    for s in servers:
        s.flush()


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


def measure(row: Row, sides: dict[str, list[Server]], rounds: int, n: int) -> Result:
    """``sides``: kind -> its nodes (Redis: one server). Requests/s, or p50 ms."""
    order = list(sides)
    values: dict[str, list[float]] = {k: [] for k in order}
    ratios = []
    for r in range(rounds):
        k = r % len(order)
        for kind in order[k:] + order[:k]:
            nodes = sides[kind]
            cmd = REDIS_CMD if kind == "redis" else row.ours_cmd
            flush_all(nodes)
            settle(nodes[0], 0.3)
            if row.p50:
                v = redis_benchmark_csv(nodes[0].port, cmd, n, clients=row.clients,
                                        pipeline=row.pipeline)["p50_latency_ms"]
            else:
                v = redis_benchmark(nodes[0].port, cmd, n, clients=row.clients,
                                    pipeline=row.pipeline)
            values[kind].append(v)
            if kind != "redis":
                wait_replicated(nodes)
        unit = "ms p50" if row.p50 else "rps"
        line = ", ".join(f"{k} {values[k][-1]:,.{3 if row.p50 else 0}f} {unit}" for k in order)
        if "disque" in sides:
            ratios.append(values["disquette"][-1] / values["disque"][-1])
            line += f", ratio {ratios[-1]:.2f}x"
        log(f"  {row.name} round {r + 1}/{rounds}: {line}")
    flush_all([s for nodes in sides.values() for s in nodes])
    return Result(median(values["disquette"]),
                  median(values["disque"]) if "disque" in sides else None,
                  median(values["redis"]), "ms p50" if row.p50 else "rps",
                  median(ratios) if ratios else None)


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
    print(environment(clusters["plain"][0]), flush=True)
    table = []
    for row in rows:
        n = max(1000, int((row.full_n // 10 if quick else row.full_n) * scale))
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
        line = [row.title]
        for kind in SECURED:
            rate = median(rates[kind])
            ratio = "" if kind == "plain" else f" ({rate / plain:.2f}x)"
            line.append(f"{rate:,.0f} rps{ratio}, {median(cpu[kind]):.0f} us/job")
        table.append(line)
    print("| row | " + " | ".join(SECURED) + " |")
    print("| --- | " + " | ".join("---:" for _ in SECURED) + " |")
    for line in table:
        print("| " + " | ".join(line) + " |")


def main(argv: list[str] | None = None) -> int:
    def options(ap) -> None:
        add_profile_option(ap)
        ap.add_argument("--security", action="store_true",
                        help="the cost of cluster-auth-pass and tls-cluster instead")

    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [r.name for r in ROWS],
                            extra=options)
    chosen = select(args, [r.name for r in ROWS])
    if not chosen:
        return 0
    rows = [r for r in ROWS if r.name in chosen]
    rounds = args.rounds or (1 if args.quick or args.profile else 3)
    if args.security:
        security_cost([r for r in rows if r.pipeline == 1 and not r.p50] + SECURITY_ROWS,
                      max(rounds, 2), args.quick, args.scale)
        return 0

    profiler = Profiler() if args.profile else None
    log(f"starting {NODES}-node clusters and redis-server")
    sides = {"disquette": start_disquette_cluster(NODES)}
    if disque_path() is not None:
        sides["disque"] = start_disque_cluster(NODES)
    sides["redis"] = [start_redis()]
    for kind in ("disquette", "disque"):
        if kind in sides:
            wait_cluster_joined(sides[kind])
    print(environment(sides["disquette"][0]), flush=True)

    def measure_row(row: Row) -> list[str]:
        log(f"{row.name}: {row.title}")
        n = max(1000, int((row.full_n // 10 if args.quick else row.full_n) * args.scale))
        return cells(row.title, row.kind, row.target, measure(row, sides, rounds, n),
                     "disque" in sides)

    table = measure_rows(rows, measure_row, profiler)
    report(table, "disque" in sides, args.quick, rounds, profiler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
