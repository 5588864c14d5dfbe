"""Exactly once across driver restarts: a real driver process (its own
SparkSession, tests/spark/restart_driver.py) is killed at each point of a
commit; the queries then restart from the same checkpoints (in this
process's SparkSession); every row is then exactly one job, and of the
commit records only the last ``done`` ones stay.

The first driver is told (DISQUETTE_SPARK_COMMIT_PAUSE, docs/spark.md) to
stop one write at each point: before its release, halfway through it, after
it but before Spark's commit log; the test kills the driver (the JVM and its
Python workers) once it sees every write there, on the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from disquette.spark.commits import PAUSE_ENV, RECORD_PREFIX, RELEASE_STEP, CommitKey
from tests.harness import REPO_ROOT, WAIT_TIMEOUT, wait_until
from tests.spark.kit import nodes_option, queued
from tests.spark.restart_driver import batch_writes, finish, start_streams

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DRIVER = Path(__file__).with_name("restart_driver.py")
# queue -> (parquet files = micro-batches, rows per file, where the first driver stops)
STREAMS = {
    "s-before": (2, 500, "before-release"),
    "s-mid": (1, RELEASE_STEP + 500, "mid-release"),
    "s-after": (1, 500, "after-release"),
}
WRITE = ("w-mid", RELEASE_STEP + 500, "mid-release")   # a batch write with a writeId
WRITE_ID = "nightly-1"
SPARK_TIMEOUT = 240       # a driver's whole run, on a loaded machine


def bodies(queue: str, n: int) -> list[str]:
    return [f"{queue}-{i}" for i in range(n)]


def parquet_source(path: Path, queue: str, files: int, rows: int) -> str:
    path.mkdir()
    all_rows = bodies(queue, files * rows)
    for f in range(files):
        pq.write_table(pa.table({"body": all_rows[f * rows:(f + 1) * rows]}),
                       path / f"part-{f}.parquet")
    return str(path)


def records(cluster, queue: str) -> list[dict]:
    """The commit record jobs of ``queue`` (a RECORD_PREFIX queue), from every node."""
    out = {}
    for n in cluster:
        for entry in n.client(protocol=2).execute_command("QPEEK", queue, 1000) or []:
            out[entry[1]] = json.loads(entry[2])
    return list(out.values())


def kinds(cluster, key: CommitKey) -> set[str]:
    return {r["kind"] for r in records(cluster, key.queue)}


def job_ids(cluster, queue: str) -> set[bytes]:
    """Every job of ``queue`` any node holds, queued or not."""
    ids: set[bytes] = set()
    for n in cluster:
        ids.update(n.client(protocol=2).execute_command("JSCAN", 0, "BUSYLOOP", "QUEUE",
                                                        queue)[1])
    return ids


def record_queues(cluster) -> set[str]:
    names: set[str] = set()
    for n in cluster:
        reply = n.client(protocol=2).execute_command("QSCAN", 0, "BUSYLOOP", "MINLEN", 1)
        names.update(q.decode() for q in reply[1] if q.decode().startswith(RECORD_PREFIX))
    return names


class Driver:
    """restart_driver.py in its own session, so that killing the session
    kills the JVM and every Python worker it started."""

    def __init__(self, cfg: dict, env: dict[str, str], log: Path) -> None:
        full_env = dict(os.environ, **env)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.log = log
        self.lines: list[str] = []
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), json.dumps(cfg)], cwd=log.parent, env=full_env,
                stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def query_ids(self, n: int) -> dict[str, str]:
        """queue -> query id, once the driver started its ``n`` streams."""
        def started():
            assert self.proc.poll() is None, self.tail()
            ids = [json.loads(x) for x in self.lines if x.startswith("{")]
            return len(ids) >= n and {i["queue"]: i["query"] for i in ids}
        return wait_until(started, timeout=SPARK_TIMEOUT, interval=0.2, message=self.tail)

    def tail(self) -> str:
        return f"driver exited {self.proc.poll()}; stderr: {self.log.read_text()[-3000:]}"

    def _session(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except (OSError, ValueError):
                continue
            state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
            if int(session) == self.proc.pid and state != "Z":
                pids.append(int(entry))
        return pids

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and their Python workers, as a crash would."""
        def gone():
            for pid in self._session():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return not self._session()
        gone()
        self.proc.wait(WAIT_TIMEOUT)
        wait_until(gone, message="the driver's processes outlive SIGKILL")


