"""Optional Prometheus metrics of the Worker (when prometheus-client is
importable).  One set per process, in prometheus-client's default registry:

* ``disquette_worker_jobs_total{queue, outcome}``: ``ok``, ``failed``,
  ``dead_lettered``, ``returned``, ``handed_back``, ``lease_lost``;
* ``disquette_worker_job_duration_seconds{queue}``: handler run time;
* ``disquette_worker_jobs_in_flight``: jobs being handled now.

Expose them with ``prometheus_client.start_http_server(port)`` (or
``disquette worker --metrics-port``).

Why not prometheus-client's own Counter and Histogram: a labelled
``inc()`` and ``observe()`` take a lock and look the child up, per job, which
cost the no-op Worker 58% of its rate.  Here the Worker adds plain integers,
once per batch of jobs that ended together (``succeeded``), and a Collector
turns them into samples when Prometheus scrapes; the in-flight gauge is read
from the running workers then.
"""

from __future__ import annotations

import bisect
import weakref
from typing import Any, Iterable

try:
    import prometheus_client
    from prometheus_client.core import (
        CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
    )
except ImportError:  # optional dependency
    prometheus_client = None  # type: ignore[assignment]

# prometheus-client's default buckets (seconds), +Inf last.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class _Durations:
    """One queue's histogram: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def add(self, seconds: float, n: int) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += n
        self.total += seconds * n


class WorkerMetrics:
    """The process's counts, shared by its workers (see the module doc)."""

    _shared: "WorkerMetrics | None" = None

    @classmethod
    def get(cls) -> "WorkerMetrics | None":
        """The process-wide metrics, or None without prometheus-client."""
        if prometheus_client is None:
            return None
        if cls._shared is None:
            cls._shared = cls()
            prometheus_client.REGISTRY.register(_Collector(cls._shared))
        return cls._shared

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], int] = {}
        self.durations: dict[str, _Durations] = {}
        self.workers: weakref.WeakSet[Any] = weakref.WeakSet()  # their in_flight

    def finished(self, queue: str, outcome: str, seconds: float | None = None,
                 n: int = 1) -> None:
        """``n`` jobs of ``queue`` ended with ``outcome`` (after ``seconds``)."""
        key = (queue, outcome)
        self.jobs[key] = self.jobs.get(key, 0) + n
        if seconds is not None:
            durations = self.durations.get(queue)
            if durations is None:
                durations = self.durations[queue] = _Durations()
            durations.add(seconds, n)

    def succeeded(self, runs: list[Any], now: float) -> None:
        """The jobs of a batch that succeeded together (each with ``job`` and
        ``started``), counted together: one GETJOB's jobs share their start
        and, mostly, their queue."""
        queues = [run.job.queue for run in runs]
        first = runs[0]
        if queues.count(first.job.queue) == len(queues):
            self.finished(first.job.queue, "ok", now - first.started, len(queues))
            return
        queue: str | None = None
        started = 0.0
        n = 0
        for run in runs:
            q, s = run.job.queue, run.started
            if q != queue or s != started:
                if n:
                    self.finished(queue, "ok", now - started, n)  # type: ignore[arg-type]
                queue, started, n = q, s, 0
            n += 1
        if n:
            self.finished(queue, "ok", now - started, n)  # type: ignore[arg-type]


class _Collector:
    """The samples of a :class:`WorkerMetrics`, made when scraped."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        m = self.metrics
        jobs = CounterMetricFamily("disquette_worker_jobs", "Jobs finished by Disquette workers",
                                   labels=["queue", "outcome"])
        for (queue, outcome), n in list(m.jobs.items()):
            jobs.add_metric([queue, outcome], n)
        yield jobs
        duration = HistogramMetricFamily("disquette_worker_job_duration_seconds",
                                         "Run time of Disquette job handlers", labels=["queue"])
        for queue, d in list(m.durations.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), d.counts):
                cumulative += count
                buckets.append((bound, cumulative))
            duration.add_metric([queue], buckets, d.total)
        yield duration
        yield GaugeMetricFamily("disquette_worker_jobs_in_flight",
                                "Jobs being handled by Disquette workers",
                                value=sum(w.in_flight for w in list(m.workers)))
