"""Optional Prometheus metrics of the Worker (when prometheus-client is
importable).  One set per process, in prometheus-client's default registry:

* ``disquette_worker_jobs_total{queue, outcome}``: ``ok``, ``failed``,
  ``dead_lettered``, ``handed_back`` (NACKed at shutdown);
* ``disquette_worker_job_duration_seconds{queue}``: handler run time;
* ``disquette_worker_jobs_in_flight``: jobs being handled now.

Expose them with ``prometheus_client.start_http_server(port)`` (or
``disquette worker --metrics-port``).
"""

from __future__ import annotations

from typing import Any

try:
    import prometheus_client
except ImportError:  # optional dependency
    prometheus_client = None  # type: ignore[assignment]


class WorkerMetrics:
    _shared: "WorkerMetrics | None" = None

    @classmethod
    def get(cls) -> "WorkerMetrics | None":
        """The process-wide metrics, or None without prometheus-client."""
        if prometheus_client is None:
            return None
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        pc: Any = prometheus_client
        self.jobs = pc.Counter("disquette_worker_jobs", "Jobs finished by Disquette workers",
                               ["queue", "outcome"])
        self.duration = pc.Histogram("disquette_worker_job_duration_seconds",
                                     "Run time of Disquette job handlers", ["queue"])
        self.in_flight = pc.Gauge("disquette_worker_jobs_in_flight",
                                  "Jobs being handled by Disquette workers")
        self._children: dict[tuple[str, str], Any] = {}

    def finished(self, queue: str, outcome: str, seconds: float | None = None) -> None:
        child = self._children.get((queue, outcome))
        if child is None:
            child = self._children[(queue, outcome)] = self.jobs.labels(queue, outcome)
        child.inc()
        if seconds is not None:
            self.duration.labels(queue).observe(seconds)
