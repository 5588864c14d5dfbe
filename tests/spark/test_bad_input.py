"""Bad input: a clear error, and nothing half-written visible to consumers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from disquette.spark import partition_writer
from tests.harness import REPO_ROOT, free_port
from tests.spark.kit import all_job_ids, nodes_option, queued


def save(df, nodes, **options):
    (df.write.format("disquette").option("nodes", nodes).options(**options)
     .mode("append").save())


def test_missing_body_column(spark, cluster):
    df = spark.range(10).selectExpr("concat('x', id) AS payload")
    with pytest.raises(Exception, match="no 'body' column"):
        save(df, nodes_option(cluster), queue="bad")
    assert not all_job_ids(cluster)


def test_wrong_body_type(spark, cluster):
    df = spark.range(10).selectExpr("id AS body")
    with pytest.raises(Exception, match="column 'body' must be string or binary, not bigint"):
        save(df, nodes_option(cluster), queue="bad")
    df = spark.range(10).selectExpr("concat('x', id) AS body", "'soon' AS delay")
    with pytest.raises(Exception, match="column 'delay' must be an integer, not string"):
        save(df, nodes_option(cluster), queue="bad")
    with pytest.raises(Exception, match="option 'batchSize' must be an integer"):
        save(spark.range(1).selectExpr("'x' AS body"), nodes_option(cluster), queue="bad",
             batchSize="many")
    assert not all_job_ids(cluster)


def test_unreachable_nodes(spark):
    dead = f"127.0.0.1:{free_port()}"
    df = spark.range(10).selectExpr("concat('x', id) AS body")
    with pytest.raises(Exception, match=f"cannot reach any node of '{dead}'"):
        save(df, dead, queue="bad")
    with pytest.raises(Exception, match="NoNodeAvailableError"):
        df.foreachPartition(partition_writer(dead, "bad"))


def test_queue_paused_in(spark, cluster):
    """Rows for two queues, one of them paused in on every node: the write
    fails naming the queue and the reply, and the rows already added to the
    other queue are not released either."""
    for n in cluster:
        n.client().execute_command("PAUSE", "paused", "in")
    df = spark.range(0, 2000, numPartitions=2).selectExpr(
        "concat('x', id) AS body", "CASE WHEN id % 1000 < 900 THEN 'open' ELSE 'paused' END "
        "AS queue")
    try:
        with pytest.raises(Exception, match="not written to queue 'paused': QueuePausedError: "
                                            "PAUSED Queue paused in input"):
            save(df, nodes_option(cluster), batchSize="100")
        assert not queued(cluster, "open")      # nothing visible to consumers
        # One task: when Spark reports a task's failure it may still be
        # cancelling the other, which would go on adding after the snapshot below.
        with pytest.raises(Exception, match="queue 'paused'.*PAUSED Queue paused in input"):
            df.coalesce(1).foreachPartition(partition_writer(nodes_option(cluster),
                                                             batch_size=100))
        # The same with several batches in flight per task: nothing more shows
        # (what is queued now is partition_writer's, which has no commit step).
        visible = queued(cluster, "open")
        with pytest.raises(Exception, match="not written to queue 'paused': QueuePausedError"):
            save(df, nodes_option(cluster), batchSize="100", connections="4")
        assert queued(cluster, "open") == visible
    finally:
        for n in cluster:
            n.client().execute_command("PAUSE", "paused", "none")


def test_overwrite_mode_refused(spark, cluster):
    df = spark.range(3).selectExpr("'x' AS body")
    with pytest.raises(Exception, match=r"only mode\('append'\)"):
        (df.write.format("disquette").option("nodes", nodes_option(cluster))
         .option("queue", "q").mode("overwrite").save())


def test_found_without_registration_in_a_fresh_session(cluster, tmp_path):
    """A new Spark application, started outside the checkout: Spark lists the
    installed top-level ``pyspark_*`` modules and finds the data source."""
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        df = spark.range(5).selectExpr("concat('fresh-', id) AS body")
        df.write.format("disquette").option("nodes", {nodes_option(cluster)!r}) \\
            .option("queue", "fresh").mode("append").save()
        spark.stop()
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(queued(cluster, "fresh").values()) == [f"fresh-{i}".encode() for i in range(5)]
    assert str(REPO_ROOT) not in str(tmp_path)
