#!/usr/bin/env python3
"""The Python SDK against pydisque and raw redis-py, side by side (issues 9, 26).

    .venv/bin/python bench/bench_sdk.py            # --quick, --only ROW,..., --rounds N
                                                   # --node-tree DIR: the node's code from DIR

One Disquette node; every client runs in this process, one after the other
within a round (the order alternates between rounds), on the same redis-py 8
with hiredis, RESP2.  Rows (``--only`` takes their names):

  add       add_job in a loop         vs pydisque add_job / redis-py execute_command
  batch     add_jobs (pipelined, 1000 a batch) vs redis-py pipeline   target >= 0.8x
  worker    Worker, async no-op handler, on a pre-filled queue, asking GETJOB COUNT
            64 (two in flight, concurrency 128) and acking each batch in one ACKJOB,
            vs a bare redis-py loop making the same calls (GETJOB COUNT 64
            WITHCOUNTERS, then one ACKJOB of its ids)   target >= 0.8x (issue 26);
            the Worker with one GETJOB in flight (concurrency 64, fetchers=1, as
            the loop) beside it, no target; and vs three pydisque loops: GETJOB +
            ACKJOB per job; GETJOB COUNT 64 + ACKJOB per job; GETJOB COUNT 64 +
            one ACKJOB   target >= 2x the best
  worker-def  the same Worker with a plain ``def`` no-op handler (thread pool)
  metrics   the no-op Worker counting Prometheus metrics (its default, as ``disquette
            worker`` runs it) vs ``metrics=False``                target >= 0.9x (issue 38)
  app       an App's no-op task (``[]`` bodies: a call without arguments) vs the plain
            Worker's no-op handler on the same bodies                target >= 0.9x
  app-features  the same App task with a backoff set on the App, beside tasks with
            max_running and results (which its jobs do not use), vs the bare App
                                                                     target >= 0.95x

Figures are jobs per second (median of the rounds); ratios are medians of
the per-round ratios.  The node runs this checkout's code (compiled if built
in place, ``make build``) unless ``--node-tree`` names another checkout.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's disquette

import redis  # noqa: E402
from common import median, parse_bench_args, start_disquette  # noqa: E402
from pydisque.client import Client as PydisqueClient  # noqa: E402

from disquette import App, Backoff, Client, Worker  # noqa: E402

BODY = b"x" * 100
BATCH = 1000
PREFETCH = 64


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.rounds = args.rounds or (1 if args.quick else 3)
        if args.node_tree:
            self.node = start_disquette(root=Path(args.node_tree).resolve())
        else:
            self.node = start_disquette()
        self.addr = f"127.0.0.1:{self.node.port}"
        self.raw = redis.Redis(port=self.node.port, protocol=2)

    def n(self, full: int) -> int:
        n = full // 4 if self.args.quick else full
        return max(1000, int(n * self.args.scale))

    def flush(self) -> None:
        self.raw.execute_command("DEBUG", "FLUSHALL")

    def prefill(self, n: int, body: bytes = BODY) -> None:
        self.flush()
        pipe = self.raw.pipeline(transaction=False)
        for i in range(n):
            pipe.execute_command("ADDJOB", "q", body, 0)
            if i % BATCH == BATCH - 1:
                pipe.execute()
        pipe.execute()
        assert self.raw.execute_command("QLEN", "q") == n

    def rate(self, n: int, fn: Callable[[], float | None],
             prefill: bool | bytes = False) -> tuple[float, str]:
        """Jobs/s of ``fn`` (over the seconds it returns, if it does: the
        Worker's time to its n-th job, without its stop), and the CPU it cost
        per job (node / this process).  ``prefill``: the queue first (with
        that body, if bytes)."""
        if prefill:
            self.prefill(n, prefill if isinstance(prefill, bytes) else BODY)
        else:
            self.flush()
        node0, me0, t0 = cpu_seconds(self.node.pid), time.process_time(), time.perf_counter()
        elapsed = fn()
        rate = n / (elapsed if elapsed is not None else time.perf_counter() - t0)
        node_us = (cpu_seconds(self.node.pid) - node0) / n * 1e6
        me_us = (time.process_time() - me0) / n * 1e6
        return rate, f"cpu/job node {node_us:.1f} us, client {me_us:.1f} us"

    def pydisque(self) -> PydisqueClient:
        c = PydisqueClient([self.addr])
        c.connect()
        return c


# --------------------------------------------------------------- producers

def sdk_add_loop(b: Bench, n: int) -> None:
    c = Client(b.addr)
    for _ in range(n):
        c.add_job("q", BODY, 0)
    c.close()


def pydisque_add_loop(b: Bench, n: int) -> None:
    c = b.pydisque()
    for _ in range(n):
        c.add_job("q", BODY, timeout=0)


def raw_add_loop(b: Bench, n: int) -> None:
    r = redis.Redis(port=b.node.port, protocol=2)
    for _ in range(n):
        r.execute_command("ADDJOB", "q", BODY, 0)
    r.close()


def sdk_add_batch(b: Bench, n: int) -> None:
    c = Client(b.addr)
    c.add_jobs([("q", BODY)] * n, batch_size=BATCH, timeout_ms=0)
    c.close()


def raw_pipeline(b: Bench, n: int) -> None:
    r = redis.Redis(port=b.node.port, protocol=2)
    for start in range(0, n, BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(BATCH, n - start)):
            pipe.execute_command("ADDJOB", "q", BODY, 0)
        ids = pipe.execute()
        assert all(isinstance(i, bytes) for i in ids)
    r.close()


# --------------------------------------------------------------- consumers

def sdk_worker(b: Bench, n: int, handler, fetchers: int = 2, metrics: bool | None = False,
               app: Callable[[Client], App] | None = None) -> float:
    """``worker.run()`` (uvloop, main thread) until n jobs are done: its
    ``fetchers`` fetch loops each ask GETJOB COUNT 64 (concurrency 64 each),
    the acks of a batch riding on the next GETJOB.  Returns the seconds to
    the n-th job's end: the stop that follows (its last GETJOB blocks up to
    poll_ms on the empty queue, then the acks are flushed) is not serving,
    and would count a second against a loop that just ends.  ``app``: the
    worker of the App it makes (``handler`` unused)."""
    t0 = time.perf_counter()
    options = dict(concurrency=fetchers * PREFETCH, fetchers=fetchers, metrics=metrics)
    if app is not None:
        w = app(Client(b.addr)).worker(**options)
    else:
        w = Worker(Client(b.addr), "q", handler, **options)
    done_at: list[float] = []

    def stop_when_done() -> None:
        # Long naps far from the n-th job, 1 ms ones near it: each wake-up of
        # this thread takes the GIL from the Worker (polling every 2 ms cost
        # it 0.3-0.4 us per job, 7% of its CPU).
        while (left := n - w.stats["ok"]) > 0:
            time.sleep(min(0.05, max(0.001, left / 200_000)))
        done_at.append(time.perf_counter())
        w.stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    w.run()
    return done_at[0] - t0


async def async_noop(job) -> None:
    pass


def def_noop(job) -> None:
    pass


def raw_worker_loop(b: Bench, n: int) -> None:
    """The bare redis-py loop the Worker is held to: GETJOB COUNT 64 (with
    the counters the Worker reads), then one ACKJOB for the batch."""
    r = redis.Redis(port=b.node.port, protocol=2)
    done = 0
    while done < n:
        jobs = r.execute_command("GETJOB", "TIMEOUT", 1000, "COUNT", PREFETCH, "WITHCOUNTERS",
                                 "FROM", "q")
        if jobs:
            r.execute_command("ACKJOB", *[j[1] for j in jobs])
            done += len(jobs)
    r.close()


# pydisque names the fields of a GETJOB entry (job_id, queue, body), but the
# reply is [queue, id, body]: the id is the second item.

def pydisque_per_job(b: Bench, n: int) -> None:
    c, done = b.pydisque(), 0
    while done < n:
        for _queue, job_id, _body in c.get_job(["q"], nohang=True):
            c.ack_job(job_id)
            done += 1


def pydisque_count_ack_each(b: Bench, n: int) -> None:
    c, done = b.pydisque(), 0
    while done < n:
        for _queue, job_id, _body in c.get_job(["q"], count=PREFETCH, nohang=True):
            c.ack_job(job_id)
            done += 1


def pydisque_count_ack_batch(b: Bench, n: int) -> None:
    c, done = b.pydisque(), 0
    while done < n:
        jobs = c.get_job(["q"], count=PREFETCH, nohang=True)
        if jobs:
            c.ack_job(*[j[1] for j in jobs])
            done += len(jobs)


# --------------------------------------------------------------- rows

def measure(b: Bench, name: str, n: int, sides: dict[str, Callable[[], float | None]],
            prefill: bool = False) -> dict[str, list[float]]:
    """Jobs/s per side, one a round (sides alternate order)."""
    rates: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(b.rounds):
        order = list(sides.items())
        if r % 2:
            order.reverse()
        for side, fn in order:
            rate, cpu = b.rate(n, fn, prefill)
            rates[side].append(rate)
            log(f"  {name} round {r + 1}/{b.rounds}: {side} {rate:,.0f}/s ({cpu})")
    return rates


def row_add(b: Bench) -> list[str]:
    n = b.n(40_000)
    m = measure(b, "add", n, {"sdk": lambda: sdk_add_loop(b, n),
                              "pydisque": lambda: pydisque_add_loop(b, n),
                              "raw": lambda: raw_add_loop(b, n)})
    return ["add_job loop", m["sdk"], m["pydisque"], m["raw"], "-"]


def row_batch(b: Bench) -> list[str]:
    n = b.n(200_000)
    m = measure(b, "batch", n, {"sdk": lambda: sdk_add_batch(b, n),
                                "raw": lambda: raw_pipeline(b, n)})
    return [f"add_jobs, {BATCH} a batch (raw: pipeline)", m["sdk"], None, m["raw"],
            ("raw", 0.8)]


PYDISQUE_LOOPS = {  # name: (row label, loop)
    "pydisque-64-batch-ack": ("GETJOB COUNT 64 + one ACKJOB (its best)", pydisque_count_ack_batch),
    "pydisque-64": ("GETJOB COUNT 64 + ACKJOB per job", pydisque_count_ack_each),
    "pydisque-1": ("GETJOB + ACKJOB per job (its README loop)", pydisque_per_job),
}


def worker_rows(b: Bench, kind: str, handler) -> list[list]:
    """The Worker against the bare redis-py loop (issue 26's target, for the
    async no-op), then one row per pydisque loop (issue 9's target on its best)."""
    n = b.n(60_000)
    sides = {"sdk": lambda: sdk_worker(b, n, handler), "raw": lambda: raw_worker_loop(b, n),
             "sdk-1": lambda: sdk_worker(b, n, handler, fetchers=1)}
    sides.update({k: (lambda f=f: f(b, n)) for k, (_, f) in PYDISQUE_LOOPS.items()})
    m = measure(b, "worker", n, sides, prefill=True)
    best = max(PYDISQUE_LOOPS, key=lambda k: median(m[k]))
    rows = [[f"Worker, {kind} no-op vs redis-py GETJOB COUNT 64 + one ACKJOB", m["sdk"], None,
             m["raw"], ("raw", 0.8) if kind == "async" else "-"],
            [f"Worker, {kind} no-op, one GETJOB COUNT 64 in flight, vs the same loop",
             m["sdk-1"], None, m["raw"], "-"]]
    return rows + [[f"Worker, {kind} no-op vs pydisque {label}", m["sdk"], m[k], None,
                    ("pydisque", 2.0) if k == best else "-"]
                   for k, (label, _) in PYDISQUE_LOOPS.items()]


async def noop_task() -> None:
    pass


def def_noop_task() -> None:
    pass


def noop_app(client: Client) -> App:
    """An App whose task of queue q does nothing (the App path's no-op)."""
    app = App(client)
    app.job("q")(noop_task)
    return app


def featured_app(client: Client) -> App:
    """The same task, in an App with a backoff set for every task and with
    tasks using max_running and results beside it, served by the same worker
    (their queues stay empty)."""
    app = App(client, backoff=Backoff(base=1, cap=60))
    app.job("q")(noop_task)
    app.job("limited", max_running=4)(def_noop_task)
    app.job("answers", results=True)(noop_task)
    return app


def ratio_row(b: Bench, name: str, title: str, sides: dict[str, Callable[[int], float]],
              goal: float, body: bytes = BODY) -> list[list]:
    """Two Workers on the same prefilled queue: the first side against the second
    (a row of the second table: title, the sides' names and rates, the target)."""
    n = b.n(60_000)
    m = measure(b, name, n, {k: (lambda f=f: f(n)) for k, f in sides.items()}, prefill=body)
    first, second = list(sides)
    return [[title, first, m[first], second, m[second], goal]]


def rows_metrics(b: Bench) -> list[list]:
    return ratio_row(b, "metrics", "Worker, async no-op, metrics on vs metrics=False", {
        "metrics": lambda n: sdk_worker(b, n, async_noop, metrics=None),
        "no metrics": lambda n: sdk_worker(b, n, async_noop)}, 0.9)


def rows_app(b: Bench) -> list[list]:
    return ratio_row(b, "app", "App no-op task vs Worker no-op handler ([] bodies)", {
        "app": lambda n: sdk_worker(b, n, None, app=noop_app),
        "worker": lambda n: sdk_worker(b, n, async_noop)}, 0.9, body=b"[]")


def rows_app_features(b: Bench) -> list[list]:
    return ratio_row(b, "app-features", "App no-op task, backoff/limits/results beside it, "
                     "vs the bare App", {
                         "featured": lambda n: sdk_worker(b, n, None, app=featured_app),
                         "bare": lambda n: sdk_worker(b, n, None, app=noop_app)},
                     0.95, body=b"[]")


ROWS = {
    "add": lambda b: [row_add(b)],
    "batch": lambda b: [row_batch(b)],
    "worker": lambda b: worker_rows(b, "async", async_noop),
    "worker-def": lambda b: worker_rows(b, "def", def_noop),
}
RATIO_ROWS = {  # issue 38: what metrics, the App and its features cost
    "metrics": rows_metrics,
    "app": rows_app,
    "app-features": rows_app_features,
}


def fmt(v: list[float] | None) -> str:
    return "-" if v is None else f"{median(v):,.0f}/s"


def ratio(a: list[float], b: list[float]) -> float:
    """The median of the per-round ratios (both sides of a round ran back
    to back, under the same load)."""
    return median([x / y for x, y in zip(a, b)])


def table(rows: list[list]) -> str:
    head = ["row", "SDK", "pydisque", "raw redis-py", "SDK/pydisque", "SDK/raw", "target"]
    lines = []
    for title, sdk, pyd, raw, target in rows:
        cells = [title, fmt(sdk), fmt(pyd), fmt(raw),
                 f"{ratio(sdk, pyd):.2f}x" if pyd else "-",
                 f"{ratio(sdk, raw):.2f}x" if raw else "-"]
        if target == "-":
            cells.append("-")
        else:
            ref, goal = target
            got = ratio(sdk, pyd if ref == "pydisque" else raw)
            cells.append(f">= {goal:g}x vs {ref}: {'PASS' if got >= goal else 'MISS'}")
        lines.append(cells)
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(x, widths)) + " |" for x in lines]
    return "\n".join(out)


