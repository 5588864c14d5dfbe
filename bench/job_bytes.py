#!/usr/bin/env python3
"""Where a queued job's bytes go: the profile beside issue 24's "RSS per
queued job" row (bench/bench_single.py's rss and ceiling-rss).

    .venv/bin/python bench/job_bytes.py [-n 200000]
    DISQUETTE_NO_EXTENSIONS=1 .venv/bin/python bench/job_bytes.py   # the pure build

A whole node in this process (server/sim/inprocess.py, the build that is loaded)
takes n ADDJOBs with 100-byte bodies, each body a bytes object of its own as
read from a socket; then every structure that holds them is sized with
``sys.getsizeof``, objects of up to 512 bytes rounded up to pymalloc's 16-byte
size classes: the Job, its id and body, the registry's shards (dicts), the
queue's run (a list) and the timer wheel's chunks. The store of
ceiling_server.py --hold (id and body in a dict and a deque) is sized the same
way. The sums are to set beside the rss and ceiling-rss rows, which measure
the RSS of real processes (this process's own RSS mixes in what the run
freed: the replies, the other store).
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.commands.server import COMPILED_CORE  # noqa: E402
from server.sim.inprocess import InProcessNode  # noqa: E402

BODY = b"x" * 100


def allocated(obj: object) -> int:
    """What obj takes from the allocator: pymalloc's size class up to 512 bytes."""
    n = sys.getsizeof(obj)
    return (n + 15) // 16 * 16 if n <= 512 else n


def fresh_body(i: int) -> bytes:
    return BODY[:-8] + b"%08d" % (i % 10**8)


def node_parts(n: int) -> list[tuple[str, float]]:
    """[(part, bytes per job)] after n ADDJOBs."""
    box = InProcessNode()
    client = box.new_client()
    for i in range(n):
        box.run(client, [b"ADDJOB", b"q", fresh_body(i), b"0"])
    del client.conn.replies[:]
    node = box.node
    jobs = [j for shard in node.job_shards for j in shard.values()]
    assert len(jobs) == n, f"{len(jobs)} jobs registered, {n} added"
    chunks = [c for cs in node.timers.buckets.values() for c in cs]
    parts = [
        ("the Job object", sum(allocated(j) for j in jobs) / n),
        ("its id (bytes, the registry's key too)", sum(allocated(j.id) for j in jobs) / n),
        ("its body (bytes)", sum(allocated(j.body) for j in jobs) / n),
        ("the registry's shard dicts", sum(allocated(s) for s in node.job_shards) / n),
        ("the queue's run (a list)", allocated(node.queues[b"q"].jobs._run) / n),
        ("the timer wheel's chunks", (sum(allocated(c) + allocated(c.jobs) for c in chunks)
                                      + sum(allocated(cs) for cs in node.timers.buckets.values())
                                      + allocated(node.timers.buckets)) / n),
    ]
    return parts


def ceiling_parts(n: int) -> list[tuple[str, float]]:
    """The same for ceiling_server.py --hold's store."""
    jobs: dict[bytes, bytes] = {}
    queue: deque[bytes] = deque()
    for i in range(n):
        jid = b"D-%038x" % (i + 1)
        jobs[jid] = fresh_body(i)
        queue.append(jid)
    return [
        ("the id (bytes, the dict's key)", sum(allocated(k) for k in jobs) / n),
        ("the body (bytes)", sum(allocated(v) for v in jobs.values()) / n),
        ("the dict", allocated(jobs) / n),
        ("the deque", allocated(queue) / n),
    ]


def show(title: str, parts: list[tuple[str, float]]) -> None:
    print(title)
    width = max(len(p) for p, _ in parts)
    for part, b in parts:
        print(f"  {part:<{width}}  {b:6.1f} B")
    print(f"  {'sum':<{width}}  {sum(b for _, b in parts):6.1f} B")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200_000, help="jobs (default 200,000)")
    n = ap.parse_args().n
    print(f"compiled_core: {COMPILED_CORE}; {n:,} jobs, 100-byte bodies, one queue")
    show("our node", node_parts(n))
    show("ceiling_server.py --hold's store", ceiling_parts(n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
