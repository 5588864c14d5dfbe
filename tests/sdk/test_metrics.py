"""The Worker's Prometheus metrics, counted per batch and read when scraped:
what a scrape shows after real jobs, and ``--no-metrics``."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import REGISTRY

from disquette import Client, Worker
from disquette.cli import _worker, parser
from tests.sdk.test_worker import Running


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_scrape_counts_every_job_and_observes_each_once(dnode, wait_until):
    c = Client(dnode.addr)
    before = {k: sample("disquette_worker_jobs_total", queue="metered", outcome=k)
              for k in ("ok", "failed")}
    observed = sample("disquette_worker_job_duration_seconds_count", queue="metered")
    c.add_jobs([("metered", i) for i in range(200)])
    release = threading.Event()

    async def handler(job):
        if job.body == 7 and job.attempts == 1:
            raise ValueError("once")
        if job.body == 8:  # waits: in flight while the test scrapes
            while not release.is_set():
                await asyncio.sleep(0.01)

    w = Worker(c, "metered", handler, concurrency=32)
    with Running(w):
        wait_until(lambda: w.stats["ok"] == 199)
        assert sample("disquette_worker_jobs_in_flight") >= 1
        release.set()
        wait_until(lambda: w.stats["ok"] == 200)
    assert sample("disquette_worker_jobs_in_flight") == 0
    assert sample("disquette_worker_jobs_total", queue="metered", outcome="ok") - before[
        "ok"] == 200
    assert sample("disquette_worker_jobs_total", queue="metered", outcome="failed") - before[
        "failed"] == 1
    # Every job observed once (the failure too), in the +Inf bucket as in the count.
    count = sample("disquette_worker_job_duration_seconds_count", queue="metered") - observed
    assert count == 201
    assert sample("disquette_worker_job_duration_seconds_bucket", queue="metered",
                  le="+Inf") - observed == 201
    assert sample("disquette_worker_job_duration_seconds_bucket", queue="metered",
                  le="0.005") <= sample("disquette_worker_job_duration_seconds_bucket",
                                        queue="metered", le="10.0")


def test_no_metrics_flag(dnode):
    args = parser().parse_args(["worker", "tests.sdk.test_metrics:sample", "--queue", "q",
                                "--nodes", dnode.addr, "--no-metrics"])
    args.nodes_given = True
    assert _worker(args).metrics is None
    args.no_metrics = False
    assert _worker(args).metrics is not None
