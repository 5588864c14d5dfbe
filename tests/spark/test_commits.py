"""Commit records (disquette/spark/commits.py) without Spark: what a driver
does at commit, run against a real 3-node cluster, by this process or by a
child process killed in the middle of a release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from pyspark.sql import Row

from disquette.spark.commits import (
    PAUSE_ENV, RELEASE_STEP, CommitKey, abort_release, commit_release, find, recorded,
)
from disquette.spark.options import OptionError, WriteOptions
from disquette.spark.writes import DisqueWriteError, abort_jobs, write_rows
from tests.harness import REPO_ROOT, WAIT_TIMEOUT, wait_until
from tests.spark.kit import nodes_option, queued


def options(cluster, queue: str, **extra: str) -> WriteOptions:
    return WriteOptions.from_options({"nodes": nodes_option(cluster), "queue": queue,
                                      "async": "true", **extra})


def stage(opts: WriteOptions, bodies: list[str]):
    """What the tasks of a write do: add the rows staged."""
    return write_rows(opts, [Row(body=b) for b in bodies])


def job_count(cluster, queue: str) -> int:
    ids: set[bytes] = set()
    for n in cluster:
        ids.update(n.client(protocol=2).execute_command("JSCAN", 0, "BUSYLOOP", "QUEUE",
                                                        queue)[1])
    return len(ids)


def kinds(cluster, key: CommitKey) -> list[str]:
    with options(cluster, "x").conn.client() as client:
        return sorted(body.get("kind", "?") for body in find(client, key).jobs.values())


def test_a_second_commit_of_the_same_key_adds_nothing(cluster):
    opts = options(cluster, "twice")
    key = CommitKey.write("twice-1")
    rows = [f"t{i}" for i in range(300)]
    jobs = stage(opts, rows)
    commit_release(opts, key, jobs.staged, jobs.all_ids(), skipped=False)
    assert sorted(b.decode() for b in queued(cluster, "twice").values()) == sorted(rows)
    assert kinds(cluster, key) == ["done"]
    with opts.conn.client() as client:
        assert recorded(client, key)            # a task would write nothing now
    # A re-run whose tasks staged again anyway: their jobs are deleted.
    again = stage(opts, rows)
    commit_release(opts, key, again.staged, again.all_ids(), skipped=False)
    assert job_count(cluster, "twice") == len(rows)
    assert len(queued(cluster, "twice")) == len(rows)


def test_next_micro_batch_drops_the_record_of_the_one_before(cluster):
    opts = options(cluster, "mb")
    for batch in range(3):
        jobs = stage(opts, [f"b{batch}-{i}" for i in range(10)])
        commit_release(opts, CommitKey.stream("q-1", batch), jobs.staged, jobs.all_ids(),
                       skipped=False)
    assert kinds(cluster, CommitKey.stream("q-1", 0)) == []
    assert kinds(cluster, CommitKey.stream("q-1", 1)) == []
    assert kinds(cluster, CommitKey.stream("q-1", 2)) == ["done"]
    assert len(queued(cluster, "mb")) == 30


def test_a_failed_commit_aborted_leaves_nothing_and_can_run_again(cluster):
    """A commit that fails after writing its record (jobs gone under it):
    Spark aborts; the abort deletes the jobs and that record, so running
    the write again writes it afresh."""
    opts = options(cluster, "fail")
    key = CommitKey.write("fail-1")
    rows = [f"f{i}" for i in range(50)]
    jobs = stage(opts, rows)
    with opts.conn.client() as client:
        client.fast_ack(*jobs.staged[:5])
    with pytest.raises(DisqueWriteError, match="could not release 5 of 50"):
        commit_release(opts, key, jobs.staged, jobs.all_ids(), skipped=False)
    assert kinds(cluster, key) == ["release"]
    abort_jobs(opts.conn, jobs.all_ids())
    abort_release(opts, key, jobs.all_ids())
    assert kinds(cluster, key) == [] and job_count(cluster, "fail") == 0
    # An abort of another run (its tasks failed) keeps an earlier run's record.
    jobs = stage(opts, rows)
    with opts.conn.client() as client:
        client.fast_ack(*jobs.staged[:5])
    with pytest.raises(DisqueWriteError):
        commit_release(opts, key, jobs.staged, jobs.all_ids(), skipped=False)
    abort_release(opts, key, stage(opts, rows).all_ids())
    assert kinds(cluster, key) == ["release"]


def test_tasks_that_skipped_need_the_record(cluster):
    opts = options(cluster, "lost")
    with pytest.raises(Exception, match="cannot find now"):
        commit_release(opts, CommitKey.write("never-written"), [], [], skipped=True)


def test_write_id_needs_the_staged_write(cluster):
    assert options(cluster, "w", writeId="abc").write_id == "abc"
    with pytest.raises(OptionError, match="'writeId' needs the staged write"):
        options(cluster, "w", writeId="abc", staged="false")


DRIVER = textwrap.dedent("""
    import json, sys
    from disquette.spark.commits import CommitKey, commit_release
    from disquette.spark.options import WriteOptions
    from disquette.spark.writes import write_rows
    from pyspark.sql import Row

    opts = WriteOptions.from_options(json.loads(sys.argv[1]))
    jobs = write_rows(opts, [Row(body=f"k{i}") for i in range(int(sys.argv[2]))])
    print(json.dumps(jobs.staged), flush=True)
    commit_release(opts, CommitKey.write(sys.argv[3]), jobs.staged, jobs.all_ids(), False)
""")


def test_a_release_killed_halfway_is_finished_with_the_same_jobs(cluster):
    """A driver (a plain process here) killed after the first release step;
    the next commit of the same key releases the rest of the SAME jobs and
    deletes what its own tasks staged."""
    n = RELEASE_STEP + 200
    raw = {"nodes": nodes_option(cluster), "queue": "half", "async": "true"}
    env = dict(os.environ, **{PAUSE_ENV: "mid-release@half"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", ""))
                                        if p)
    key = CommitKey.write("half-1")
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(raw), str(n), "half-1"],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        first_ids = json.loads(proc.stdout.readline())
        wait_until(lambda: "progress" in kinds(cluster, key), timeout=WAIT_TIMEOUT)
        assert len(queued(cluster, "half")) == RELEASE_STEP
    finally:
        proc.kill()
        proc.wait(WAIT_TIMEOUT)
    opts = WriteOptions.from_options(raw)
    again = stage(opts, [f"k{i}" for i in range(n)])
    commit_release(opts, key, again.staged, again.all_ids(), skipped=False)
    got = queued(cluster, "half")
    assert sorted(got) == sorted(first_ids)     # the first driver's jobs, all of them
    assert sorted(b.decode() for b in got.values()) == sorted(f"k{i}" for i in range(n))
    assert job_count(cluster, "half") == n
    assert kinds(cluster, key) == ["done"]
