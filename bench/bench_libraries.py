#!/usr/bin/env python3
"""The SDK's worker against Python's job libraries, each with its own worker
command and one worker process (issue 38).

    .venv/bin/python bench/bench_libraries.py          # --jobs N (20,000), --only NAME,...

Each row: N no-op jobs queued with the library's documented fast producer,
then its worker command started as a subprocess; the handler counts its calls
(one ``next()`` of a shared counter, the same code for every library) and
notes the time of the first and the N-th: the rate is (N - 1) over the time
between them, so neither start-up nor the producer counts.  Disquette runs on
one node of this checkout (compiled when built in place), the others on a
Debian ``redis-server`` (RabbitMQ is not installed here; Redis is a broker
every library supports).  Settings, as the table in docs/sdk.md writes them:

  disquette-async   disquette worker tasks:noop --queue q (async def; concurrency 16,
                    metrics on: its defaults)
  disquette-nometrics  the same with --no-metrics
  disquette-app     disquette worker tasks:app (an App's async no-op task)
  disquette-def     disquette worker tasks:noop_def --queue q (def handler, thread pool)
  celery            celery worker --pool solo --concurrency 1 --without-gossip
                    --without-mingle --without-heartbeat (Redis broker; acks early, the
                    default; prefetch multiplier 4, the default); producer: apply_async
                    on one producer connection
  dramatiq          dramatiq --processes 1 --threads 8 (its default threads; Redis
                    broker); producer: actor.send in a loop
  rq                rq worker --burst --worker-class rq.worker.SimpleWorker (no fork);
                    producer: Queue.enqueue_many (one pipeline)
  rq-fork           rq worker --burst (a fork per job: N / 20 jobs; the counter lives
                    in each fork, so this row is timed from the worker's start to its
                    exit once the queue is empty, start-up included)

arq is left out: its releases need redis-py < 6, the project's is 8.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's disquette

import redis  # noqa: E402
from common import load_average, start_disquette, start_redis  # noqa: E402
from rq import Queue  # noqa: E402  (the bench extra)

from disquette import Client  # noqa: E402

COUNTER = '''
import itertools, os, time
_N = int(os.environ["BENCH_N"])
_OUT = os.environ["BENCH_OUT"]
_calls = itertools.count(1)
_first = [0.0]

def count():
    n = next(_calls)
    if n == 1:
        _first[0] = time.perf_counter()
    elif n == _N:
        with open(_OUT, "w") as f:
            f.write(repr(time.perf_counter() - _first[0]))
'''

MODULES = {
    "t_disquette": COUNTER + '''
import disquette

async def noop(job):
    count()

def noop_def(job):
    count()

app = disquette.App(disquette.Client(os.environ.get("BENCH_NODES", "127.0.0.1:7711")))

@app.job("q")
async def task():
    count()
''',
    "t_celery": COUNTER + '''
from celery import Celery

app = Celery("t_celery", broker=os.environ["BENCH_REDIS"])
app.conf.worker_hijack_root_logger = False

@app.task(name="noop")
def noop():
    count()
''',
    "t_dramatiq": COUNTER + '''
import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS"]))

@dramatiq.actor(max_retries=0)
def noop():
    count()
''',
    "t_rq": COUNTER + '''
def noop():
    count()
''',
}


def exe(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def produce_disquette(addr: str, n: int, app: bool = False) -> None:
    c = Client(addr)
    body = b"[]" if app else b"x"
    c.add_jobs([("q", body)] * n, timeout_ms=0)
    c.close()


def tasks(name: str) -> object:
    """A tasks module of the run's directory (written by main)."""
    return importlib.import_module(name)


def produce_celery(url: str, n: int) -> None:
    t_celery: Any = tasks("t_celery")
    with t_celery.app.producer_or_acquire() as producer:
        for _ in range(n):
            t_celery.noop.apply_async(producer=producer)


def produce_dramatiq(url: str, n: int) -> None:
    t_dramatiq: Any = tasks("t_dramatiq")
    for _ in range(n):
        t_dramatiq.noop.send()


def produce_rq(url: str, n: int) -> None:
    t_rq: Any = tasks("t_rq")
    q = Queue(connection=redis.Redis.from_url(url))
    for start in range(0, n, 1000):
        q.enqueue_many([Queue.prepare_data(t_rq.noop) for _ in range(min(1000, n - start))])