def ratio_table(rows: list[list]) -> str:
    out = ["| row | first | second | first/second (rounds) | target |",
           "| --- | ---: | ---: | --- | --- |"]
    for title, first, a, second, b, goal in rows:
        got = ratio(a, b)
        rounds = ", ".join(f"{x / y:.2f}" for x, y in zip(a, b))
        out.append(f"| {title} | {first} {fmt(a)} | {second} {fmt(b)} | {got:.2f}x ({rounds}) "
                   f"| >= {goal:g}x: {'PASS' if got >= goal else 'MISS'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv, __doc__.split("\n\n")[0], [*ROWS, *RATIO_ROWS],
                            extra=lambda ap: (
        ap.add_argument("--node-tree", default="", help="run the node from this checkout "
                        "(e.g. one with the compiled core built) instead of this one")))
    unknown = set(args.names) - set(ROWS) - set(RATIO_ROWS)
    if unknown:
        args.parser.error(f"unknown row(s): {', '.join(sorted(unknown))}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Python {platform.python_version()}, redis-py {redis.__version__}, "
          f"{os.cpu_count()} CPUs, load average {load}", flush=True)
    b = Bench(args)
    rows, ratio_rows = [], []
    try:
        for name, fn in ROWS.items():
            if not args.names or name in args.names:
                log(f"{name}:")
                rows += fn(b)
        for name, fn in RATIO_ROWS.items():
            if not args.names or name in args.names:
                log(f"{name}:")
                ratio_rows += fn(b)
    finally:
        b.node.stop()
    if rows:
        print(table(rows))
    if ratio_rows:
        print(ratio_table(ratio_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
