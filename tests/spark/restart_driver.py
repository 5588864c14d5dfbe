"""A Spark driver for test_exactly_once.py, run as its own process (the test
kills it, JVM and Python workers together, and starts it again).

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

from disquette.spark import register
from tests.spark.kit import local_spark


def main() -> None:
    cfg = json.loads(sys.argv[1])
    spark = local_spark("local[2]", "disquette-restart")
    register(spark)     # the checkout's data source, whatever else is installed
    queries = []
    for s in cfg["streams"]:
        query = (spark.readStream.schema("body string").option("maxFilesPerTrigger", 1)
                 .parquet(s["src"])
                 .writeStream.format("disquette").option("nodes", cfg["nodes"])
                 .option("queue", s["queue"]).option("async", "true")
                 .option("checkpointLocation", s["ckpt"])
                 .trigger(availableNow=True).start())
        print(json.dumps({"queue": s["queue"], "query": str(query.id)}), flush=True)
        queries.append(query)
    # The batch writes run while the streams go on (a paused commit blocks here).
    for w in cfg["writes"]:
        for _ in range(w.get("times", 1)):
            (spark.read.parquet(w["src"]).write.format("disquette").option("nodes", cfg["nodes"])
             .option("queue", w["queue"]).option("async", "true")
             .option("writeId", w["writeId"]).mode("append").save())
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
