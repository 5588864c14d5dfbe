#!/usr/bin/env python3
"""CPU per ADDJOB and per GETJOB NOHANG in process, the compiled core (mypyc,
built by `make venv`) against the pure-Python modules (DISQUETTE_NO_EXTENSIONS=1):
Node.handle_command + RESP encoding on a Node without a cluster, argv as the
reader returns it; and ADDJOB through the client connection as the process
runs it (a node composed with its cluster layer, 16 pipelined requests per
data_received, a transport that keeps nothing): the -P 16 row without the
syscalls. Each round runs both builds, one process each, in an order that
alternates between rounds; each process prints its best of REPS.

    .venv/bin/python bench/bench_core_inproc.py [--rounds 3] [-n 100000] [--reps 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from broker.commands import COMMANDS
from broker.commands.server import COMPILED_CORE
from broker.config import Config
from broker.node import Node
from protocol.resp import get_encoder
from server.compose import compose_node
from server.process import ProcessRandom
from server.resp import ClientConnection

ROOT = Path(__file__).resolve().parents[1]
BODY = b"x" * 100


def one_rep(n: int) -> tuple[float, float]:
    now = 1_700_000_000_000
    node = Node(Config(), lambda: now, ProcessRandom(1), perf_ns=time.perf_counter_ns,
                commands=COMMANDS)
    client = node.new_client("bench")
    enc = get_encoder(2)
    handle = node.handle_command
    add = [b"ADDJOB", b"q", BODY, b"0"]
    get = [b"GETJOB", b"NOHANG", b"FROM", b"q"]
    cpu = time.process_time_ns      # CPU time: the machine is shared
    t0 = cpu()
    for _ in range(n):
        out = enc(handle(client, add))
    t1 = cpu()
    assert out.startswith(b"+D-"), out
    for _ in range(n):
        out = enc(handle(client, get))
    t2 = cpu()
    assert out.startswith(b"*1\r\n*3\r\n$1\r\nq\r\n"), out
    assert node.job_count == n
    return (t1 - t0) / n, (t2 - t1) / n


class _Transport:
    """What ClientConnection asks of a transport; the replies are dropped."""

    def get_extra_info(self, name: str):
        return None if name == "socket" else ("127.0.0.1", 40000)

    def set_write_buffer_limits(self, **limits) -> None:
        pass

    def write(self, data: bytes) -> None:
        pass


def conn_rep(n: int) -> float:
    """CPU ns per ADDJOB, 16 per read, through server/resp.py's ClientConnection."""
    now = 1_700_000_000_000
    node, _cluster, driver = compose_node(Config(), clock=lambda: now, rng=ProcessRandom(1),
                                          perf_ns=time.perf_counter_ns)
    shell = SimpleNamespace(node=node, driver=driver, loop=None)
    conn = ClientConnection(shell)
    conn.connection_made(_Transport())
    read = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$%d\r\n%b\r\n$1\r\n0\r\n" % (len(BODY), BODY) * 16
    reads = n // 16
    cpu = time.process_time_ns
    t0 = cpu()
    for _ in range(reads):
        conn.data_received(read)
    t1 = cpu()
    assert node.job_count == reads * 16
    return (t1 - t0) / (reads * 16)


def measure(n: int, reps: int) -> dict:
    gc.disable()        # the cyclic GC is rare in a steady server; the same for both builds
    best_add = best_get = best_conn = float("inf")
    for _ in range(reps):
        add, get = one_rep(n)
        best_add, best_get = min(best_add, add), min(best_get, get)
        gc.collect()
        best_conn = min(best_conn, conn_rep(n))
        gc.collect()
    return {"compiled_core": COMPILED_CORE, "addjob_ns": best_add, "getjob_ns": best_get,
            "conn_addjob_ns": best_conn}


def run_build(pure: bool, n: int, reps: int) -> dict:
    env = dict(os.environ)
    env.pop("DISQUETTE_NO_EXTENSIONS", None)
    if pure:
        env["DISQUETTE_NO_EXTENSIONS"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", "-n", str(n), "--reps", str(reps)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.n, args.reps)))
        return
    results: dict[str, list[dict]] = {"pure": [], "compiled": []}
    for r in range(args.rounds):
        order = ["pure", "compiled"] if r % 2 == 0 else ["compiled", "pure"]
        for build in order:
            res = run_build(build == "pure", args.n, args.reps)
            results[build].append(res)
            print(f"round {r + 1} {build:8} compiled_core={res['compiled_core']} "
                  f"ADDJOB {res['addjob_ns']:.0f} ns  GETJOB NOHANG {res['getjob_ns']:.0f} ns  "
                  f"ADDJOB -P16 via the connection {res['conn_addjob_ns']:.0f} ns")
    if results["compiled"][0]["compiled_core"] != "yes":
        sys.exit("no compiled core here: build it first (make venv)")
    for key, name in (("addjob_ns", "ADDJOB"), ("getjob_ns", "GETJOB NOHANG"),
                      ("conn_addjob_ns", "ADDJOB -P16 conn")):
        pure = min(r[key] for r in results["pure"])
        compiled = min(r[key] for r in results["compiled"])
        print(f"{name:14} pure {pure:.0f} ns, compiled {compiled:.0f} ns: "
              f"{pure / compiled:.2f}x less CPU")


if __name__ == "__main__":
    main()
