"""Clock faults (issue 25), as an operator runs them: ``python -m chaos run`` of
clock-skew, clock-jump and clock-strobe, briefly and seeded, on 3 nodes under
libfaketime (chaos/clock.py). The verdict must be clean (nothing lost, no RETRY
0 job twice, no job or copy expired before its TTL by true time, no requeue
storm) and the faults must have bitten: each node's own clock (its TIME,
recorded after every step as ``node_lead``) shows what it made of its machine's
clock, as server/clock.py decides: skewed from the start, moved by a forward
jump, unmoved by a backward one, not racing ahead under a strobe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chaos.checker import check
from chaos.clock import FakeClock
from chaos.history import read_history
from tests.chaos.crafted import Run
from tests.chaos.short_run import run_chaos

pytestmark = pytest.mark.xdist_group("chaos-run")

SEED = 11
SECONDS = 8
SCENARIOS = ("clock-skew", "clock-jump", "clock-strobe")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("clock-runs")
    proc = run_chaos(out, *SCENARIOS, seconds=SECONDS, seed=SEED, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


READ_CLOCKS = """
import asyncio, sys, time
async def main():
    print(time.time(), time.monotonic(), asyncio.get_running_loop().time())
    sys.stdout.flush()
    sys.stdin.readline()                   # the test moves the clock meanwhile
    print(time.time(), time.monotonic(), asyncio.get_running_loop().time())
