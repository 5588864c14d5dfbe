"""``python -m chaos run``, as an operator runs it: a short seeded subset of the
scenarios against real nodes behind the fault proxy (``make chaos`` runs them
all, for longer). The verdict must be clean, the reports written, and the
faults must have bitten (a partition that changes nothing proves nothing,
packet loss that dropped no packet neither)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chaos import netns
from chaos.history import read_history
from tests.chaos import short_run
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.xdist_group("chaos-run")

SEED = 11
SECONDS = 8


def run_chaos(out, *scenarios: str) -> subprocess.CompletedProcess:
    return short_run.run_chaos(out, *scenarios, seconds=SECONDS, seed=SEED)


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


def test_the_summary_has_a_table_per_kind_with_each_runs_figures(ran):
    out, _ = ran
    summary = json.loads((out / "summary.json").read_text())
    assert {k: [(r["scenario"], r["seed"]) for r in rows]
            for k, rows in summary["kinds"].items()} == {
        "network": [("isolated", SEED)], "process": [("kill-aof-always", SEED)]}
    assert summary["valid"] is True and summary["skipped"] == 0
    for rows in summary["kinds"].values():
        row = rows[0]
        figures = json.loads((out / row["report"]).with_name("report.json").read_text())["figures"]
        assert (row["acknowledged"], row["lost"], row["duplicated"], row["unexpected"],
                row["recovered"]) == (figures["acknowledged"], figures["lost"],
                                      figures["duplicated"], figures["unexpected"],
                                      figures["recovered"])
        assert row["no_add_s"] == figures["unavailable_add"]["seconds"]
        assert row["no_delivery_s"] == figures["unavailable_delivery"]["seconds"]
        # the runner produced until the cluster served again after the heal
        assert row["recover_add_s"] is not None and row["recover_delivery_s"] is not None
    page = (out / "index.html").read_text()
    assert 'id="kind-network"' in page and 'id="kind-process"' in page
    assert f'<a href="isolated-seed{SEED}/report.html">isolated</a>' in page


def test_the_summary_is_rebuilt_from_the_reports(ran, tmp_path):
    out, _ = ran
    written = json.loads((out / "summary.json").read_text())
    copy = tmp_path / "runs"
    for name in ("isolated", "kill-aof-always"):
        (copy / f"{name}-seed{SEED}").mkdir(parents=True)
        report = out / f"{name}-seed{SEED}" / "report.json"
        (copy / f"{name}-seed{SEED}" / "report.json").write_text(report.read_text())
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-m", "chaos", "summary", str(copy)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rebuilt = json.loads((copy / "summary.json").read_text())
    assert rebuilt["kinds"] == written["kinds"] and rebuilt["totals"] == written["totals"]
    assert rebuilt["options"] == {"nodes": 3, "seconds": SECONDS, "rate": 30, "producers": 1,
                                  "consumers": 1, "batch": 1}


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    prefix, why = netns.unshare_prefix()
    if prefix is None:
        pytest.skip(f"packet-loss needs a network namespace: {why}")
    out = tmp_path_factory.mktemp("chaos-loss")
    return out, run_chaos(out, "packet-loss")


def test_packet_loss_drops_packets_and_loses_no_job(lossy):
    out, proc = lossy
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    folder = out / f"packet-loss-seed{SEED}"
    figures = json.loads((folder / "report.json").read_text())["figures"]
    assert figures["valid"] is True and figures["lost"] == 0 and figures["unexpected"] == 0
    assert figures["acknowledged"] > 50
    history = read_history(folder / "history.jsonl")
    assert history.meta["args"]["netns"] is True
    stops = [e for e in history.events if e["type"] == "fault" and e["phase"] == "stop"]
    # iptables' own counters, read in the run's namespace as each fault stopped
    assert stops and sum(e["packets_dropped"] for e in stops) > 0
    assert all(e["packets_seen"] >= e["packets_dropped"] for e in stops)
    # the rules lived in the run's namespace: the host has none of them
    host = subprocess.run(["iptables", "-w", "-L", "INPUT", "-n"], capture_output=True,
                          text=True)
    assert "chaos-loss" not in host.stdout
