"""Rows/s written from PySpark into a 3-node Disquette cluster (issues 11, 27).

    .venv/bin/python bench/bench_spark.py            # 40,000 rows, 3 rounds
    .venv/bin/python bench/bench_spark.py --rows 100000 --rounds 5
    .venv/bin/python bench/bench_spark.py --profile  # py-spy on the nodes

Side by side in one run, on one local[2] SparkSession (two tasks) and one
cluster: ``disquette.spark.partition_writer`` and the ``disquette`` data
source (batch write: staged, i.e. added with ADDJOB ... HOLD and released
with ENQUEUE on commit; and staged=false), against what a user writes by hand
(a per-row redis-py ADDJOB loop inside foreachPartition) and against the
ceiling ``redis-benchmark -P 16`` sending ADDJOB to the node the writers talk
to, with the SAME NUMBER OF CONNECTIONS as the writer (2 tasks x
``connections``).  Synchronous replication (the default) and ASYNC are
measured separately.  The rows of a round run one after the other, round
after round; a row's rate is the median of its rounds, a ratio the median of
its per-round ratios.  A Spark row's time includes Spark's job start.

    .venv/bin/python bench/bench_spark.py --only "partition_writer;data source, staged"

Targets (issue 27): ``partition_writer`` >= 0.8x redis-benchmark -P 16 with
as many connections; the staged data source >= 0.7x ``partition_writer``
with the same options.  Issue 11's: >= 10x the loop.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import redis
from common import (
    Profiler, call, load_average, median, redis_benchmark, start_disquette_cluster,
    wait_cluster_joined,
)

from disquette.spark import partition_writer, register

BODY_SQL = "concat(lpad(CAST(id AS STRING), 12, '0'), repeat('x', 88)) AS body"  # 100 bytes
TASKS = 2                   # local[2], two partitions: two tasks write at once
PW_VS_RB = 0.8              # partition_writer / redis-benchmark -P 16, same connections
STAGED_VS_PW = 0.7          # staged data source / partition_writer, same options


def flush(nodes) -> None:
    for n in nodes:
        call(n.port, "DEBUG", "FLUSHALL")


def loop_writer(addrs: str):
    def write(rows):
        host, port = addrs.split(",")[0].split(":")
        r = redis.Redis(host, int(port))
        for row in rows:
            r.execute_command("ADDJOB", "loop", row.body, 5000)
    return write


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def verdict(ratio: float, target: float) -> str:
    return f">= {target}x: {'PASS' if ratio >= target else 'MISS'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--loop-rows", type=int, default=5_000,
                    help="rows for the (slow) per-row loop")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (median)")
    ap.add_argument("--only", default="", help="run only these rows, ';'-separated labels or "
                    "words of labels (and the rows they are compared with)")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy on the three nodes for the whole run (their top functions)")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # optional: pyspark (the `spark` extra)

    profiler = Profiler() if args.profile else None
    nodes = start_disquette_cluster(3)
    wait_cluster_joined(nodes)
    addrs = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    port = nodes[0].port          # a writer's Client talks to the first listed node
    load_before = load_average()
    spark = (SparkSession.builder.master(f"local[{TASKS}]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)     # a checkout run in place is not installed: Spark would not find it
    df = spark.range(0, args.rows, numPartitions=TASKS).selectExpr(BODY_SQL).cache()
    df.count()
    small = spark.range(0, args.loop_rows, numPartitions=TASKS).selectExpr(BODY_SQL).cache()
    small.count()

    def ds(**opts):
        return lambda: (df.write.format("disquette").option("nodes", addrs)
                        .option("queue", "ds").options(**opts).mode("append").save())

    def pw(**opts):
        return lambda: df.foreachPartition(partition_writer(addrs, "pw", **opts))

    def rb(connections: int, asynchronous: bool = False):
        cmd = ["ADDJOB", "rb", "x" * 100, "5000"] + (["ASYNC"] if asynchronous else [])
        return lambda: redis_benchmark(port, cmd, n=args.rows, clients=TASKS * connections,
                                       pipeline=16)

    # label -> (how to run it, the row it is compared with, target), in run order
    rows: dict[str, tuple] = {
        "redis-benchmark -P 16 -c 2": (rb(1), None, None),
        "partition_writer": (pw(), "redis-benchmark -P 16 -c 2", PW_VS_RB),
        "data source, staged": (ds(), "partition_writer", STAGED_VS_PW),
        "data source, staged=false": (ds(staged="false"), "partition_writer", None),
        "redis-benchmark -P 16 -c 16": (rb(8), None, None),
        "partition_writer, connections=8": (pw(connections=8), "redis-benchmark -P 16 -c 16",
                                            PW_VS_RB),
        "data source, staged, connections=8": (ds(connections="8"),
                                               "partition_writer, connections=8", STAGED_VS_PW),
        "redis-benchmark -P 16 -c 2, ASYNC": (rb(1, True), None, None),
        "partition_writer, ASYNC": (pw(asynchronous=True), "redis-benchmark -P 16 -c 2, ASYNC",
                                    PW_VS_RB),
        "data source, staged, ASYNC": (ds(**{"async": "true"}), "partition_writer, ASYNC",
                                       STAGED_VS_PW),
    }

    only = [w.strip() for w in args.only.split(";") if w.strip()]
    if only:
        wanted = {label for label in rows
                  if label in only or any(w in label for w in only if w not in rows)}
        while not {rows[label][1] for label in wanted} - {None} <= wanted:
            wanted |= {rows[label][1] for label in wanted} - {None}
        rows = {label: row for label, row in rows.items() if label in wanted}

    # warm up the Python workers once, the data source's driver side too
    small.limit(100).foreachPartition(partition_writer(addrs, "warm"))
    (small.limit(100).write.format("disquette").option("nodes", addrs).option("queue", "warm")
     .mode("append").save())
    flush(nodes)
    loop = args.loop_rows / timed(lambda: small.foreachPartition(loop_writer(addrs)))
    flush(nodes)
    rates: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(args.rounds):
        for label, (fn, _, _) in rows.items():
            if label.startswith("redis-benchmark"):
                rates[label].append(fn())
            else:
                rates[label].append(args.rows / timed(fn))
            flush(nodes)
    spark.stop()
    if profiler is not None:
        profiler.stop()

    rate = {label: median(r) for label, r in rates.items()}
    print(f"\n{args.rows:,} rows of 100 bytes, local[{TASKS}] (one connection per task unless "
          f"connections=), 3-node cluster, medians of {args.rounds} rounds; load average "
          f"{load_before} before, {load_average()} after\n")
    print("| writer | rows/s | min - max | vs loop | compared with | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- | ---: | --- |")
    print(f"| per-row redis-py loop | {loop:,.0f} | | 1.0x | | | |")
    for label, (_, ref, target) in rows.items():
        spread = f"{min(rates[label]):,.0f} - {max(rates[label]):,.0f}"
        cells = [label, f"{rate[label]:,.0f}", spread, f"{rate[label] / loop:.1f}x", "", "", ""]
        if ref is not None:
            # Paired by round (the two ran a few seconds apart): other load
            # on the machine moves both.
            ratio = median([a / b for a, b in zip(rates[label], rates[ref])])
            cells[4:] = [ref, f"{ratio:.2f}x", verdict(ratio, target) if target else "(info)"]
        print("| " + " | ".join(cells) + " |")
    if profiler is not None:
        profiler.report()


if __name__ == "__main__":
    main()
