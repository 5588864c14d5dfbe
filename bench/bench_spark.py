"""Rows/s written from PySpark into a 3-node Disquette cluster (issue 11).

    .venv/bin/python bench/bench_spark.py            # 40,000 rows
    .venv/bin/python bench/bench_spark.py --rows 100000

Side by side in one run, on one local[2] SparkSession and one cluster:
``disquette.spark.partition_writer`` and the ``disquette`` data source (batch
write, staged and released on commit), against what a user writes by hand
(a per-row redis-py ADDJOB loop inside foreachPartition) and against
``redis-benchmark -P 16`` (50 clients) sending ADDJOB to the same cluster.
Synchronous replication (the default) and ASYNC are measured separately, and
sync writes with one connection per task (the default) and with 8 batches in
flight per task (``connections=8``).
Targets: >= 10x the loop; >= 0.5x redis-benchmark -P 16.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import redis
from common import call, redis_benchmark, start_disquette_cluster, wait_cluster_joined

from disquette.spark import partition_writer

BODY_SQL = "concat(lpad(CAST(id AS STRING), 12, '0'), repeat('x', 88)) AS body"  # 100 bytes


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--loop-rows", type=int, default=5_000,
                    help="rows for the (slow) per-row loop")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # optional: pyspark (the `spark` extra)

    nodes = start_disquette_cluster(3)
    wait_cluster_joined(nodes)
    addrs = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, args.rows, numPartitions=2).selectExpr(BODY_SQL).cache()
    df.count()
    small = spark.range(0, args.loop_rows, numPartitions=2).selectExpr(BODY_SQL).cache()
    small.count()

    def ds(**opts):
        return lambda: (df.write.format("disquette").option("nodes", addrs)
                        .option("queue", "ds").options(**opts).mode("append").save())

    # warm up the Python workers once
    small.limit(100).foreachPartition(partition_writer(addrs, "warm"))
    flush(nodes)
    results = {}
    results["per-row redis-py loop"] = args.loop_rows / timed(
        lambda: small.foreachPartition(loop_writer(addrs)))
    flush(nodes)
    for label, fn in [
        ("partition_writer", lambda: df.foreachPartition(partition_writer(addrs, "pw"))),
        ("partition_writer, connections=8",
         lambda: df.foreachPartition(partition_writer(addrs, "pw", connections=8))),
        ("data source (staged)", ds()),
        ("data source (staged), connections=8", ds(connections="8")),
        ("partition_writer ASYNC",
         lambda: df.foreachPartition(partition_writer(addrs, "pw", asynchronous=True))),
        ("data source ASYNC (staged)", ds(**{"async": "true"})),
    ]:
        results[label] = args.rows / timed(fn)
        flush(nodes)
    body = "x" * 100
    port = nodes[0].port
    rb_sync = redis_benchmark(port, ["ADDJOB", "rb", body, "5000"], n=args.rows, pipeline=16)
    flush(nodes)
    rb_async = redis_benchmark(port, ["ADDJOB", "rb", body, "5000", "ASYNC"], n=args.rows,
                               pipeline=16)
    spark.stop()

    loop = results["per-row redis-py loop"]
    print(f"\n{args.rows} rows of 100 bytes, local[2], 3-node cluster "
          f"(redis-benchmark -P 16 -c 50 ADDJOB: {rb_sync:,.0f}/s sync, {rb_async:,.0f}/s ASYNC)\n")
    print(f"| writer | rows/s | vs loop | vs redis-benchmark -P 16 |")
    print("| --- | ---: | ---: | ---: |")
    for label, rate in results.items():
        ref = rb_async if "ASYNC" in label else rb_sync
        print(f"| {label} | {rate:,.0f} | {rate / loop:.1f}x | {rate / ref:.2f}x |")


if __name__ == "__main__":
    main()