def rows(disquette_addr: str, redis_url: str) -> dict[str, tuple]:
    """name: (producer, worker argv, share of N, broker)."""
    dq = [exe("disquette"), "worker", "--nodes", disquette_addr, "--log-level", "WARNING"]
    return {
        "disquette-async": (lambda n: produce_disquette(disquette_addr, n),
                            [*dq, "t_disquette:noop", "--queue", "q"], 1, "disquette"),
        "disquette-nometrics": (lambda n: produce_disquette(disquette_addr, n),
                                [*dq, "t_disquette:noop", "--queue", "q", "--no-metrics"], 1,
                                "disquette"),
        "disquette-app": (lambda n: produce_disquette(disquette_addr, n, app=True),
                          [*dq, "t_disquette:app"], 1, "disquette"),
        "disquette-def": (lambda n: produce_disquette(disquette_addr, n),
                          [*dq, "t_disquette:noop_def", "--queue", "q"], 1, "disquette"),
        "celery": (lambda n: produce_celery(redis_url, n),
                   [exe("celery"), "-A", "t_celery", "worker", "--pool", "solo",
                    "--concurrency", "1", "--without-gossip", "--without-mingle",
                    "--without-heartbeat", "--loglevel", "WARNING"], 1, "redis"),
        "dramatiq": (lambda n: produce_dramatiq(redis_url, n),
                     [exe("dramatiq"), "t_dramatiq", "--processes", "1", "--threads", "8"], 1,
                     "redis"),
        "rq": (lambda n: produce_rq(redis_url, n),
               [exe("rq"), "worker", "--url", redis_url, "--burst", "--worker-class",
                "rq.worker.SimpleWorker"], 1, "redis"),
        "rq-fork": (lambda n: produce_rq(redis_url, n),
                    [exe("rq"), "worker", "--url", redis_url, "--burst"], -20, "redis"),
    }


def run_row(name: str, spec: tuple, n_full: int, workdir: Path, env: dict,
            flush: dict, timeout: float) -> float | None:
    produce, argv, share, broker = spec
    n = max(100, n_full // abs(share))
    whole = share < 0  # timed from start to exit (a --burst worker)
    flush[broker]()
    out = workdir / f"{name}.out"
    out.unlink(missing_ok=True)
    produce(n)
    log = open(workdir / f"{name}.log", "w")
    proc = subprocess.Popen(argv, cwd=workdir, env={**env, "BENCH_N": str(n),
                                                    "BENCH_OUT": str(out)},
                            stdout=log, stderr=subprocess.STDOUT)
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    if whole:
        status = proc.wait(timeout)
        log.close()
        rate = n / (time.perf_counter() - started)
        print(f"  {name}: {n:,} jobs, {rate:,.0f}/s (exit {status})", file=sys.stderr)
        return rate
    try:
        while not out.exists() or not out.read_text():
            if time.monotonic() > deadline or proc.poll() not in (None, 0):
                print(f"  {name}: no result (see {workdir / (name + '.log')})",
                      file=sys.stderr)
                return None
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
    rate = (n - 1) / float(out.read_text())
    print(f"  {name}: {n:,} jobs, {rate:,.0f}/s", file=sys.stderr, flush=True)
    return rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--only", default="", help="comma-separated row names")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per row at most")
    args = ap.parse_args(argv)
    print(f"load average {load_average()}, {time.strftime('%Y-%m-%d')}", flush=True)
    node, redis_server = start_disquette(), start_redis()
    addr = f"127.0.0.1:{node.port}"
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    flush = {"disquette": lambda: redis.Redis(port=node.port).execute_command(
                 "DEBUG", "FLUSHALL"),
             "redis": lambda: redis.Redis(port=redis_server.port).flushall()}
    table = rows(addr, url)
    names = [x for x in args.only.split(",") if x] or list(table)
    with tempfile.TemporaryDirectory(prefix="bench-libs-") as tmp:
        workdir = Path(tmp)
        for module, text in MODULES.items():
            (workdir / f"{module}.py").write_text(text)
        sys.path.insert(0, tmp)
        env = {**os.environ, "BENCH_REDIS": url, "BENCH_NODES": addr,
               "PYTHONPATH": tmp + os.pathsep + os.environ.get("PYTHONPATH", "")}
        os.environ.update(BENCH_REDIS=url, BENCH_NODES=addr, BENCH_N="0", BENCH_OUT="")
        results = {name: run_row(name, table[name], args.jobs, workdir, env, flush,
                                 args.timeout) for name in names}
    node.stop()
    redis_server.stop()
    print(f"load average at the end {load_average()}")
    print("| worker | jobs/s |\n| --- | ---: |")
    for name, rate in results.items():
        print(f"| {name} | {'-' if rate is None else f'{rate:,.0f}'} |")
    ratios = [("disquette-async", "disquette-nometrics", 0.9, "metrics on vs off"),
              ("disquette-app", "disquette-async", 0.9, "App vs plain handler")]
    for a, b, goal, what in ratios:
        if results.get(a) and results.get(b):
            r = results[a] / results[b]
            print(f"{what}: {r:.2f}x (>= {goal}x: {'PASS' if r >= goal else 'MISS'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
