"""The compiled core (mypyc, setup.py) and the pure-Python modules it is built
from behave the same: one process per build (DISQUETTE_NO_EXTENSIONS selects
the .py modules) runs the same seeded work and prints digests of what a user
or a disk would see, which must be equal:
- a seeded stream of client commands through an in-process node: every reply
  as RESP bytes (RESP2 and RESP3) and the AOF it wrote;
- the simulator's replay digests (server/sim/): a few membership chaos runs
  and the first SIM_SEEDS_COMPARED seeds of the delivery sweep
  (tests/sim/test_delivery_sim.py), whole brokers under faults.

Run as a module (``python -m tests.unit.test_builds_agree PART``), this file
prints the digests of one part and the build that ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from broker.commands.server import COMPILED_CORE
from broker.config import Config
from server.sim.disk import SimDisk
from server.sim.inprocess import InProcessNode
from tests.sim.test_membership_sim import run_chaos
from server.sim.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
COMMANDS_RUN = 4000
SIM_SEEDS = (3, 8)          # membership chaos runs (tests/sim/test_membership_sim.py)
SIM_SEEDS_COMPARED = 1000   # delivery-sweep seeds (server/sim/workload.py) run on both builds
SIM_PARTS = 4               # run as this many tests, so that xdist spreads them


def _command(rng: random.Random, ids: list[bytes]) -> list:
    """One client command, drawn from the stream's generator: mostly the job
    commands, with their options, on a few queues and on ids seen before (or
    made up)."""
    q = rng.choice((b"q1", b"q2", b"q3"))
    some = [rng.choice(ids) if ids and rng.random() < 0.9 else b"D-bad-id"
            for _ in range(rng.randint(1, 3))]
    kind = rng.randrange(16)
    if kind < 5:
        argv = [b"ADDJOB", q, b"body-%d" % rng.randrange(10**6), rng.choice((0, 0, 50, 5000))]
        for opt, values in ((b"DELAY", (1, 3)), (b"RETRY", (0, 1, 5)), (b"TTL", (2, 30, 600)),
                            (b"MAXLEN", (3, 100)), (b"REPLICATE", (1,)), (b"ASYNC", None),
                            (b"HOLD", None)):
            if rng.random() < 0.2:
                argv += [opt] if values is None else [opt, rng.choice(values)]
        return argv
    if kind < 8:
        argv = [b"GETJOB", b"NOHANG"]
        if rng.random() < 0.3:
            argv += [b"COUNT", rng.randint(1, 4)]
        if rng.random() < 0.3:
            argv += [b"WITHCOUNTERS"]
        return argv + [b"FROM", q] + ([b"q2"] if rng.random() < 0.3 else [])
    return rng.choice((
        [b"ACKJOB", *some], [b"FASTACK", *some], [b"NACK", *some], [b"ENQUEUE", *some],
        [b"DEQUEUE", *some], [b"DELJOB", *some], [b"WORKING", some[0]], [b"SHOW", some[0]],
        [b"QLEN", q], [b"QPEEK", q, rng.choice((1, -2, 5))], [b"QSTAT", q],
        [b"JSCAN", b"COUNT", 50, b"REPLY", b"all"], [b"QSCAN", b"COUNT", 10],
        [b"PAUSE", q, rng.choice((b"in", b"out", b"none", b"state"))],
        [b"ADDJOB"], [b"GETJOB", b"FROM"],
    ))


def command_stream_digest(seed: int = 24) -> str:
    """Replies and AOF of a seeded command stream through an in-process node."""
    rng = random.Random(seed)
    disk = SimDisk()
    node = InProcessNode(Config(appendonly=True), rng=random.Random(seed), disk=disk)
    clients = {proto: node.new_client() for proto in (2, 3)}
    clients[3].proto = 3
    ids: list[bytes] = []
    h = hashlib.sha256()
    for _ in range(COMMANDS_RUN):
        argv = [a if isinstance(a, bytes) else str(a).encode()
                for a in _command(rng, ids)]
        proto = rng.choice((2, 3))
        reply = node.resp(*argv, client=clients[proto], proto=proto)
        h.update(reply)
        if argv[0] == b"ADDJOB" and reply[:3] == b"+D-":
            ids.append(reply[1:-2])
        if rng.random() < 0.1:
            node.advance(rng.choice((10, 500, 3000)))
    node.advance(60_000)
    h.update(b"AOF" + disk.image())
    return h.hexdigest()


def sim_digests(part: int) -> list[str]:
    """One part of the seeds: its share of the sweep's seeds (one digest each),
    and in part 0 the membership chaos runs."""
    out = [run_chaos(seed).digest() for seed in SIM_SEEDS] if part == 0 else []
    for seed in range(part, SIM_SEEDS_COMPARED, SIM_PARTS):
        w = Workload(seed)
        w.run()
        out.append(w.sim.digest())
    return out


def _run_build(pure: bool, part: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("DISQUETTE_NO_EXTENSIONS", None)
    if pure:
        env["DISQUETTE_NO_EXTENSIONS"] = "1"
    out = subprocess.run([sys.executable, "-m", "tests.unit.test_builds_agree", part],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _builds_agree(part: str) -> None:
    pure, compiled = _run_build(True, part), _run_build(False, part)
    assert pure.pop("compiled_core") == "no"
    if compiled.pop("compiled_core") != "yes":
        pytest.skip("no compiled core in this checkout (built with DISQUETTE_NO_EXTENSIONS=1)")
    assert compiled == pure


@pytest.mark.timeout(1200)
def test_a_command_stream_gives_the_same_replies_and_aof_on_both_builds():
    _builds_agree("commands")


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("part", range(SIM_PARTS))
def test_simulated_clusters_replay_identically_on_both_builds(part):
    _builds_agree(f"sim{part}")


def main(part: str) -> None:
    if part == "commands":
        digests: object = command_stream_digest()
    else:
        digests = sim_digests(int(part.removeprefix("sim")))
    print(json.dumps({"compiled_core": COMPILED_CORE, part: digests}))


if __name__ == "__main__":
    main(sys.argv[1])
