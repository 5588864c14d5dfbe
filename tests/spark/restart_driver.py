"""A Spark driver for test_exactly_once.py, run as its own process (the test
kills it, JVM and Python workers together, then restarts the same writes in
its own SparkSession).

``python tests/spark/restart_driver.py '<json>'`` with ``{"nodes": "h:p,...",
"streams": [{"queue", "src", "ckpt"}...], "writes": [{"queue", "src",
"writeId", "times"}...]}``: starts one streaming write per stream (a parquet
directory read one file a micro-batch, into the disquette sink), prints
``{"queue": ..., "query": <query id>}`` for each, runs each batch write
``times`` times (in the main thread, while the streams run), then waits
for the streams to finish and prints ``done``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from disquette.spark import register
from tests.spark.kit import local_spark


def start_streams(spark: Any, cfg: dict) -> list[Any]:
    queries = []
    for s in cfg["streams"]:
        query = (spark.readStream.schema("body string").option("maxFilesPerTrigger", 1)
                 .parquet(s["src"])
                 .writeStream.format("disquette").option("nodes", cfg["nodes"])
                 .option("queue", s["queue"]).option("async", "true")
                 .option("checkpointLocation", s["ckpt"])
                 .trigger(availableNow=True).start())
        queries.append(query)
    return queries


def batch_writes(spark: Any, cfg: dict) -> None:
    for w in cfg["writes"]:
        for _ in range(w.get("times", 1)):
            (spark.read.parquet(w["src"]).write.format("disquette").option("nodes", cfg["nodes"])
             .option("queue", w["queue"]).option("async", "true")
             .option("writeId", w["writeId"]).mode("append").save())


def finish(queries: list[Any], timeout: float | None = None) -> None:
    """Wait for the streams (availableNow: they end by themselves)."""
    for query in queries:
        if timeout is None:
            query.awaitTermination()
        elif not query.awaitTermination(timeout):
            query.stop()
            raise AssertionError(f"stream {query.id} still running after {timeout} s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))


def main() -> None:
    cfg = json.loads(sys.argv[1])
    spark = local_spark("local[2]", "disquette-restart")
    register(spark)     # the checkout's data source, whatever else is installed
    queries = start_streams(spark, cfg)
    for s, query in zip(cfg["streams"], queries):
        print(json.dumps({"queue": s["queue"], "query": str(query.id)}), flush=True)
    batch_writes(spark, cfg)    # while the streams go on (a paused commit blocks here)
    finish(queries)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