@pytest.mark.timeout(2 * SPARK_TIMEOUT)
def test_driver_killed_at_each_commit_point_adds_each_row_once(spark, cluster, tmp_path):
    rows: dict[str, int] = {}
    cfg: dict = {"nodes": nodes_option(cluster), "streams": [], "writes": []}
    for queue, (files, per_file, _) in STREAMS.items():
        src = parquet_source(tmp_path / queue, queue, files, per_file)
        cfg["streams"].append({"queue": queue, "src": src, "ckpt": str(tmp_path / f"{queue}-ckpt")})
        rows[queue] = files * per_file
    wqueue, wrows, wpoint = WRITE
    cfg["writes"].append({"queue": wqueue, "writeId": WRITE_ID,
                          "src": parquet_source(tmp_path / wqueue, wqueue, 1, wrows)})
    rows[wqueue] = wrows
    pause = ",".join([f"{point}@{q}" for q, (_, _, point) in STREAMS.items()]
                     + [f"{wpoint}@{wqueue}"])

    # The first driver: every write stops at its point; kill it there.
    first = Driver(cfg, {PAUSE_ENV: pause}, tmp_path / "driver-1.log")
    try:
        query_ids = first.query_ids(len(STREAMS))
        batch0 = {q: CommitKey.stream(query_ids[q], 0) for q in STREAMS}
        wkey = CommitKey.write(WRITE_ID)

        def at_every_point():
            assert first.proc.poll() is None, first.tail()
            return (
                # before the release: the record is written, nothing queued yet
                "release" in kinds(cluster, batch0["s-before"])
                and len(job_ids(cluster, "s-before")) == STREAMS["s-before"][1]
                and not queued(cluster, "s-before")
                # halfway: the first step released, its progress recorded
                and "progress" in kinds(cluster, batch0["s-mid"])
                and len(queued(cluster, "s-mid")) == RELEASE_STEP
                and "progress" in kinds(cluster, wkey)
                and len(queued(cluster, wqueue)) == RELEASE_STEP
                # after the release, before Spark's commit log
                and kinds(cluster, batch0["s-after"]) == {"done"}
                and len(queued(cluster, "s-after")) == STREAMS["s-after"][1])
        wait_until(at_every_point, timeout=SPARK_TIMEOUT, interval=0.2, message=first.tail)
        assert first.proc.poll() is None
    finally:
        first.kill()

    # The restart: the same queries from the same checkpoints, and the same
    # writeId, in another driver (this process's SparkSession); the batch
    # write runs twice: the second adds nothing.
    queries = start_streams(spark, cfg)
    cfg["writes"][0]["times"] = 2
    batch_writes(spark, cfg)
    finish(queries, SPARK_TIMEOUT)
    assert [str(q.id) for q in queries] == [query_ids[q] for q in STREAMS]

    for queue, n in rows.items():
        got = queued(cluster, queue)
        assert sorted(b.decode() for b in got.values()) == sorted(bodies(queue, n)), queue
        # nothing else either: no job staged twice waits in the cluster
        assert len(job_ids(cluster, queue)) == n, queue
    # Of the records, only the last micro-batch's `done` stays (and the write's).
    last = {CommitKey.stream(query_ids[q], files - 1).queue for q, (files, _, _) in STREAMS.items()}
    assert record_queues(cluster) == last | {wkey.queue}
    for name in last | {wkey.queue}:
        assert [r["kind"] for r in records(cluster, name)] == ["done"]