asyncio.run(main())
"""


def test_libfaketime_moves_the_wall_the_monotonic_and_the_event_loop_clocks(tmp_path):
    """What the scenarios rely on: a node under FakeClock sees a new offset at
    once, on every clock it reads (a faked monotonic clock is what makes a
    jump look like a stall to the node)."""
    clock = FakeClock(tmp_path / "faketime")
    proc = subprocess.Popen([sys.executable, "-c", READ_CLOCKS], env={**os.environ, **clock.env()},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    before = [float(x) for x in proc.stdout.readline().split()]
    clock.set(3600.0)
    after_out, _ = proc.communicate("\n", timeout=30)
    after = [float(x) for x in after_out.split()]
    for b, a in zip(before, after):
        assert 3600 <= a - b < 3600 + 10, (before, after)


def figures(out, name):
    return json.loads((out / f"{name}-seed{SEED}" / "report.json").read_text())["figures"]


def events(out, name, type_):
    return [e for e in read_history(out / f"{name}-seed{SEED}" / "history.jsonl").events
            if e["type"] == type_]


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_verdict_is_clean_and_ttls_were_probed(out, name):
    f = figures(out, name)
    assert f["valid"] is True, f["problems"]
    assert f["lost"] == 0 and f["retry0_redelivered"] == 0 and f["acknowledged"] > 50
    assert f["expired_early"] == 0 and f["copies_expired_early"] == 0
    assert f["requeue_storms"] == 0 and f["max_deliveries_per_job_s"] <= 4
    assert f["ttl_probes"] >= 8
    # Probes whose TTL ended during the run were seen held, then gone.
    assert any(e["phase"] == "held" for e in events(out, name, "probe"))


def test_skewed_nodes_keep_their_offsets_and_each_others_copies(out):
    (skew,) = [e for e in events(out, "clock-skew", "fault") if e["phase"] == "start"]
    offsets, leads = skew["detail"]["offsets_s"], skew["detail"]["node_leads_s"]
    assert min(offsets.values()) < 0 < max(offsets.values())
    for node, offset in offsets.items():
        assert leads[node] == pytest.approx(offset, abs=1.0), (node, leads)
    # A copy made on a node whose clock is ahead of its originator's lives out
    # its TTL (the expire time crossed the bus with the sender's clock):
    # probes added with REPLICATE >= 2 were seen with all their copies.
    probes = events(out, "clock-skew", "probe")
    adds = {e["id"]: e for e in probes if e["phase"] == "add"}
    first = {}
    for e in probes:
        if e["phase"] == "held":
            first.setdefault(e["id"], e["holders"])
    full = [jid for jid, add in adds.items()
            if add["replicate"] >= 2 and len(first.get(jid, ())) == add["replicate"]]
    assert full, first


def test_a_forward_jump_moves_the_node_clock_and_a_backward_one_does_not(out):
    steps = events(out, "clock-jump", "clock")
    assert steps, "no clock step was made"
    lead = {e["node"]: 0.0 for e in steps}
    seen = {"forward": 0, "back": 0}
    for e in steps:
        before = lead[e["node"]]
        assert e["node_lead"] is not None
        if e["step"] > 0:
            # counted (a node cannot tell it from a stall), less what a
            # backward step left owed
            assert before - 1 <= e["node_lead"] <= max(before, e["offset"]) + 1, e
            seen["forward"] += 1
        else:
            assert e["node_lead"] == pytest.approx(before, abs=1.0), e
            seen["back"] += 1
        lead[e["node"]] = e["node_lead"]
    assert seen["forward"] and seen["back"], seen


def test_a_strobing_clock_does_not_run_ahead(out):
    (strobe,) = [e for e in events(out, "clock-strobe", "fault") if e["phase"] == "start"]
    delta = abs(strobe["detail"]["delta_s"])
    steps = events(out, "clock-strobe", "clock")
    assert len(steps) >= 6, "the clock did not strobe"
    assert {e["node"] for e in steps} == {strobe["detail"]["node"]}
    # Each flip forward would add delta to a clock that followed them all.
    assert max(e["node_lead"] for e in steps if e["node_lead"] is not None) <= delta + 1.0


# -- the checker's clock invariants, on crafted histories -----------------------
def probe_run(tmp_path, *, held, gone_at=None, steps=()):
    """One probe (TTL 5 s, REPLICATE 2, added on n1 at 0), the holders seen at
    1 s, gone from every node at ``gone_at``; ``steps``: (t, node, step) clock
    steps. Returns the verdict."""
    run = Run(tmp_path / "history.jsonl")
    jid = "D-00000000-probe000000000000000000-0001"
    run.at(0.05).w.event("probe", phase="add", id=jid, node="n1", ttl=5, replicate=2,
                         retry=1, t_invoke=0.0)
    run.at(1.0).w.event("probe", phase="held", id=jid, holders=held)
    for t, node, step in steps:
        run.at(t).w.event("clock", node=node, offset=step, step=step, node_lead=step)
    if gone_at is not None:
        run.at(gone_at).w.event("probe", phase="gone", id=jid, t0=gone_at - 0.01)
    run.job(6.0)
    return check(read_history(run.finish(7.0)))


def test_a_probe_gone_before_its_ttl_fails_the_run(tmp_path):
    r = probe_run(tmp_path, held=["n1", "n2"], gone_at=3.0)
    assert not r.valid and r.expired_early == 1 and r.copies_expired_early == 2
    assert any("expired before their TTL" in p for p in r.problems)


def test_a_probe_gone_after_its_ttl_or_after_forward_steps_is_fine(tmp_path):
    assert probe_run(tmp_path, held=["n1", "n2"], gone_at=5.2).valid
    r = probe_run(tmp_path, held=["n1", "n2"], gone_at=3.0,
                  steps=[(2.0, "n1", 30.0), (2.5, "n2", 30.0)])
    assert r.valid and r.expired_early == 0 and r.expired_early_allowed == 1
    # The originator's clock stepped forward: the copies it sends carry what
    # is left by its clock, so they may go early too.
    assert probe_run(tmp_path, held=["n1", "n2"], gone_at=3.0, steps=[(2.0, "n1", 30.0)]).valid
    # The originator's (n1) stepped back, not forward: nothing excuses its copy.
    r = probe_run(tmp_path, held=["n1", "n2"], gone_at=3.0,
                  steps=[(2.0, "n1", -30.0), (2.5, "n2", 30.0)])
    assert not r.valid and r.copies_expired_early == 1 and r.expired_early == 1


def test_a_copy_missing_at_the_first_look_is_a_copy_expired_early(tmp_path):
    r = probe_run(tmp_path, held=["n1"])        # REPLICATE 2 was answered
    assert not r.valid and r.copies_expired_early == 1 and r.expired_early == 0


def test_a_job_delivered_again_and_again_is_a_requeue_storm(tmp_path):
    def run_with(nack: bool):
        run = Run(tmp_path / f"storm-{nack}.jsonl")
        _, value, jid = run.add(0.0)
        for i in range(6):
            run.deliver(0.1 + i * 0.15, value, jid)
            if nack:
                run.at(0.15 + i * 0.15).w.nacked(jid, "n2", 1)
        run.ack(1.2, jid)
        return check(read_history(run.finish(2.0)))

    stormy = run_with(nack=False)
    assert not stormy.valid and stormy.requeue_storms == 1
    assert stormy.max_deliveries_per_job_s == 6
    assert run_with(nack=True).valid            # asked for, each time
