#!/usr/bin/env python3
"""Persistence benchmark (issue 5): what the append-only file costs and how fast
it loads. A script, not a test.

    .venv/bin/python bench/bench_aof.py              # full run (1M jobs for the load)
    .venv/bin/python bench/bench_aof.py --quick      # smaller, for a smoke run
    .venv/bin/python bench/bench_aof.py --jobs 2000000 --rounds 5
    .venv/bin/python bench/bench_aof.py --only throughput     # or --only load

1. ADDJOB throughput, ``appendfsync everysec`` vs the same node with AOF off:
   both nodes run at once, driven by ``redis-benchmark -c 50`` in rounds that
   alternate which goes first; medians. Without pipelining and with -P 16.
   Target: AOF >= 0.8x of AOF off.
2. Loading: N jobs are added over the network (redis-benchmark -c 50 -P 16, the
   fastest client path) to a node with the AOF on (automatic rewrite off, so the
   add is not slowed by it), which is then killed with SIGKILL and restarted. The
   load rate is N / the load time the node logs; the ratio compares it with the
   rate the same jobs were added at. Then BGREWRITEAOF, restart, and the load of
   the rewritten (compacted) file. Target: load >= 5x the add rate.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    REPO_ROOT, Server, body, call, call_int, free_port, median, redis_benchmark,
    start_disquette, temp_dir,
)

BODY = body(100)
_LOADED = re.compile(r"DB loaded from append only file: ([0-9.]+) seconds \((\d+) jobs\)")


def info_field(port: int, section: str, name: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(f"*2\r\n$4\r\nINFO\r\n${len(section)}\r\n{section}\r\n".encode())
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            head, _, rest = buf.partition(b"\r\n")
            if head.startswith(b"$") and len(rest) >= int(head[1:]):
                break
    for line in buf.decode().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1]
    raise KeyError(name)


def throughput(rounds: int, n: int, pipeline: int) -> tuple[float, float]:
    off = start_disquette()
    on = start_disquette("--appendonly", "yes", "--appendfsync", "everysec")
    cmd = ["ADDJOB", "q", BODY, "0"]
    res_off, res_on = [], []
    try:
        redis_benchmark(off.port, cmd, n // 5, pipeline=pipeline)     # warm up
        redis_benchmark(on.port, cmd, n // 5, pipeline=pipeline)
        for r in range(rounds):
            order = [(off, res_off), (on, res_on)]
            if r % 2:
                order.reverse()
            for srv, out in order:
                out.append(redis_benchmark(srv.port, cmd, n, pipeline=pipeline))
                srv.call("DEBUG", "FLUSHALL")
        size = int(info_field(on.port, "persistence", "aof_current_size"))
    finally:
        off.stop()
        on.stop()
    print(f"    rounds off: {', '.join(f'{x:,.0f}' for x in res_off)}")
    print(f"    rounds on : {', '.join(f'{x:,.0f}' for x in res_on)}  (AOF {size:,} bytes)")
    return median(res_off), median(res_on)


def wait_pong(port: int, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node exited with {proc.returncode}")
        try:
            if call(port, "PING", timeout=5) == b"+PONG":
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("node did not finish loading")


def restart_and_time(srv: Server, directives: list[str]) -> tuple[float, float, int]:
    """Start a node on srv's dir and port; returns (logged load seconds,
    seconds from spawn to PONG, jobs)."""
    log_path = os.path.join(srv.dir, "stdout.log")
    start_len = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    argv = [sys.executable, "-m", "server", "--port", str(srv.port), "--dir", srv.dir,
            *directives]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=srv.dir, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    srv.proc = proc
    srv._log = open(log_path, "ab")
    wait_pong(srv.port, proc)
    wall = time.monotonic() - t0
    with open(log_path, "rb") as f:
        f.seek(start_len)
        m = _LOADED.search(f.read().decode("utf-8", "replace"))
    if not m:
        raise RuntimeError("no load line in the log")
    return float(m.group(1)), wall, int(m.group(2))


def load_rate(jobs: int) -> None:
    directives = ["--appendonly", "yes", "--appendfsync", "everysec",
                  "--auto-aof-rewrite-percentage", "0"]
    # Add rate without AOF, for reference (the fastest a node takes jobs).
    plain = start_disquette()
    t0 = time.monotonic()
    redis_benchmark(plain.port, ["ADDJOB", "q", BODY, "0"], jobs, pipeline=16)
    plain_secs = time.monotonic() - t0
    plain_jobs = call_int(plain.port, "QLEN", "q")
    plain.stop()
    plain_rate = plain_jobs / plain_secs

    srv = start_disquette(*directives)
    t0 = time.monotonic()
    redis_benchmark(srv.port, ["ADDJOB", "q", BODY, "0"], jobs, pipeline=16)
    add_secs = time.monotonic() - t0
    added = call_int(srv.port, "QLEN", "q")
    size = int(info_field(srv.port, "persistence", "aof_current_size"))
    add_rate = added / add_secs
    print(f"  added over the network (redis-benchmark -c 50 -P 16):")
    print(f"    AOF off : {plain_jobs:,} jobs in {plain_secs:.2f} s = {plain_rate:,.0f} jobs/s")
    print(f"    AOF on  : {added:,} jobs in {add_secs:.2f} s = {add_rate:,.0f} jobs/s "
          f"(AOF {size / 1e6:.1f} MB)")
    base = max(plain_rate, add_rate)

    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    secs, wall, n = restart_and_time(srv, directives)
    rate = n / secs
    print(f"  load of the live log after kill -9: {n:,} jobs in {secs:.2f} s "
          f"= {rate:,.0f} jobs/s (spawn to PONG {wall:.2f} s)")
    print(f"    ratio load/add: {rate / base:.1f}x   (target >= 5x; "
          f"end to end incl. interpreter start: {n / wall / base:.1f}x)")

    srv.call("BGREWRITEAOF")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if (info_field(srv.port, "persistence", "aof_rewrite_in_progress") == "0"
                and info_field(srv.port, "persistence", "aof_last_rewrite_time_sec") != "-1"):
            break
        time.sleep(0.1)
    size = int(info_field(srv.port, "persistence", "aof_current_size"))
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    secs, wall, n = restart_and_time(srv, directives)
    rate = n / secs
    print(f"  load of the rewritten file ({size / 1e6:.1f} MB): {n:,} jobs in {secs:.2f} s "
          f"= {rate:,.0f} jobs/s; ratio {rate / base:.1f}x")
    srv.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--only", choices=("throughput", "load"), default=None)
    args = p.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    n = args.requests or (50_000 if args.quick else 200_000)
    jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    print(f"Disquette persistence bench on {platform.node()} ({os.cpu_count()} CPUs), "
          f"Python {platform.python_version()}")
    for pipeline in (1, 16) if args.only != "load" else ():
        print(f"ADDJOB throughput, redis-benchmark -c 50{' -P 16' if pipeline > 1 else ''}, "
              f"{n:,} requests x {rounds} rounds:")
        off, on = throughput(rounds, n, pipeline)
        print(f"  AOF off {off:,.0f} rps, appendfsync everysec {on:,.0f} rps: "
              f"ratio {on / off:.2f}x (target >= 0.8x)")
    if args.only != "throughput":
        print(f"AOF load of {jobs:,} jobs:")
        load_rate(jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
