"""The chaos scenario ``rolling-upgrade``, short (``make chaos`` runs it full
length): three nodes of the previous release (chaos/previous_release.py)
upgraded to this one a node at a time, on their AOFs, under REPLICATE 3 adds,
gets and acks. Nothing acknowledged is lost, adds are acknowledged while both
releases run, the probes added then are held by every node (and by both
running nodes while the next one is down), every job ends acked, and no bus
message is dropped as malformed."""

from __future__ import annotations

import json

import pytest

from chaos.history import read_history
from tests.chaos import short_run

pytestmark = pytest.mark.xdist_group("chaos-run")

SEED = 11
SECONDS = 20


def test_a_rolling_upgrade_loses_nothing_and_keeps_replicating(tmp_path):
    proc = short_run.run_chaos(tmp_path, "rolling-upgrade", seconds=SECONDS, seed=SEED)
    if "SKIPPED rolling-upgrade" in proc.stdout:
        pytest.skip(proc.stdout.split("SKIPPED", 1)[1].splitlines()[0])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    folder = tmp_path / f"rolling-upgrade-seed{SEED}"
    figures = json.loads((folder / "report.json").read_text())["figures"]
    assert figures["valid"] is True and figures["lost"] == 0 and figures["unexpected"] == 0
    assert figures["mixed_phase_adds"] > 50
    assert figures["upgrade_probes"] == 4          # one per release in each of 2 mixed phases
    assert figures["upgrade_probes_short"] == 0 and figures["upgrade_probes_unacked"] == 0
    assert figures["upgrade_probes_across"] == 4   # three nodes: every node holds each
    assert figures["upgrade_malformed"] == 0
    assert figures["uncollected"] == 0 and figures["leftover_unacked"] == 0
    assert figures["drain_complete"] is True
    events = read_history(folder / "history.jsonl").events
    steps = [e for e in events if e["type"] == "fault" and e["phase"] == "start"]
    assert [e["name"] for e in steps] == ["upgrade"] * 3
    assert sorted(e["detail"]["node"] for e in steps) == ["n1", "n2", "n3"]
    releases = [e["nodes"] for e in events
                if e["type"] == "upgrade" and e["what"] == "releases"]
    assert set(releases[0].values()) == {"8079746"}
    assert set(releases[-1].values()) == {"this"}
