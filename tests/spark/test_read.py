"""Reading jobs into Spark: streaming into a memory sink (every job once,
acked only after Spark commits), a query stopped and restarted from its
checkpoint, and a batch read that drains up to maxJobs."""

from __future__ import annotations

from disquette import Client
from tests.harness import wait_until
from tests.spark.kit import all_job_ids, nodes_option, queued, show


def add_jobs(cluster, n, queues=("a", "b"), retry=30):
    """n jobs spread over every node and both queues; returns id -> body."""
    added = {}
    for k, node in enumerate(cluster):
        with Client(node.addr) as c:
            items = [(queues[i % len(queues)], f"{node.port}-{i}".encode())
                     for i in range(k, n, len(cluster))]
            for (q, body), jid in zip(items, c.add_jobs(items, retry=retry, timeout_ms=0)):
                added[jid] = body.decode()
    return added


def rows_of(spark, table):
    return spark.sql(f"SELECT id, body, queue, nacks, additional_deliveries FROM {table}").collect()


def stream(spark, cluster, name, checkpoint, **options):
    return (spark.readStream.format("disquette").option("nodes", nodes_option(cluster))
            .option("queues", "a,b").options(**options).load()
            .writeStream.format("memory").queryName(name)
            .option("checkpointLocation", str(checkpoint)).start())


def test_stream_read_every_job_once_acked_after_commit(spark, cluster, tmp_path):
    added = add_jobs(cluster, 3000)
    query = stream(spark, cluster, "once", tmp_path / "ckpt", maxJobsPerTrigger="500")
    try:
        wait_until(lambda: spark.sql("SELECT count(*) FROM once").first()[0] >= len(added),
                   timeout=120, interval=0.5)
        # Everything read is acked once Spark has committed its micro-batch.
        wait_until(lambda: not all_job_ids(cluster), timeout=60, interval=0.5)
    finally:
        query.stop()
    rows = rows_of(spark, "once")
    assert sorted(r.id for r in rows) == sorted(added)          # every job, once
    assert all(added[r.id] == r.body for r in rows)
    assert {r.queue for r in rows} == {"a", "b"}
    assert all(r.nacks == 0 and r.additional_deliveries == 0 for r in rows)


def test_jobs_not_acked_while_the_batch_runs(spark, cluster, tmp_path):
    added = add_jobs(cluster, 200, retry=2)
    seen = []

    def sink(batch_df, batch_id):
        ids = [r.id for r in batch_df.select("id").collect()]
        if ids:
            # Inside the micro-batch: not acked, not queued anywhere.
            for jid in ids[:20]:
                job = show(cluster, jid)
                seen.append(job["state"])
        seen.extend(["batch"])

    query = (spark.readStream.format("disquette").option("nodes", nodes_option(cluster))
             .option("queues", "a,b").load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        wait_until(lambda: not all_job_ids(cluster), timeout=120, interval=0.5)
    finally:
        query.stop()
    states = [s for s in seen if s != "batch"]
    assert states and set(states) == {b"active"}
    assert not queued(cluster, "a") and not queued(cluster, "b")


def test_stream_stopped_and_restarted_loses_nothing(spark, cluster, tmp_path):
    """A file sink (the memory sink cannot restart from a checkpoint)."""
    added = add_jobs(cluster, 3000, retry=3)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def start():
        return (spark.readStream.format("disquette").option("nodes", nodes_option(cluster))
                .option("queues", "a,b").option("maxJobsPerTrigger", "200").load()
                .writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(ckpt)).start())

    def written():
        try:
            return spark.read.schema("id string, body string").parquet(str(out)).collect()
        except Exception:  # no file yet
            return []

    first = start()
    wait_until(lambda: len(written()) >= 600, timeout=120, interval=0.2)
    first.stop()                        # in the middle: jobs are still queued
    assert len({r.id for r in written()}) < len(added)
    second = start()
    try:
        wait_until(lambda: {r.id for r in written()} >= set(added), timeout=180, interval=0.5)
        wait_until(lambda: not all_job_ids(cluster), timeout=60, interval=0.5)
    finally:
        second.stop()
    rows = written()
    assert {r.id for r in rows} == set(added)
    assert all(added[r.id] == r.body for r in rows)


def test_batch_read_drains_up_to_max_jobs(spark, cluster):
    added = add_jobs(cluster, 500)
    df = (spark.read.format("disquette").option("nodes", nodes_option(cluster))
          .option("queues", "a,b").option("maxJobs", "200").load())
    rows = df.collect()
    assert len(rows) == 200 and {r.id for r in rows} <= set(added)
    assert all(added[r.id] == r.body for r in rows)
    left = {**queued(cluster, "a"), **queued(cluster, "b")}
    assert len(left) == 300 and not set(left) & {r.id for r in rows}
    # What was read is acked (the ack GC then deletes it everywhere).
    wait_until(lambda: all_job_ids(cluster) == set(left), interval=0.2)


def test_batch_read_binary_bodies(spark, cluster):
    with Client(cluster[0].addr) as c:
        jid = c.add_job("a", b"\xff\x00raw")
    rows = (spark.read.format("disquette").option("nodes", nodes_option(cluster))
            .option("queues", "a").option("bodyType", "binary").load().collect())
    assert [(r.id, bytes(r.body)) for r in rows] == [(jid, b"\xff\x00raw")]
