"""The longest ACKJOB with a million live jobs: no command pays for the timers.

In process (server/sim/inprocess.py: the real Node and command table, no socket, so
what is measured is the core alone): load N jobs (default 1,000,000) with
RETRY, deliver and ACK most of them one command at a time while the timers run
as in the process (a tick every 10 ms of virtual time: stale timer entries are
compacted there, a bounded slice per tick). RETRY 300: no requeue falls in the
measured window. The jobs are frozen out of the cyclic GC first, as after an
AOF load, so a full collection's pause is not counted as the ACK's. Prints the worst and p99.9 ACKJOB
latencies, the worst tick, and, side by side in the same run, what one
whole-wheel rebuild costs at this size (what an ACK paid before: issue 18).

    .venv/bin/python bench/bench_ack_latency.py [--jobs N] [--acks M]

Target: the longest ACK under 5 ms with 1M live jobs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker import lifecycle  # noqa: E402
from broker.timers import TimerWheel  # noqa: E402
from server.sim.inprocess import InProcessNode  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--acks", type=int, default=700_000,
                   help="ACKJOBs (enough to make stale timer entries outnumber live ones)")
    args = p.parse_args(argv)
    gc.freeze()
    gc.set_threshold(20_000, 10, 20)     # as the process (server/boot.py tune_gc)
    n = InProcessNode(strict=False)
    node = n.node
    client = n.new_client()
    run = node.handle_command
    print(f"loading {args.jobs:,} jobs...", flush=True)
    t0 = time.perf_counter()
    for i in range(args.jobs):
        run(client, [b"ADDJOB", b"q%d" % (i % 16), b"body", b"0", b"RETRY", b"300"])
        if i % 1000 == 0:
            n.clock.now += 1
    print(f"  {time.perf_counter() - t0:.1f} s; delivering...", flush=True)
    ids = []
    for i in range(16):
        reply = run(client, [b"GETJOB", b"COUNT", b"%d" % args.jobs, b"FROM", b"q%d" % i])
        ids += [r[1] for r in reply]
    ids = ids[:args.acks]
    # As after an AOF load (server/aof.py): the long-lived jobs leave the cyclic
    # GC's generations, so what is measured is the core, not a full collection.
    gc.collect()
    gc.freeze()
    lat = []
    ticks = []
    perf = time.perf_counter
    print(f"acking {len(ids):,} jobs, a tick every 100 acks...", flush=True)
    for k, jid in enumerate(ids):
        t = perf()
        run(client, [b"ACKJOB", jid])
        lat.append(perf() - t)
        if k % 100 == 0:
            n.clock.now += 10
            t = perf()
            node.tick()
            ticks.append(perf() - t)
    live = node.job_count
    # Side by side: one whole-wheel rebuild at this size (the old cost of an ACK).
    t = perf()
    wheel = TimerWheel()
    for job in node.iter_jobs():
        wheel.add(job, lifecycle.wake_time(job))
    for job in node.iter_jobs():
        job.timer = None
    wheel.clear()
    for job in node.iter_jobs():
        lifecycle.schedule(node, job)
    rebuild = perf() - t
    lat.sort()
    worst, p999 = lat[-1], lat[int(len(lat) * 0.999)]
    print(f"live jobs after: {live:,}; timer entries {node.timers.entries:,} "
          f"(stale {node.timers.stale:,})")
    print(f"ACKJOB worst {worst * 1000:.3f} ms, p99.9 {p999 * 1000:.3f} ms, "
          f"median {lat[len(lat) // 2] * 1e6:.1f} us; worst tick {max(ticks) * 1000:.2f} ms")
    print(f"one whole-wheel rebuild of {args.jobs - len(ids) + len(ids):,} jobs' wheel: "
          f"{rebuild * 1000:.0f} ms = {rebuild / worst:.0f}x the worst ACK")
    print("target: worst ACK < 5 ms:", "met" if worst < 0.005 else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
