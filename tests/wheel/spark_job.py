"""A PySpark job run by the interpreter of a venv the distributions are
installed in (tests/wheel/test_installed.py), outside the checkout: rows
written as jobs with format("disquette"), then a node's AOF read back as its
job history with format("disquette-aof"). Prints what it saw, as JSON.

    python spark_job.py NODES QUEUE DATA_DIR ROWS
"""

import json
import os
import sys

from pyspark.sql import SparkSession

nodes, queue, data_dir, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

# Spark's Python workers run this interpreter, with this venv's packages.
os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
spark = (SparkSession.builder.master("local[2]").appName("disquette-wheel")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

df = spark.createDataFrame([(f"body-{i}",) for i in range(rows)], ["body"])
df.write.format("disquette").option("nodes", nodes).option("queue", queue).mode("append").save()

history = spark.read.format("disquette-aof").load(data_dir)
added = history.filter(history.record == "add").filter(history.queue == queue)
bodies = sorted(r.body for r in added.select("body").collect())
print(json.dumps({"added": bodies}))
spark.stop()
