#!/usr/bin/env python3
"""HTTP API benchmark (issue 12): adding jobs over HTTP against RESP ADDJOB on
the same node. A script, not a test.

    .venv/bin/python bench/bench_http.py            # 3 rounds
    .venv/bin/python bench/bench_http.py --quick    # one short round

One node with ``http-port``; wrk (Debian's) drives the HTTP port with 50
connections, redis-benchmark the RESP port with 50 clients; 100-byte bodies.
Rows, medians of the rounds (the order of the sides alternates):

1. ``single``: ``POST /queues/q/jobs`` with one job per request (JSON) vs
   ``ADDJOB q <body> 0``. Target: HTTP >= 0.5x RESP (jobs/s).
2. ``batch``: ``POST`` of a JSON array of 100 jobs vs the same RESP figure.
   Target: HTTP >= 2x RESP (jobs/s).
3. ``resp-under-http``: RESP ADDJOB throughput while the HTTP port serves a
   steady background load (``--http-rate`` requests/s, default 1,000, of
   single-job POSTs and dashboard polls), against the same node without it.
   Target: >= 0.8x. Also shown: the same with wrk saturating the HTTP port
   (the node is one event loop: both sides then share its core).
4. ``hook``: what the per-command latency histogram costs the command path,
   measured in process (ns per command, against one ADDJOB's cost).
5. ``ceiling``: the ``single`` row against ``bench/http_ceiling_server.py``, an
   aiohttp server on the same loop that reads the JSON and answers a constant
   id: what one POST per job can reach here at all, with no job added.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    HOST, REPO_ROOT, body, free_port, median, parse_bench_args, redis_benchmark,
    start_disquette,
)

sys.path.insert(0, str(REPO_ROOT))      # the checkout's packages, not an installed copy
from server.sim.inprocess import InProcessNode  # noqa: E402

BODY = body(100)
ROWS = ["single", "batch", "resp-under-http", "hook", "ceiling"]
WRK_CONNECTIONS = 50


def wrk_post(port: int, path: str, payload: bytes, seconds: float) -> float:
    """wrk POSTing ``payload`` (JSON) for ``seconds``: requests per second."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = {json.dumps(payload.decode())}\n"
                "done = function(summary, latency, requests)\n"
                "  io.write(string.format('ERRORS %d %d\\n', summary.errors.status,"
                " summary.errors.connect + summary.errors.read + summary.errors.write"
                " + summary.errors.timeout))\nend\n")
        script = f.name
    try:
        out = subprocess.run(
            ["wrk", "-t", "1", "-c", str(WRK_CONNECTIONS), "-d", f"{seconds:g}s", "-s", script,
             f"http://{HOST}:{port}{path}"], capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(script)
    rps = None
    for line in out.stdout.splitlines():
        if line.startswith("Requests/sec:"):
            rps = float(line.split()[1])
        if line.startswith("ERRORS"):
            status_errors, socket_errors = map(int, line.split()[1:])
            if status_errors:
                raise RuntimeError(f"wrk: {status_errors} non-2xx answers")
    if rps is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    return rps


def resp_addjob(port: int, n: int, queue: str = "r") -> float:
    return redis_benchmark(port, ["ADDJOB", queue, BODY, "0"], n)


class SteadyHttpLoad:
    """A background HTTP load at about ``rate`` requests/s: single-job POSTs,
    with a dashboard's polls (GET /queues, GET /cluster) among them."""

    def __init__(self, port: int, rate: int) -> None:
        self.port = port
        self.rate = rate
        self.stop = threading.Event()
        self.done = 0
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(4)]

    def run(self, i: int) -> None:
        per_thread = self.rate / len(self.threads)
        data = json.dumps({"body": BODY}).encode()
        next_at = time.monotonic()
        k = 0
        # One keep-alive connection per thread, as a browser or an HTTP client
        # library keeps: a connection per request would mostly measure connects.
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        while not self.stop.is_set():
            k += 1
            if k % 50 == 0:
                conn.request("GET", "/queues" if k % 100 else "/cluster")
            else:
                conn.request("POST", "/queues/bg/jobs", body=data,
                             headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status >= 300:
                raise RuntimeError(f"background load: HTTP {r.status}")
            self.done += 1
            next_at += 1 / per_thread
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def __enter__(self) -> "SteadyHttpLoad":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def hook_cost() -> tuple[float, float]:
    """(ns the latency histogram adds per command, ns of one in-process ADDJOB)."""
    st = [0, 0] + [0] * 64
    n = 2_000_000
    t_hook = timeit.timeit("st[ns.bit_length() + 2] += 1", globals={"st": st, "ns": 9_000},
                           number=n) / n * 1e9
    t_empty = timeit.timeit("pass", number=n) / n * 1e9
    node = InProcessNode()
    client = node.node.new_client()
    client.conn = None
    argv = [b"ADDJOB", b"q", BODY.encode(), b"0"]
    handle = node.node.handle_command
    m = 200_000
    start = time.perf_counter_ns()
    for _ in range(m):
        handle(client, argv)
    per_addjob = (time.perf_counter_ns() - start) / m
    return t_hook - t_empty, per_addjob


class HttpCeiling:
    """bench/http_ceiling_server.py on a free port, stopped on exit."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                          "http_ceiling_server.py"), str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                req = urllib.request.Request(f"http://{HOST}:{self.port}/queues/q/jobs",
                                             data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=1) as r:
                    if r.status == 201:
                        return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("http_ceiling_server.py did not start")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def main(argv=None) -> int:
    args = parse_bench_args(argv, __doc__.splitlines()[0], ROWS)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = (3 if args.quick else 8) * args.scale
    n_resp = int((60_000 if args.quick else 200_000) * args.scale)
    wanted = set(args.names or ROWS)
    http_port = free_port()
    node = start_disquette("--http-port", str(http_port))
    plain = start_disquette()        # the same node without an HTTP port
    one = json.dumps({"body": BODY}).encode()
    batch = json.dumps([{"body": BODY}] * 100).encode()
    res = {k: [] for k in ("resp", "single", "batch", "plain", "steady", "steady_rate",
                           "saturated", "ceiling")}
    ceiling = HttpCeiling() if "ceiling" in wanted else None
    for r in range(rounds):
        flush = lambda: node.call("DEBUG", "FLUSHALL")  # noqa: E731
        order = [0, 1] if r % 2 == 0 else [1, 0]
        for side in order:
            flush()
            if side == 0:
                res["resp"].append(resp_addjob(node.port, n_resp))
            else:
                if "single" in wanted:
                    res["single"].append(wrk_post(http_port, "/queues/h/jobs", one, seconds))
                    flush()
                if "batch" in wanted:
                    res["batch"].append(100 * wrk_post(http_port, "/queues/h/jobs", batch,
                                                       seconds))
                if ceiling is not None:
                    res["ceiling"].append(wrk_post(ceiling.port, "/queues/h/jobs", one,
                                                   seconds))
        if "resp-under-http" in wanted:
            flush()
            res["plain"].append(resp_addjob(plain.port, n_resp))
            plain.call("DEBUG", "FLUSHALL")
            with SteadyHttpLoad(http_port, 1000) as load:
                time.sleep(0.5)
                t0, d0 = time.monotonic(), load.done
                res["steady"].append(resp_addjob(node.port, n_resp))
                res["steady_rate"].append((load.done - d0) / (time.monotonic() - t0))
            flush()
            out = {}
            t = threading.Thread(target=lambda: out.setdefault(
                "rps", wrk_post(http_port, "/queues/h/jobs", one, seconds + 2)))
            t.start()
            time.sleep(1)
            res["saturated"].append(resp_addjob(node.port, n_resp // 2))
            t.join()
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in res.items() if v),
              flush=True)

    print()
    print(f"Python {platform.python_version()}, wrk -t1 -c{WRK_CONNECTIONS} {seconds:g} s, "
          f"redis-benchmark -c 50, 100-byte bodies, {rounds} round(s), medians; "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| row | HTTP | RESP ADDJOB | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    resp = median(res["resp"])

    def row(name, value, ref, target):
        ratio = value / ref
        ok = "PASS" if ratio >= target else "MISS"
        print(f"| {name} | {value:,.0f} jobs/s | {ref:,.0f} jobs/s | {ratio:.2f}x | "
              f">= {target}x: {ok} |")
    if res["single"]:
        row("POST one job per request", median(res["single"]), resp, 0.5)
    if res["batch"]:
        row("POST 100 jobs per request", median(res["batch"]), resp, 2)
    if res["ceiling"]:
        c = median(res["ceiling"])
        print(f"| ceiling: bare aiohttp POST, no job added (http_ceiling_server.py) | "
              f"{c:,.0f} requests/s | {resp:,.0f} jobs/s | {c / resp:.2f}x | (info) |")
        ceiling.stop()
    if res["steady"]:
        print()
        print("| RESP ADDJOB | jobs/s | vs the node without HTTP | target |")
        print("| --- | ---: | ---: | --- |")
        plain_rps = median(res["plain"])
        print(f"| node without an HTTP port | {plain_rps:,.0f} | 1.00x | |")
        steady = median(res["steady"])
        ratio = steady / plain_rps
        print(f"| HTTP port serving {median(res['steady_rate']):,.0f} requests/s "
              f"(POSTs and dashboard polls) | {steady:,.0f} | {ratio:.2f}x | >= 0.8x: "
              f"{'PASS' if ratio >= 0.8 else 'MISS'} |")
        sat = median(res["saturated"])
        print(f"| HTTP port saturated by wrk -c 50 | {sat:,.0f} | {sat / plain_rps:.2f}x | "
              f"(shares the node's core) |")
    if "hook" in wanted:
        hook, addjob = hook_cost()
        print()
        print(f"Latency histogram in the command path: {hook:.0f} ns per command, "
              f"{100 * hook / addjob:.2f}% of an in-process ADDJOB ({addjob / 1000:.1f} us)")
    node.stop()
    plain.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
