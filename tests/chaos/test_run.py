"""``python -m chaos run``, as an operator runs it: a short seeded subset of the
scenarios against real nodes behind the fault proxy (``make chaos`` runs them
all, for longer). The verdict must be clean, the reports written, and the
faults must have bitten (a partition that changes nothing proves nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chaos.history import read_history
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.xdist_group("chaos-run")

SEED = 11
SECONDS = 8


def run_chaos(out, *scenarios: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "chaos", "run", "--nodes", "3", "--seconds", str(SECONDS),
            "--seed", str(SEED), "--out", str(out), "--rate", "30"]
    for name in scenarios:
        args += ["--scenario", name]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("chaos-runs")
    proc = run_chaos(out, "isolated", "kill-aof-always")
    return out, proc


def test_the_subset_passes_and_prints_its_verdicts(ran):
    out, proc = ran
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "scenario" in proc.stdout and "replay: python -m chaos run --seed 11" in proc.stdout
    for name in ("isolated", "kill-aof-always"):
        report = json.loads((out / f"{name}-seed{SEED}" / "report.json").read_text())
        assert report["figures"]["valid"] is True
        assert report["figures"]["lost"] == 0 and report["figures"]["unexpected"] == 0
        assert report["figures"]["acknowledged"] > 50
        assert (out / f"{name}-seed{SEED}" / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_the_faults_bit(ran):
    out, _ = ran
    isolated = read_history(out / f"isolated-seed{SEED}" / "history.jsonl")
    faults = [e for e in isolated.events if e["type"] == "fault"]
    assert [e["phase"] for e in faults] == ["start", "stop"]
    start, stop = faults[0]["t"], faults[1]["t"]
    # While one node was cut off, adds there could not reach REPLICATE > 1 copies.
    during = {e["op"] for e in isolated.events if e["type"] == "add" and e["phase"] == "invoke"
              and start <= e["t"] <= stop and e["replicate"] > 1}
    refused = [e for e in isolated.events if e["type"] == "add" and e["phase"] in ("fail", "info")
               and e["op"] in during]
    assert refused, "no add failed during the partition: the cut did not reach the bus"

    killed = read_history(out / f"kill-aof-always-seed{SEED}" / "history.jsonl")
    kills = [e for e in killed.events if e["type"] == "fault" and e["phase"] == "start"]
    assert len(kills) == 2 and all(e["name"] == "kill -9" for e in kills)


def test_the_same_seed_draws_the_same_faults(ran, tmp_path):
    out, _ = ran
    again = run_chaos(tmp_path, "isolated")
    assert again.returncode == 0, again.stdout[-4000:]

    def faults(folder):
        return [(e["name"], e.get("detail")) for e in
                read_history(folder / f"isolated-seed{SEED}" / "history.jsonl").events
                if e["type"] == "fault" and e["phase"] == "start"]
    assert faults(tmp_path) == faults(out)
