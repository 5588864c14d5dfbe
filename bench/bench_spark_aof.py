#!/usr/bin/env python3
"""The ``disquette-aof`` reader against a node's own AOF load, and what
``aof-history`` costs (issue 27). A script, not a test.

    .venv/bin/python bench/bench_spark_aof.py             # 500,000 jobs
    .venv/bin/python bench/bench_spark_aof.py --jobs 1000000 --rounds 3

1. Reading: N jobs with 100-byte bodies are added (redis-benchmark -c 50
   -P 16) to a node with ``appendonly yes`` and ``aof-history yes``; the node
   is killed (-9) and restarted: its load rate is N / the load time it logs.
   The same file is then read as one partition (what one Spark task does):
   by the reader's code in this process, and by a local[1] SparkSession
   writing to the ``noop`` sink: the run time of its one task (Spark's stage
   metrics), and end to end (with Spark's job start). Target: the reader per
   Spark task >= 0.5x the node's load.
2. The history's cost: ADDJOB, then GETJOB (the deliveries it records), both
   ``redis-benchmark -c 50`` with and without -P 16, on two nodes with the AOF
   on (everysec) at once, one with ``aof-history yes``; rounds alternate which
   goes first; medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_aof import info_field, restart_and_time  # noqa: E402
from common import body, call_int, median, redis_benchmark, start_disquette  # noqa: E402

from disquette.spark.aof_files import plan  # noqa: E402
from disquette.spark.aof_rows import read_range  # noqa: E402

BODY = body(100)
AOF = ["--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0"]
HISTORY = ["--aof-history", "yes"]
ANALYSIS_COLUMNS = ("time", "record", "id", "queue", "ctime")     # docs/spark.md


def read_in_process(path: str) -> tuple[int, float]:
    """Rows and seconds of reading the whole file as one partition."""
    (fr,) = plan([path], 1 << 40, False)
    t = time.perf_counter()
    rows = sum(b.num_rows for b in read_range(fr, False, False))
    return rows, time.perf_counter() - t


def read_with_spark(path: str, rounds: int) -> tuple[int, float, float, float]:
    """Rows, the best seconds of a local[1] Spark read into the noop sink (end
    to end), and the best run time of its one task (Spark's stage metrics,
    from its REST API), every column, then the columns of docs/spark.md's
    analysis only (Spark turns only those from Arrow into its rows)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # optional: pyspark (the `spark` extra)

    spark = (SparkSession.builder.master("local[1]").appName("bench-spark-aof")
             .config("spark.ui.port", "0").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = (spark.read.format("disquette-aof").option("partitionBytes", 1 << 40).load(path))
        rows = df.count()
        ends, tasks, few = [], [], []
        some = df.select(*ANALYSIS_COLUMNS)
        for _ in range(rounds):
            ends.append(timed(lambda: df.write.format("noop").mode("overwrite").save()))
            tasks.append(last_stage_run_time(spark))
            some.write.format("noop").mode("overwrite").save()
            few.append(last_stage_run_time(spark))
    finally:
        spark.stop()
    return rows, min(ends), min(tasks), min(few)


def last_stage_run_time(spark) -> float:
    """executorRunTime (s) of the last completed stage: its one task's run."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as r:
        stages = json.load(r)
    last = max(stages, key=lambda st: (st["stageId"], st["attemptId"]))
    return last["executorRunTime"] / 1000


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def reading(jobs: int, rounds: int) -> None:
    directives = AOF + HISTORY
    srv = start_disquette(*directives)
    t0 = time.monotonic()
    redis_benchmark(srv.port, ["ADDJOB", "q", BODY, "0"], jobs, pipeline=16)
    added = call_int(srv.port, "QLEN", "q")
    size = int(info_field(srv.port, "persistence", "aof_current_size"))
    print(f"  {added:,} jobs added in {time.monotonic() - t0:.2f} s (AOF {size / 1e6:.1f} MB)")
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    path = os.path.join(srv.dir, "disque.aof")
    read_in_process(path)               # imports and page cache, not timed
    # Rounds alternate the node's load and the reader's, best of each: the
    # machine's other work weighs on both alike.
    loads, reads = [], []
    for _ in range(rounds):
        secs, _wall, n = restart_and_time(srv, directives)
        loads.append(n / secs)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        rows, secs = read_in_process(path)
        reads.append(secs)
    node_rate = max(loads)
    best = min(reads)
    print(f"  node load at start-up : {node_rate:,.0f} jobs/s (best of {rounds})")
    print(f"  reader, one partition : {rows / best:,.0f} rows/s in this process "
          f"({rows:,} rows in {best:.2f} s): {rows / best / node_rate:.2f}x the node's load "
          f"(target >= 0.5x)")
    rows, secs, task, few = read_with_spark(path, rounds)
    print(f"  Spark local[1] task   : {rows / task:,.0f} rows/s ({rows:,} rows, every column, "
          f"its task ran {task:.2f} s: Spark's stage metrics): {rows / task / node_rate:.2f}x "
          f"the node's load (target >= 0.5x)")
    print(f"                          {rows / few:,.0f} rows/s ({few:.2f} s) selecting the "
          f"analysis' columns ({', '.join(ANALYSIS_COLUMNS)}): {rows / few / node_rate:.2f}x")
    print(f"  Spark local[1], noop  : {rows / secs:,.0f} rows/s end to end "
          f"({secs:.2f} s, with Spark's job start): {rows / secs / node_rate:.2f}x")
    srv.stop()


def history_cost(n: int, rounds: int) -> None:
    plain = start_disquette(*AOF)
    history = start_disquette(*AOF, *HISTORY)
    try:
        for pipeline in (1, 16):
            for command in (["ADDJOB", "q", BODY, "0"], ["GETJOB", "NOHANG", "FROM", "q"]):
                res: dict[str, list[float]] = {"off": [], "on": []}
                for r in range(rounds):
                    order = [("off", plain), ("on", history)]
                    if r % 2:
                        order.reverse()
                    for name, srv in order:
                        if command[0] == "GETJOB":
                            srv.call("DEBUG", "FLUSHALL")
                            redis_benchmark(srv.port, ["ADDJOB", "q", BODY, "0"], n,
                                            pipeline=16)
                        res[name].append(redis_benchmark(srv.port, command, n,
                                                         pipeline=pipeline))
                        srv.call("DEBUG", "FLUSHALL")
                off, on = median(res["off"]), median(res["on"])
                print(f"  {command[0]:6} -P {pipeline:<2}: aof-history no {off:,.0f} rps, "
                      f"yes {on:,.0f} rps: {on / off:.2f}x")
    finally:
        plain.stop()
        history.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=500_000)
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", choices=("read", "history"), default=None)
    args = p.parse_args()
    print(f"disquette-aof bench on {platform.node()} ({os.cpu_count()} CPUs), "
          f"Python {platform.python_version()}")
    if args.only != "history":
        print(f"Reading an AOF of {args.jobs:,} jobs (100-byte bodies, aof-history yes):")
        reading(args.jobs, args.rounds)
    if args.only != "read":
        print(f"What aof-history costs, redis-benchmark -c 50, {args.requests:,} requests "
              f"x {args.rounds} rounds:")
        history_cost(args.requests, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
