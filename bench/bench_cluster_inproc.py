#!/usr/bin/env python3
"""CPU per replicated ADDJOB in process (issue 24's cluster rows): three whole
nodes (server/sim/inprocess.py) joined by a bus that carries real frames
(protocol/bus.py encode_frame -> FrameReader) instead of sockets, so the cost
measured is the per-job path of the cluster without the kernel and the event
loop: the client's ADDJOB REPLICATE 3, the REPLJOB frames, their decode and
handling on the two replicas, the GOTJOB frames back and the reply.

Each "turn" is what an event-loop turn is in the process: the entry node runs
PIPELINE commands, its driver flushes (one frame per peer), each replica reads
its frame and flushes its GOTJOBs, the entry node reads them. CPU time is
counted per node (process_time around that node's work), so the entry node's
and a replica's cost per job are printed separately.

    .venv/bin/python bench/bench_cluster_inproc.py [-n 20000] [--reps 3]
    DISQUETTE_NO_EXTENSIONS=1 ... (the pure build)

Instructions per job, one role at a time (callgrind counts only inside the C
function named by --toggle-collect; with --count ROLE that role's work, and
only it, runs inside contextvars' Context.run, whose C function is
context_run; divide the total by the jobs, and by 2 for the replicas):

    valgrind --tool=callgrind --toggle-collect=context_run \
        .venv/bin/python bench/bench_cluster_inproc.py -n 1600 --reps 1 \
        --only sync-c1 --count entry
"""

from __future__ import annotations

import argparse
import contextvars
import gc
import random
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.commands.server import COMPILED_CORE  # noqa: E402
from broker.config import Config  # noqa: E402
from broker.job import random_node_id  # noqa: E402
from cluster.membership import Membership  # noqa: E402
from cluster.outputs import Link  # noqa: E402
from protocol.bus import DEFAULT_MAX_FRAME_SIZE, FrameReader  # noqa: E402
from server.sim.clock import VirtualClock
from server.sim.inprocess import InProcessNode  # noqa: E402
from tests.unit.inprocess_cluster import know_each_other  # noqa: E402

NOW = 1_700_000_000_000
BODY = b"x" * 100
ROWS = {
    # name: (pipeline per turn, ASYNC)
    "sync-c1": (1, False),
    "sync-p16": (16, False),
    "async-p16": (16, True),
}


class FrameBus:
    """The shell's side of one node: frames queued per destination. It has
    what the output driver looks for on the process's bus (server/bus.py's
    ClusterBus: the frame size limit, cork and uncork), so that the driver
    takes the same path here."""

    max_frame_size = DEFAULT_MAX_FRAME_SIZE

    def __init__(self) -> None:
        self.out: dict[str, list[bytes]] = {}

    def send(self, node_id: str, ip: str, bus_port: int, frame: bytes) -> None:
        self.out.setdefault(node_id, []).append(frame)

    def drop_link(self, node_id: str, forget: bool) -> None:
        pass

    def cork(self) -> None:
        pass

    def uncork(self) -> None:
        pass


class Peer:
    def __init__(self, i: int, clock: VirtualClock) -> None:
        rng = random.Random(i)
        self.m = Membership(random_node_id(rng), "10.0.0.%d" % (i + 1), 7711, 17711,
                            rng=rng, now=NOW)
        self.bus = FrameBus()
        self.flush_due = False
        self.node = InProcessNode(Config(), clock=clock, rng=rng, membership=self.m,
                                  bus=self.bus, strict=True)
        self.node.driver.wake = self.wake
        self.readers: dict[str, FrameReader] = {}
        self.link = Link("10.0.0.%d" % (i + 1), "10.0.0.%d" % (i + 1))
        self.cpu = 0

    def wake(self) -> None:
        self.flush_due = True

    def end_turn(self) -> None:
        if self.flush_due:
            self.flush_due = False
            self.node.driver.flush()

    def read(self, sender: str, frames: list[bytes], now: int) -> None:
        reader = self.readers.setdefault(sender, FrameReader())
        driver = self.node.driver
        for f in frames:
            reader.feed(f)
        while (msg := reader.next_message()) is not None:
            driver.bus_message(self.link, msg, now)


def make_cluster(clock: VirtualClock) -> list[Peer]:
    peers = [Peer(i, clock) for i in range(3)]
    know_each_other([p.m for p in peers], NOW)
    return peers


def _direct(fn: Callable[[], None]) -> None:
    fn()


def run(row: str, n: int, count: str = "") -> tuple[float, float]:
    """(entry node's, a replica's mean) CPU us per job. ``count``: the role
    ("entry" or "replica") whose work runs inside Context.run, for callgrind."""
    pipeline, is_async = ROWS[row]
    context_run = contextvars.copy_context().run
    in_entry = context_run if count == "entry" else _direct
    in_replica = context_run if count == "replica" else _direct
    clock = VirtualClock(NOW)
    peers = make_cluster(clock)
    entry = peers[0]
    # One client per job of a turn (a sync ADDJOB blocks its client until its
    # copies are confirmed), as redis-benchmark's -c clients each send one.
    clients = [entry.node.new_client() for _ in range(pipeline)]
    argv = [b"ADDJOB", b"q", BODY, b"0", b"REPLICATE", b"3"] + ([b"ASYNC"] if is_async else [])
    cpu = time.process_time_ns
    node = entry.node
    replicas = peers[1:]

    def add_jobs() -> None:
        for client in clients:
            node.run(client, argv)
        entry.end_turn()

    def replica_turn(p: Peer, frames: list[bytes]) -> Callable[[], None]:
        def turn() -> None:
            p.read(entry.m.node_id, frames, clock.now)
            p.end_turn()
        return turn

    def read_replies() -> None:
        for p in replicas:
            back = p.bus.out
            p.bus.out = {}
            entry.read(p.m.node_id, back.get(entry.m.node_id, []), clock.now)
        entry.end_turn()

    for _ in range(n // pipeline):
        t0 = cpu()
        in_entry(add_jobs)
        t1 = cpu()
        entry.cpu += t1 - t0
        sent = entry.bus.out
        entry.bus.out = {}
        for p in replicas:
            turn = replica_turn(p, sent.get(p.m.node_id, []))
            t0 = cpu()
            in_replica(turn)
            t1 = cpu()
            p.cpu += t1 - t0
        t0 = cpu()
        in_entry(read_replies)
        entry.cpu += cpu() - t0
    jobs = n // pipeline * pipeline
    replies = [r for c in clients for r in c.conn.replies]
    assert len(replies) == jobs and all(str(r).startswith("D-") for r in replies), replies[-3:]
    assert all(p.node.node.job_count == jobs for p in peers)
    return entry.cpu / jobs / 1000, (peers[1].cpu + peers[2].cpu) / 2 / jobs / 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20_000, help="jobs per repetition")
    ap.add_argument("--reps", type=int, default=3, help="best of this many")
    ap.add_argument("--only", default=",".join(ROWS), help="rows, comma-separated")
    ap.add_argument("--count", choices=("entry", "replica"), default="",
                    help="run that role's work inside Context.run (callgrind, see above)")
    args = ap.parse_args()
    gc.disable()
    print(f"compiled_core: {COMPILED_CORE}")
    for row in args.only.split(","):
        best = min((run(row, args.n, args.count) for _ in range(args.reps)), key=sum)
        print(f"{row:10s} entry {best[0]:6.1f} us/job   replica {best[1]:6.1f} us/job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
