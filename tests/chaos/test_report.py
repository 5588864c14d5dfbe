"""The report on a crafted history: terminal table, JSON file, and a
self-contained HTML page whose timeline shows the faults and the series."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from chaos.checker import check, longest_gap, recovery
from chaos.history import read_history
from chaos.report import (render_html, report_json, summary_table, timeline, write_reports,
                          write_summary)
from chaos.run import RunOutcome
from tests.chaos.crafted import Run, clean_run

SVG = "{http://www.w3.org/2000/svg}"


def crafted(tmp_path, lose_one=False):
    run = clean_run(tmp_path / "run.jsonl")
    if lose_one:
        run.add(4.9)
    slow = run.at(4.0).w.fault_started("latency", link="n1->n2", ms=500)
    run.at(4.6).w.fault_stopped(slow)
    run.at(5.0).w.fault_started("never-healed")
    history = read_history(run.finish(6.0))
    return history, check(history)


def test_terminal_table(tmp_path):
    history, result = crafted(tmp_path)
    table = summary_table(result, history)
    lines = table.splitlines()
    assert lines[0] == "Disquette chaos run: scenario crafted, seed 7, 2 nodes, 6.5 s"
    assert re.search(r"^   verdict +VALID$", table, re.M)
    assert re.search(r"^   adds acknowledged +10$", table, re.M)
    assert re.search(r"^   lost \(acked, never delivered\) +0$", table, re.M)
    assert re.search(r"^   add latency +p50 10\.0 ms, p90 10\.0 ms, p99 10\.0 ms, max 10\.0 ms "
                     r"\(n=10\)$", table, re.M)

    history, result = crafted(tmp_path, lose_one=True)
    table = summary_table(result, history)
    assert re.search(r"^!! verdict +INVALID$", table, re.M)
    assert re.search(r"^!! lost \(acked, never delivered\) +1$", table, re.M)
    assert "!! 1 acknowledged add(s) never delivered (lost)" in table


def test_timeline_series_and_bands(tmp_path):
    history, _ = crafted(tmp_path)
    tl = timeline(history)
    assert tl["bin_seconds"] == 0.2 and tl["duration"] == 6.5
    n = len(tl["t"])
    assert n == 33
    for key in ("adds_ok_per_s", "deliveries_per_s", "adds_failed_per_s",
                "adds_indeterminate_per_s", "add_latency_p50_ms", "add_latency_p99_ms",
                "delivery_latency_p50_ms", "delivery_latency_p99_ms"):
        assert len(tl[key]) == n
    # Ten adds acknowledged and ten deliveries, each counted once, as rates.
    assert round(sum(tl["adds_ok_per_s"]) * tl["bin_seconds"]) == 10
    assert round(sum(tl["deliveries_per_s"]) * tl["bin_seconds"]) == 10
    assert {v for v in tl["add_latency_p50_ms"] if v is not None} == {10.0}
    assert [(f["name"], f["start"], f["stop"], f["open"]) for f in tl["faults"]] == [
        ("partition", 1.7, 3.2, False), ("latency", 4.0, 4.6, False),
        ("never-healed", 5.0, 6.5, True)]
    assert tl["faults"][1]["detail"] == {"link": "n1->n2", "ms": 500}
    assert tl["drain"] == {"start": 6.0, "end": 6.5} and tl["heal"] == 6.0


def test_json_and_html_files(tmp_path):
    history, result = crafted(tmp_path)
    write_reports(result, history, tmp_path / "r.json", tmp_path / "r.html")

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["meta"]["scenario"] == "crafted" and report["meta"]["seed"] == 7
    assert report["figures"]["valid"] is True
    assert report["figures"]["acknowledged"] == 10 and report["figures"]["lost"] == 0
    assert report["figures"]["add_latency"]["p99"] == 0.01
    assert report["timeline"] == json.loads(json.dumps(timeline(history)))

    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "VALID" in page
    # Self-contained: nothing to fetch (the only URL is the SVG namespace).
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
    assert "<script" not in page and "<link" not in page
    assert "python -m chaos run --scenario crafted --seed 7" in page
    assert f"python -m chaos check {history.path}" in page

    svg = ET.fromstring(re.search(r"<svg .*?</svg>", page, re.S).group(0))
    bands = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "fault-band"]
    assert [b.get("data-fault") for b in bands] == ["partition", "latency", "never-healed"]
    assert bands[0].find(f"{SVG}title").text.startswith("partition 1.70-3.20 s cut=n1|n2")
    assert [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "drain-band"]
    series = {p.get("id") for p in svg.iter(f"{SVG}polyline")}
    assert {"series-adds_ok_per_s", "series-deliveries_per_s", "series-add_latency_p50_ms",
            "series-delivery_latency_p50_ms"} <= series
    # Bands sit where their times are on the shared x axis.
    x = [float(b.get("x")) for b in bands]
    assert x[0] < x[1] < x[2]


def test_html_marks_a_failed_run(tmp_path):
    history, result = crafted(tmp_path, lose_one=True)
    page = render_html(result, history, report_json(result, history))
    assert '<span class="invalid">INVALID</span>' in page
    assert "1 acknowledged add(s) never delivered (lost)" in page
    assert re.search(r'<tr class="bad"><td>lost \(acked, never delivered\)</td><td>1</td>', page)
    assert "Examples" in page


# -- unavailability windows, recovery, the summary ---------------------------------

def outage(tmp_path):
    """Adds every 0.5 s; those invoked from 3.0 to 5.0 s refused; the one
    at 5.5 s answered only after the heal (5.8 s); the first add after the
    heal acknowledged at 6.01 s and delivered at 6.5 s."""
    run = Run(tmp_path / "outage.jsonl")
    fault = None
    for i in range(20):
        t = i * 0.5
        if t == 3.0:
            fault = run.at(3.0).w.fault_started("partition", cut="n1|n2")
        if 3.0 <= t <= 5.0:
            run.add(t, outcome="fail")
        elif t == 5.5:
            run.job(t, reply_after=0.4, deliver_after=1.0)
            run.at(5.8).w.fault_stopped(fault)
        elif t == 6.0:
            run.job(t, deliver_after=0.5)
        else:
            run.job(t)
    return read_history(run.finish(10.0))


def test_windows_and_recovery_from_a_crafted_outage(tmp_path):
    result = check(outage(tmp_path))
    # the last ack before: the add at 2.5 s, answered at 2.51; the next at 5.9
    assert result.unavailable_add == {"seconds": 3.39, "from": 2.51, "to": 5.9}
    # the last delivery before: 2.6 s; the next: the late add's and the 6.0 one's, at 6.5
    assert result.unavailable_delivery == {"seconds": 3.9, "from": 2.6, "to": 6.5}
    # the add answered at 5.9 was invoked before the heal: recovery is the 6.0 one's
    assert result.recovery == {"healed_at": 5.8, "add": 0.21, "delivery": 0.7, "both": 0.7}


def test_windows_edges():
    assert longest_gap([], 1.0, 4.0) == {"seconds": 3.0, "from": 1.0, "to": 4.0}
    assert longest_gap([0.5, 2.0, 9.0], 1.0, 4.0) == {"seconds": 2.0, "from": 2.0, "to": 4.0}
    assert longest_gap([1.0], 1.0, 1.0) is None
    # no heal, no fault: nothing to recover from
    assert recovery([{"t": 0.0, "type": "add", "phase": "invoke", "op": 1}]) is None


def test_windows_in_the_table_and_the_page(tmp_path):
    history = outage(tmp_path)
    result = check(history)
    table = summary_table(result, history)
    assert re.search(r"^   longest time with no add acknowledged +3\.39 s \(2\.5-5\.9 s\)$",
                     table, re.M)
    assert re.search(r"^   longest time with no delivery +3\.90 s \(2\.6-6\.5 s\)$", table, re.M)
    assert re.search(r"^   time to recover after heal +0\.70 s \(adds 0\.21 s, deliveries "
                     r"0\.70 s; healed at 5\.8 s\)$", table, re.M)
    page = render_html(result, history)
    assert "<td>time to recover after heal</td><td>0.70 s (adds 0.21 s" in page
    assert report_json(result, history)["figures"]["unavailable_add"]["seconds"] == 3.39


def test_summary_groups_by_kind_and_marks_skipped(tmp_path):
    result = check(outage(tmp_path))
    clean = check(read_history(clean_run(tmp_path / "clean.jsonl").finish(6.0)))
    outcomes = [RunOutcome("isolated", 1, result, tmp_path / "isolated-seed1", "", []),
                RunOutcome("isolated", 2, clean, tmp_path / "isolated-seed2", "", []),
                RunOutcome("pause", 1, result, tmp_path / "pause-seed1", "", [], kind="process"),
                RunOutcome("packet-loss", 1, None, tmp_path / "packet-loss-seed1", "", [],
                           skipped="no network namespace with iptables")]
    summary = write_summary(outcomes, tmp_path / "runs")
    assert list(summary["kinds"]) == ["network", "process"]
    assert summary["valid"] is True and summary["skipped"] == 1
    isolated, _, skipped = summary["kinds"]["network"]
    assert (isolated["acknowledged"], isolated["no_add_s"], isolated["no_delivery_s"],
            isolated["recover_add_s"], isolated["recover_delivery_s"]) == (15, 3.39, 3.9,
                                                                          0.21, 0.7)
    assert skipped["verdict"] == "SKIPPED"
    # the two runs added up, the longest times kept
    assert clean.unavailable_add["seconds"] < 3.39 and clean.acknowledged == 10
    assert clean.recovery["add"] == 0.31      # its heal at 3.2 s, the next add at 3.5 s
    assert summary["totals"]["network"] == {
        "runs": 2, "acknowledged": 25, "lost": 0, "duplicated": 0, "unexpected": 0,
        "recovered": 0, "no_add_s": 3.39, "no_delivery_s": 3.9, "recover_add_s": 0.31,
        "recover_delivery_s": 0.7}
    assert json.loads((tmp_path / "runs" / "summary.json").read_text()) == summary
    page = (tmp_path / "runs" / "index.html").read_text()
    assert '<table class="kind" id="kind-network">' in page and 'id="kind-process"' in page
    assert '<a href="isolated-seed1/report.html">isolated</a>' in page
    assert "no network namespace with iptables" in page and "1 skipped" in page
    assert "<th>all (2 runs)</th><th></th><th></th><th>25</th><th>0</th>" in page


def test_what_a_fault_measured_is_in_the_timeline_and_the_page(tmp_path):
    run = clean_run(tmp_path / "loss.jsonl")
    loss = run.at(5.0).w.fault_started("packet-loss", probability=0.2, nodes=["n1"])
    run.at(5.5).w.fault_stopped(loss, packets_seen=120, packets_dropped=23)
    history = read_history(run.finish(6.0))
    tl = timeline(history)
    assert [f["outcome"] for f in tl["faults"]] == [
        {}, {"packets_seen": 120, "packets_dropped": 23}]
    page = render_html(check(history), history)
    assert "<td>packets_seen 120, packets_dropped 23</td>" in page


def test_a_failed_workload_thread_fails_the_run(tmp_path):
    run = clean_run(tmp_path / "crash.jsonl")
    run.at(5.0).w.workload_error("cn1: KeyError: 'id'")
    history = read_history(run.finish(6.0))
    result = check(history)
    assert not result.valid
    assert result.problems == ["1 workload thread(s) failed: the run proves nothing"]
    assert report_json(result, history)["workload_errors"] == ["cn1: KeyError: 'id'"]
