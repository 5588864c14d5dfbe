"""Crafted histories for the checker and report tests, written with the
real HistoryWriter on a clock the test moves."""

from __future__ import annotations

from pathlib import Path

from chaos.history import HistoryWriter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def at(self, t: float) -> "Clock":
        self.now = t
        return self


class Run:
    """A small run: ``job()`` adds and (optionally) delivers and acks a job."""

    def __init__(self, path: Path, **meta) -> None:
        self.clock = Clock()
        meta.setdefault("scenario", "crafted")
        meta.setdefault("seed", 7)
        meta.setdefault("nodes", {"n1": "127.0.0.1:7711", "n2": "127.0.0.1:7712"})
        self.w = HistoryWriter(path, clock=self.clock, started_at="2026-01-01T00:00:00.000+00:00",
                               **meta)
        self.path = path
        self.nodes = list(meta["nodes"])
        self.n = 0

    def at(self, t: float) -> "Run":
        self.clock.at(t)
        return self

    def add(self, t: float, reply_after: float = 0.01, *, outcome: str = "ok", retry: float = 5,
            node: str = "n1", value: str | None = None) -> tuple[int, str, str]:
        self.n += 1
        value = value or f"v{self.n}"
        job_id = f"D-00000000-job{self.n:021d}-0000"
        op = self.at(t).w.add_invoked(node=node, queue="q", value=value, replicate=2,
                                      retry=retry, client="p1")
        self.at(t + reply_after)
        if outcome == "ok":
            self.w.add_ok(op, job_id)
        elif outcome == "fail":
            self.w.add_failed(op, "NOREPL Timeout reached before replicating")
        elif outcome == "info":
            self.w.add_indeterminate(op, "timeout")
        return op, value, job_id

    def deliver(self, t: float, value: str, job_id: str, node: str = "n2", drain: bool = False):
        self.at(t).w.delivered(id=job_id, value=value, node=node, queue="q", client="c1",
                               drain=drain, nacks=0, additional_deliveries=0)

    def ack(self, t: float, job_id: str, node: str = "n2", fast: bool = False):
        self.at(t).w.acked(job_id, node, 1, fast=fast)

    def job(self, t: float, *, deliver_after: float = 0.1, **kw) -> tuple[str, str]:
        _, value, job_id = self.add(t, **kw)
        self.deliver(t + deliver_after, value, job_id)
        self.ack(t + deliver_after + 0.01, job_id)
        return value, job_id

    def finish(self, t: float, leftovers: dict[str, dict[str, str]] | None = None) -> Path:
        self.at(t).w.healed()
        self.w.drain_started()
        self.at(t + 0.5).w.drain_ended(True)
        for node in self.nodes:
            self.w.leftovers(node, (leftovers or {}).get(node, {}))
        self.w.close()
        return self.path


def clean_run(path: Path) -> Run:
    """Ten jobs, one fault in the middle, every job delivered once and acked."""
    run = Run(path)
    for i in range(10):
        run.job(i * 0.5)
        if i == 3:
            fault = run.at(i * 0.5 + 0.2).w.fault_started("partition", cut="n1|n2")
        if i == 6:
            run.at(i * 0.5 + 0.2).w.fault_stopped(fault)
    return run
