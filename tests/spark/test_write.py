"""Writing DataFrames as jobs: partition_writer, batch and streaming writes
through the data source, into a real 3-node cluster."""

from __future__ import annotations

import json

import pytest

from disquette.spark import partition_writer
from tests.harness import wait_until
from tests.spark.kit import addjob_calls, all_job_ids, nodes_option, queued, reset_stats, show

N = 100_000
# Rows big enough that Spark's Python workers flush them downstream before a
# failing row (their output buffers hold 64 KB).
PAD = "x" * 200
PADDED = f"concat('row-', id, '-', '{PAD}') AS body"
DELAYED = 1000          # every 1000th row (id % 1000 == 7) asks for a DELAY
ROWS_SQL = [
    "concat('job-', id) AS body",
    "CASE WHEN id % 2 = 0 THEN 'qa' ELSE 'qb' END AS queue",
    "CAST(10 + id % 5 AS INT) AS retry",
    "CAST(3600 + id % 7 AS INT) AS ttl",
    "CAST(1 + id % 3 AS INT) AS replicate",
    "CASE WHEN id % 1000 = 7 THEN 600 END AS delay",
]


def expected(i: int) -> dict:
    return {"queue": "qa" if i % 2 == 0 else "qb", "retry": 10 + i % 5, "ttl": 3600 + i % 7,
            "replicate": 1 + i % 3, "delay": 600 if i % 1000 == 7 else None}


def rows_df(spark, n=N, partitions=4):
    return spark.range(0, n, numPartitions=partitions).selectExpr(*ROWS_SQL)


def write(kind: str, spark, df, nodes, tmp_path, **options) -> None:
    """Write ``df`` with one of the three writers."""
    addrs = nodes_option(nodes)
    if kind == "foreachPartition":
        df.foreachPartition(partition_writer(addrs, **{
            {"async": "asynchronous", "batchSize": "batch_size"}.get(k, k): v
            for k, v in options.items()}))
        return
    opts = {"nodes": addrs, **{k: str(v).lower() if isinstance(v, bool) else str(v)
                                for k, v in options.items()}}
    if kind == "batch":
        df.write.format("disquette").options(**opts).mode("append").save()
        return
    src = tmp_path / "in"
    df.write.parquet(str(src))
    query = (spark.readStream.schema(df.schema).parquet(str(src))
             .writeStream.format("disquette").options(**opts)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


@pytest.mark.parametrize("kind", ["foreachPartition", "batch", "stream"])
def test_100k_rows_arrive_as_100k_jobs(kind, spark, cluster, tmp_path):
    # ASYNC: the node answers each ADDJOB at once (replication goes on in
    # the background); with synchronous replication the same test takes
    # minutes, which CI cannot spend.
    write(kind, spark, rows_df(spark), cluster, tmp_path, **{"async": True})

    ids = all_job_ids(cluster)
    assert len(ids) == N                     # one job per row, no more
    bodies = {**queued(cluster, "qa"), **queued(cluster, "qb")}
    assert len(bodies) == N - N // DELAYED   # the delayed rows wait
    want = sorted(f"job-{i}".encode() for i in range(N) if i % 1000 != 7)
    assert sorted(bodies.values()) == want

    by_body = {b.decode(): j for j, b in bodies.items()}
    for i in (0, 1, 2, 3, 4, 5, 6, 8, 12345, 99999):
        job = show(cluster, by_body[f"job-{i}"])
        e = expected(i)
        assert job["queue"].decode() == e["queue"]
        assert job["state"] == b"queued"
        assert job["retry"] == e["retry"]
        assert job["repl"] == e["replicate"]
        assert e["ttl"] - 300 < job["ttl"] <= e["ttl"]
        # Staged or not, a job shows the DELAY of its row (none here).
        assert job["delay"] == 0
    delayed = [j for j in ids if j not in bodies]
    for jid in delayed[:5]:
        job = show(cluster, jid)
        i = int(job["body"].decode().split("-")[1])
        # Staged too (held, released at commit): its DELAY runs from the release.
        assert i % 1000 == 7 and job["delay"] == 600 and job["state"] == b"active"
        assert 0 < job["next-requeue-within"] <= 600_000
        assert job["retry"] == expected(i)["retry"]


@pytest.mark.parametrize("kind", ["batch", "stream"])
def test_task_retry_leaves_one_job_per_row(kind, spark, cluster, tmp_path):
    """local[2,2]: the task of partition 0 fails on its first attempt after
    writing part of its rows; Spark runs it again; one job per row."""
    from pyspark.sql.functions import udf

    addrs = [(n.host, n.port) for n in cluster]

    @udf("string")
    def fail_once(body):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and body.startswith("row-4500-"):
            # Fail once the writer (another Python worker of this task) has
            # added some of the rows before this one.
            import redis

            from tests.harness import wait_until

            def some_added():  # partition 1 has 5000 rows: some are ours
                ids = set()
                for h, p in addrs:
                    ids.update(redis.Redis(h, p).execute_command("JSCAN", 0, "BUSYLOOP")[1])
                return len(ids) >= 5200
            wait_until(some_added)
            raise RuntimeError("forced failure of the first attempt")
        return body

    n = 10_000
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        df = (spark.range(0, n, numPartitions=2).selectExpr(PADDED)
              .select(fail_once("body").alias("body")))
        if kind == "stream":  # the stream reads a file: compute the failing column in the stream
            src = tmp_path / "src"
            spark.range(0, n, numPartitions=2).selectExpr(PADDED) \
                .coalesce(2).write.parquet(str(src))
        reset_stats(cluster)
        if kind == "batch":
            write("batch", spark, df, cluster, tmp_path, queue="r", batchSize=200)
        else:
            query = (spark.readStream.schema("body string").parquet(str(src))
                     .select(fail_once("body").alias("body"))
                     .writeStream.format("disquette")
                     .options(nodes=nodes_option(cluster), queue="r", batchSize="200")
                     .option("checkpointLocation", str(tmp_path / "ckpt"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(300)
            assert query.exception() is None, query.exception()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The failed attempt did add jobs before failing ...
    assert addjob_calls(cluster) > n
    # ... and consumers see exactly one job per row: the committed attempt's.
    bodies = queued(cluster, "r")
    assert sorted(bodies.values()) == sorted(f"row-{i}-{PAD}".encode() for i in range(n))
    # Spark killed the failed attempt's Python worker, so nothing deleted
    # what it had staged: those jobs stay held, out of every queue, until
    # their TTL (docs/spark.md, guarantees).
    orphans = sorted(all_job_ids(cluster) - set(bodies))
    assert orphans
    for jid in orphans[:50]:
        job = show(cluster, jid)
        assert job["state"] == b"held" and job["delay"] == 0, job
        assert job["next-requeue-within"] is None
        assert job["next-awake-within"] > 86_000_000


def test_json_body_and_defaults(spark, cluster, tmp_path):
    df = spark.range(0, 50, numPartitions=2).selectExpr("id", "concat('n', id) AS name",
                                                       "id % 2 = 0 AS even")
    write("batch", spark, df, cluster, tmp_path, queue="js", bodyFormat="json", retry=42,
          ttl=7200, replicate=2)
    bodies = queued(cluster, "js")
    rows = sorted((json.loads(b) for b in bodies.values()), key=lambda r: r["id"])
    assert rows == [{"id": i, "name": f"n{i}", "even": i % 2 == 0} for i in range(50)]
    job = show(cluster, next(iter(bodies)))
    assert (job["retry"], job["repl"]) == (42, 2) and 7000 < job["ttl"] <= 7200


def test_binary_body_and_sync_replication(spark, cluster, tmp_path):
    df = spark.range(0, 300, numPartitions=2).selectExpr("CAST(concat('b', id) AS BINARY) AS body")
    write("batch", spark, df, cluster, tmp_path, queue="bin", replicate=3)
    bodies = queued(cluster, "bin")
    assert sorted(bodies.values()) == sorted(f"b{i}".encode() for i in range(300))
    job = show(cluster, next(iter(bodies)))
    assert job["repl"] == 3 and len(job["nodes-delivered"]) == 3


def test_partition_writer_uses_one_connection_per_task(spark, cluster):
    df = spark.range(0, 4000, numPartitions=4).selectExpr("concat('c', id) AS body")
    before = [n.client(protocol=2).info("stats")["total_connections_received"] for n in cluster]
    df.foreachPartition(partition_writer(nodes_option(cluster), "conn", batch_size=100))
    after = [n.client(protocol=2).info("stats")["total_connections_received"] for n in cluster]
    # Each task: one connection (plus our two INFO clients, counted above).
    assert sum(after) - sum(before) <= 4 + len(cluster)
    assert len(queued(cluster, "conn")) == 4000


def test_register_explicitly(spark, cluster, tmp_path):
    from disquette.spark import register

    register(spark)
    df = spark.range(0, 10).selectExpr("concat('r', id) AS body")
    write("batch", spark, df, cluster, tmp_path, queue="reg")
    assert len(queued(cluster, "reg")) == 10


def test_several_connections_per_task(spark, cluster, tmp_path):
    """``connections``: several batches in flight per task, each on its own
    connection; every row arrives once, with its body."""
    n = 20_000
    df = spark.range(0, n, numPartitions=2).selectExpr("concat('w', id) AS body")
    before = [nd.client(protocol=2).info("stats")["total_connections_received"] for nd in cluster]
    write("batch", spark, df, cluster, tmp_path, queue="wide", batchSize=500, connections=4)
    df.foreachPartition(partition_writer(nodes_option(cluster), "wide2", batch_size=500,
                                         connections=4))
    after = [nd.client(protocol=2).info("stats")["total_connections_received"] for nd in cluster]
    expected_bodies = sorted(f"w{i}".encode() for i in range(n))
    assert sorted(queued(cluster, "wide").values()) == expected_bodies
    assert sorted(queued(cluster, "wide2").values()) == expected_bodies
    # 2 writes x 2 tasks, more than one connection each (the pool opens them as needed)
    assert sum(after) - sum(before) > 4 + 2 * len(cluster)


# -- staging with held jobs: none of the DELAY trick's side effects -------------

def test_released_jobs_show_no_staging_delay_and_count_no_delivery(spark, cluster, tmp_path):
    """SHOW shows the row's own DELAY (none), and a consumer gets each job as
    its first delivery: additional-deliveries 0, a Worker's ``attempts`` 1."""
    from disquette import Client

    df = spark.range(0, 200, numPartitions=2).selectExpr("concat('s', id) AS body")
    write("batch", spark, df, cluster, tmp_path, queue="first", ttl=3600, replicate=2)
    bodies = queued(cluster, "first")
    assert len(bodies) == 200
    for jid in list(bodies)[:20]:
        job = show(cluster, jid)
        assert job["state"] == b"queued" and job["delay"] == 0
        assert job["additional-deliveries"] == 0 and job["nacks"] == 0
    with Client(nodes_option(cluster)) as client:
        got = []
        while len(got) < 200:
            jobs = client.get_jobs("first", count=200, timeout_ms=2000)
            assert jobs, f"only {len(got)} of 200 jobs delivered"
            got += jobs
    assert sorted(j.raw for j in got) == sorted(bodies.values())
    assert {(j.additional_deliveries, j.attempts) for j in got} == {(0, 1)}


def test_a_one_second_ttl_is_staged_too(spark, cluster, tmp_path):
    """Staging no longer needs TTL >= 2 s: every row is added (held). The
    commit must come within the TTL, as for any staged job: on a machine too
    loaded for that, the jobs expire held and the commit says it could not
    release them (the DELAY trick refused the write before adding anything)."""
    df = spark.range(0, 10, numPartitions=1).selectExpr("concat('t', id) AS body")
    reset_stats(cluster)
    try:
        write("batch", spark, df, cluster, tmp_path, queue="short", ttl=1, retry=0,
              replicate=1)
    except Exception as e:  # noqa: BLE001 - Spark wraps the driver's error
        assert "could not release" in str(e), e
    assert addjob_calls(cluster) == 10


def _write_with_a_killed_attempt(spark, cluster, tmp_path, n: int, ttl: int) -> None:
    """A staged batch write of ``n`` PADDED rows (every 10th with a DELAY of
    1 s) whose partition 0 fails on its first attempt after part of its rows
    were added; Spark's retry commits."""
    from pyspark.sql.functions import udf

    addrs = [(h.host, h.port) for h in cluster]
    half = n // 2

    @udf("string")
    def fail_once(body):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and body.startswith(f"row-{half - 100}-"):
            import redis

            from tests.harness import wait_until

            def some_added():  # partition 1 adds `half` rows: more are ours
                ids = set()
                for h, p in addrs:
                    ids.update(redis.Redis(h, p).execute_command("JSCAN", 0, "BUSYLOOP")[1])
                return len(ids) >= half + 100
            wait_until(some_added)
            raise RuntimeError("forced failure of the first attempt")
        return body

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = (spark.range(0, n, numPartitions=2)
              .selectExpr(PADDED, "CASE WHEN id % 10 = 3 THEN 1 END AS delay")
              .select(fail_once("body").alias("body"), "delay"))
        reset_stats(cluster)
        # RETRY = TTL: no copy is re-queued (on a second node) while the test looks.
        write("batch", spark, df, cluster, tmp_path, queue="k", batchSize=100, ttl=ttl,
              retry=ttl)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert addjob_calls(cluster) > n        # the killed attempt did add jobs


def test_a_killed_attempts_jobs_are_never_queued_they_expire(spark, cluster, tmp_path):
    """What a killed task attempt staged stays held on every holder, rows
    with their own DELAY included, and goes at its TTL without ever being
    queued (the DELAY trick queued it in its last second)."""
    n, ttl = 2000, 25
    _write_with_a_killed_attempt(spark, cluster, tmp_path, n, ttl)
    want = sorted(f"row-{i}-{PAD}".encode() for i in range(n))
    # The committed rows with a DELAY are queued 1 s after the release; a
    # killed attempt's copies of them never are.
    wait_until(lambda: len(queued(cluster, "k")) == n, timeout=30)
    committed = queued(cluster, "k")
    assert sorted(committed.values()) == want
    delayed = next(j for j, b in committed.items() if b.startswith(b"row-3-"))
    assert show(cluster, delayed)["delay"] == 1
    orphans = all_job_ids(cluster) - set(committed)
    assert orphans
    assert any(show(cluster, j)["delay"] == 1 for j in orphans)
    for jid in sorted(orphans)[:50]:
        job = show(cluster, jid)
        assert job["state"] == b"held" and job["next-requeue-within"] is None, job
    seen_queued: set[str] = set()

    def orphans_gone() -> bool:
        for node in cluster:
            for entry in node.client(protocol=2).execute_command("QPEEK", "k", -10_000) or []:
                seen_queued.add(entry[1].decode())
        return not (orphans & all_job_ids(cluster))
    wait_until(orphans_gone, timeout=ttl + 30, interval=0.1)
    assert not (orphans & seen_queued), "a killed attempt's job was queued"
