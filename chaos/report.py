"""What a person reads after a run: a summary table on the terminal, a JSON
file (every figure, plus the timeline), and one self-contained HTML page
(inline SVG, no script, nothing fetched) with the timeline plot: faults as
bands, throughput and latency over time."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from chaos.checker import CheckResult, percentiles
from chaos.history import FAIL, INFO, INVOKE, OK, START, STOP, History

TARGET_BINS = 60


# -- the figures, in the order a reader wants them -----------------------------

def _ms(stats: dict[str, Any], key: str) -> str:
    value = stats.get(key)
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _latency(stats: dict[str, Any]) -> str:
    return (f"p50 {_ms(stats, 'p50')}, p90 {_ms(stats, 'p90')}, p99 {_ms(stats, 'p99')}, "
            f"max {_ms(stats, 'max')} (n={stats['count']})")


def _window(window: dict[str, float] | None) -> str:
    if window is None:
        return "-"
    return f"{window['seconds']:.2f} s ({window['from']:.1f}-{window['to']:.1f} s)"


def _recovery(recovery: dict[str, float | None] | None) -> str:
    if recovery is None:
        return "-"

    def s(key: str) -> str:
        value = recovery[key]
        return "never" if value is None else f"{value:.2f} s"
    return (f"{s('both')} (adds {s('add')}, deliveries {s('delivery')}; "
            f"healed at {recovery['healed_at']:.1f} s)")


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[CheckResult], Any]
    bad: Callable[[CheckResult], bool] = lambda r: False      # fails the run
    note: Callable[[CheckResult], bool] = lambda r: False     # worth a look


ROWS = [
    Row("verdict", lambda r: "VALID" if r.valid else "INVALID", bad=lambda r: not r.valid),
    Row("adds attempted", lambda r: r.attempted),
    Row("adds acknowledged", lambda r: r.acknowledged),
    Row("adds failed (error reply)", lambda r: r.failed),
    Row("adds indeterminate", lambda r: r.indeterminate),
    Row("deliveries", lambda r: r.deliveries),
    Row("distinct jobs delivered", lambda r: r.delivered),
    Row("lost (acked, never delivered)", lambda r: r.lost, bad=lambda r: r.lost > 0),
    Row("unexpected (never added)", lambda r: r.unexpected, bad=lambda r: r.unexpected > 0),
    Row("duplicated", lambda r: f"{r.duplicated} ({r.duplicate_rate:.2%})",
        note=lambda r: r.duplicated > 0),
    Row("  redeliveries after NACK", lambda r: r.duplicates_after_nack),
    Row("  redeliveries after ACK", lambda r: r.duplicates_after_ack,
        note=lambda r: r.duplicates_after_ack > 0),
    Row("  redeliveries after retry", lambda r: r.duplicates_after_timeout),
    Row("recovered (indeterminate, delivered)", lambda r: r.recovered),
    Row("failed adds delivered anyway", lambda r: r.failed_then_delivered,
        note=lambda r: r.failed_then_delivered > 0),
    Row("RETRY 0 jobs", lambda r: r.retry0_jobs),
    Row("RETRY 0 delivered twice", lambda r: r.retry0_redelivered,
        bad=lambda r: r.retry0_redelivered > 0),
    Row("RETRY 0 never delivered (allowed: at most once)", lambda r: r.retry0_undelivered,
        note=lambda r: r.retry0_undelivered > 0),
    Row("acked jobs", lambda r: r.acked_jobs),
    Row("acked, not collected after healing", lambda r: (
        f"{r.uncollected}" + (" (" + ", ".join(f"{n}: {c}" for n, c in
                                               r.uncollected_by_node.items()) + ")"
                              if r.uncollected_by_node else "")),
        note=lambda r: r.uncollected > 0),
    Row("unacked jobs left after healing", lambda r: r.leftover_unacked,
        note=lambda r: r.leftover_unacked > 0),
    Row("final drain complete", lambda r: {True: "yes", False: "NO", None: "-"}[r.drain_complete],
        note=lambda r: r.drain_complete is False),
    Row("longest time with no add acknowledged", lambda r: _window(r.unavailable_add)),
    Row("longest time with no delivery", lambda r: _window(r.unavailable_delivery)),
    Row("time to recover after heal", lambda r: _recovery(r.recovery),
        note=lambda r: r.recovery is not None and r.recovery["both"] is None),
    Row("add latency", lambda r: _latency(r.add_latency)),
    Row("delivery latency (add -> first delivery)", lambda r: _latency(r.delivery_latency)),
]


def _title(meta: dict[str, Any], duration: float) -> str:
    parts = [f"scenario {meta['scenario']}" if meta.get("scenario") else None,
             f"seed {meta['seed']}" if meta.get("seed") is not None else None,
             f"{len(meta['nodes'])} nodes" if meta.get("nodes") else None,
             f"{duration:.1f} s"]
    return "Disquette chaos run: " + ", ".join(p for p in parts if p)


UPGRADE_ROWS = [
    Row("adds acknowledged, both releases running", lambda r: r.mixed_phase_adds,
        bad=lambda r: r.mixed_phase_adds == 0),
    Row("REPLICATE 3 probes across releases", lambda r: r.upgrade_probes),
    Row("  held by nodes of both releases", lambda r: r.upgrade_probes_across,
        bad=lambda r: r.upgrade_probes_across == 0),
    Row("  short of a copy (3 added, 2 with a node down)", lambda r: r.upgrade_probes_short,
        bad=lambda r: r.upgrade_probes_short > 0),
    Row("  never acked", lambda r: r.upgrade_probes_unacked,
        bad=lambda r: r.upgrade_probes_unacked > 0),
    Row("bus messages dropped as malformed", lambda r: r.upgrade_malformed,
        bad=lambda r: r.upgrade_malformed > 0),
]


def summary_table(result: CheckResult, history: History) -> str:
    """The terminal summary: one figure a line, ``!!`` on what fails the run,
    ``? `` on what is worth a look."""
    width = max(len(row.label) for row in ROWS)
    lines = [_title(history.meta, history.duration), ""]
    for row in ROWS:
        mark = "!!" if row.bad(result) else "? " if row.note(result) else "  "
        lines.append(f"{mark} {row.label:<{width}}  {row.value(result)}")
    if result.upgrade_probes:       # a rolling upgrade (chaos/upgrade.py)
        for row in UPGRADE_ROWS:
            mark = "!!" if row.bad(result) else "  "
            lines.append(f"{mark} {row.label:<{width}}  {row.value(result)}")
    for problem in result.problems:
        lines.append(f"!! {problem}")
    for warning in history.warnings + ([] if result.history_complete else
                                       ["the history has no end event (the run stopped early)"]):
        lines.append(f"?  {warning}")
    return "\n".join(lines)


# -- timeline ------------------------------------------------------------------

def _nice(x: float) -> float:
    """The 1-2-5 number at or above ``x``."""
    if x <= 0:
        return 1.0
    exp = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= x:
            return m * 10 ** exp
    return 10 ** (exp + 1)


def timeline(history: History, bin_seconds: float | None = None) -> dict[str, Any]:
    """Per-bin series (rates per second, latencies in ms) and the fault,
    drain and heal intervals, in seconds since the run started."""
    events = history.events
    duration = max(history.duration, 1e-3)
    width = bin_seconds or _nice(duration / TARGET_BINS)
    nbins = max(1, math.ceil(duration / width))

    def index(t: float) -> int:
        return min(int(t // width), nbins - 1)

    invoked: dict[int, float] = {}
    value_invoked: dict[str, float] = {}
    first_delivery: set[str] = set()
    counts = {k: [0] * nbins for k in ("adds_ok", "adds_failed", "adds_indeterminate",
                                       "deliveries")}
    add_lat: list[list[float]] = [[] for _ in range(nbins)]
    del_lat: list[list[float]] = [[] for _ in range(nbins)]
    faults: dict[int, dict[str, Any]] = {}
    drain: dict[str, float] = {}
    heal = None
    for e in events:
        t, kind, phase = e["t"], e["type"], e.get("phase")
        if kind == "add" and phase == INVOKE:
            invoked[e["op"]] = t
            value_invoked[e["value"]] = t
        elif kind == "add" and phase in (OK, FAIL, INFO):
            key = {OK: "adds_ok", FAIL: "adds_failed", INFO: "adds_indeterminate"}[phase]
            counts[key][index(t)] += 1
            if phase == OK and e["op"] in invoked:
                add_lat[index(t)].append(t - invoked[e["op"]])
        elif kind == "deliver":
            counts["deliveries"][index(t)] += 1
            value = e.get("value")
            if value in value_invoked and value not in first_delivery:
                first_delivery.add(value)
                del_lat[index(t)].append(t - value_invoked[value])
        elif kind == "fault" and phase == START:
            faults[e["fault"]] = {"name": e.get("name", "fault"), "start": t, "stop": None,
                                  "detail": e.get("detail") or {}, "outcome": {}}
        elif kind == "fault" and phase == STOP and e.get("fault") in faults:
            faults[e["fault"]]["stop"] = t
            # what the fault measured as it stopped (packet-loss: iptables' counters)
            faults[e["fault"]]["outcome"] = {k: v for k, v in e.items()
                                             if k not in ("t", "type", "phase", "fault")}
        elif kind == "drain":
            drain[phase or "start"] = t
        elif kind == "heal":
            heal = t
    for fault in faults.values():
        fault["open"] = fault["stop"] is None           # never stopped: to the end
        if fault["stop"] is None:
            fault["stop"] = duration

    def ms(samples: list[float], key: str) -> float | None:
        value = percentiles(samples)[key]
        return None if value is None else round(value * 1000, 3)

    return {
        "bin_seconds": width,
        "duration": duration,
        "t": [round(i * width, 6) for i in range(nbins)],
        **{f"{k}_per_s": [round(c / width, 3) for c in v] for k, v in counts.items()},
        "add_latency_p50_ms": [ms(s, "p50") for s in add_lat],
        "add_latency_p99_ms": [ms(s, "p99") for s in add_lat],
        "delivery_latency_p50_ms": [ms(s, "p50") for s in del_lat],
        "delivery_latency_p99_ms": [ms(s, "p99") for s in del_lat],
        "faults": sorted(faults.values(), key=lambda f: f["start"]),
        "drain": ({"start": drain.get("start"), "end": drain.get("end", duration)}
                  if "start" in drain else None),
        "heal": heal,
    }


def report_json(result: CheckResult, history: History) -> dict[str, Any]:
    return {"meta": history.meta, "history": str(history.path) if history.path else None,
            "figures": result.to_json(), "timeline": timeline(history),
            "workload_errors": [e["message"] for e in history.events if e["type"] == "error"]}


# -- HTML ----------------------------------------------------------------------

THROUGHPUT_SERIES = [("adds_ok_per_s", "adds acknowledged /s", "#1f77b4"),
                     ("deliveries_per_s", "deliveries /s", "#2ca02c"),
                     ("adds_failed_per_s", "adds failed /s", "#d62728"),
                     ("adds_indeterminate_per_s", "adds indeterminate /s", "#ff7f0e")]
LATENCY_SERIES = [("add_latency_p50_ms", "add p50 ms", "#1f77b4"),
                  ("add_latency_p99_ms", "add p99 ms", "#9ecae1"),
                  ("delivery_latency_p50_ms", "delivery p50 ms", "#2ca02c"),
                  ("delivery_latency_p99_ms", "delivery p99 ms", "#a1d99b")]
FAULT_COLOURS = ["#e45756", "#f58518", "#b279a2", "#72b7b2", "#eeca3b", "#9d755d"]

W, PANEL_H, LEFT, RIGHT, TOP, GAP = 960, 220, 64, 16, 56, 46


def _fmt(x: float) -> str:
    return f"{x:g}" if abs(x) < 1e5 else f"{x:.3g}"


def _panel(tl: dict[str, Any], series: list[tuple[str, str, str]], y0: float, title: str) -> list[str]:
    duration = tl["duration"]
    plot_w = W - LEFT - RIGHT
    values = [v for key, _, _ in series for v in tl[key] if v is not None]
    top = _nice(max(values, default=0) * 1.05) if values and max(values) > 0 else 1.0
    step = _nice(top / 5)

    def x(t: float) -> float:
        return LEFT + plot_w * t / duration

    def y(v: float) -> float:
        return y0 + PANEL_H - PANEL_H * v / top

    out = [f'<text x="{LEFT}" y="{y0 - 8}" class="panel-title">{html.escape(title)}</text>',
           f'<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" class="frame"/>']
    tick = 0.0
    while tick <= top + 1e-9:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                   f'class="grid"/><text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" '
                   f'class="ytick">{_fmt(tick)}</text>')
        tick += step
    xstep = _nice(duration / 10)
    tick = 0.0
    while tick <= duration + 1e-9:
        out.append(f'<text x="{x(tick):.1f}" y="{y0 + PANEL_H + 14}" class="xtick">'
                   f'{_fmt(tick)} s</text>')
        tick += xstep
    half = tl["bin_seconds"] / 2
    for key, label, colour in series:
        points = [(x(t + half), y(v)) for t, v in zip(tl["t"], tl[key]) if v is not None]
        if points:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(f'<polyline id="series-{key}" class="series" points="{path}" '
                       f'stroke="{colour}"><title>{html.escape(label)}</title></polyline>')
    legend_x = LEFT + 190                     # beside the panel title, off the plot
    for _, label, colour in series:
        out.append(f'<rect x="{legend_x}" y="{y0 - 17}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{legend_x + 14}" y="{y0 - 8}" class="legend">{html.escape(label)}</text>')
        legend_x += 22 + 7 * len(label)
    return out


def timeline_svg(tl: dict[str, Any]) -> str:
    duration = tl["duration"]
    plot_w = W - LEFT - RIGHT
    height = TOP + 2 * PANEL_H + GAP + 30
    y_second = TOP + PANEL_H + GAP

    def x(t: float) -> float:
        return LEFT + plot_w * t / duration

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" '
           f'width="{W}" height="{height}" role="img" aria-label="timeline">']
    if tl["drain"]:
        d = tl["drain"]
        out.append(f'<rect class="drain-band" x="{x(d["start"]):.1f}" y="{TOP}" '
                   f'width="{max(x(d["end"]) - x(d["start"]), 1):.1f}" '
                   f'height="{height - TOP - 30}"><title>final drain</title></rect>')
    for i, fault in enumerate(tl["faults"]):
        colour = FAULT_COLOURS[i % len(FAULT_COLOURS)]
        detail = ", ".join(f"{k}={v}" for k, v in fault["detail"].items())
        tip = f'{fault["name"]} {fault["start"]:.2f}-{fault["stop"]:.2f} s {detail}'.strip()
        x0, x1 = x(fault["start"]), x(fault["stop"])
        out.append(f'<rect class="fault-band" data-fault="{html.escape(fault["name"])}" '
                   f'x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 1):.1f}" '
                   f'height="{height - TOP - 30}" fill="{colour}">'
                   f'<title>{html.escape(tip)}</title></rect>'
                   f'<text x="{x0 + 2:.1f}" y="{14 + 12 * (i % 2)}" class="fault-label" '
                   f'fill="{colour}">{html.escape(fault["name"])}</text>')
    if tl["heal"] is not None:
        out.append(f'<line class="heal" x1="{x(tl["heal"]):.1f}" x2="{x(tl["heal"]):.1f}" '
                   f'y1="{TOP}" y2="{height - 30}"><title>healed</title></line>')
    out += _panel(tl, THROUGHPUT_SERIES, TOP, "throughput (per second)")
    out += _panel(tl, LATENCY_SERIES, y_second, "latency (ms)")
    out.append("</svg>")
    return "\n".join(out)


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.3em; } .valid { color: #1a7f37; } .invalid { color: #cf222e; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
tr.bad td { color: #cf222e; font-weight: bold; } tr.note td { color: #9a6700; }
code { background: #f4f4f4; padding: 1px 4px; }
svg { font: 11px system-ui, sans-serif; }
.frame { fill: none; stroke: #999; } .grid { stroke: #eee; }
.ytick { text-anchor: end; fill: #555; } .xtick { text-anchor: middle; fill: #555; }
.series { fill: none; stroke-width: 1.8; } .panel-title { font-weight: bold; }
.fault-band { opacity: 0.18; } .fault-label { font-weight: bold; }
.drain-band { fill: #888; opacity: 0.12; } .heal { stroke: #1a7f37; stroke-dasharray: 4 3; }
"""


def render_html(result: CheckResult, history: History, report: dict[str, Any] | None = None) -> str:
    report = report or report_json(result, history)
    meta = history.meta
    title = _title(meta, history.duration)
    rows = []
    for row in ROWS:
        cls = "bad" if row.bad(result) else "note" if row.note(result) else ""
        rows.append(f'<tr class="{cls}"><td>{html.escape(row.label.strip())}</td>'
                    f'<td>{html.escape(str(row.value(result)))}</td></tr>')
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in result.problems)
    examples = "".join(
        f"<tr><td>{html.escape(name)}</td><td><code>{html.escape(', '.join(map(str, vals)))}"
        f"</code></td></tr>" for name, vals in result.examples.items())
    faults = "".join(
        f'<tr><td>{html.escape(f["name"])}</td><td>{f["start"]:.2f} s</td>'
        f'<td>{f["stop"]:.2f} s{" (never stopped)" if f["open"] else ""}</td>'
        f'<td><code>{html.escape(json.dumps(f["detail"]))}</code></td>'
        f'<td>{html.escape(", ".join(f"{k} {v}" for k, v in f["outcome"].items()))}</td></tr>'
        for f in report["timeline"]["faults"])
    replay = ""
    if meta.get("scenario") and meta.get("seed") is not None:
        replay = (f"<p>Replay: <code>python -m chaos run --scenario "
                  f"{html.escape(str(meta['scenario']))} --seed {html.escape(str(meta['seed']))}"
                  f"</code></p>")
    recheck = (f"<p>Re-check: <code>python -m chaos check {html.escape(str(history.path))}</code></p>"
               if history.path else "")
    nodes = meta.get("nodes") or {}
    node_list = ", ".join(f"{k} {v}" for k, v in nodes.items()) if isinstance(nodes, dict) \
        else ", ".join(map(str, nodes))
    verdict = "VALID" if result.valid else "INVALID"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(title)} - {verdict}</title>
<style>{STYLE}</style></head>
<body>
<h1>{html.escape(title)}: <span class="{verdict.lower()}">{verdict}</span></h1>
<p>Started {html.escape(str(meta.get("started_at", "?")))}{"; nodes " + html.escape(node_list) if node_list else ""}.</p>
{f"<ul class='problems'>{problems}</ul>" if problems else ""}
{replay}{recheck}
<h2>Timeline</h2>
<p>Bands are faults (hover for details), grey is the final drain, the dashed line the heal.
Bins of {report["timeline"]["bin_seconds"]:g} s.</p>
{timeline_svg(report["timeline"])}
<h2>Figures</h2>
<table id="figures">{"".join(rows)}</table>
{f'<h2>Examples</h2><table id="examples">{examples}</table>' if examples else ""}
{f'<h2>Faults</h2><table id="faults"><tr><th>fault</th><th>from</th><th>to</th><th>detail</th><th>measured</th></tr>{faults}</table>' if faults else ""}
</body></html>
"""


def write_reports(result: CheckResult, history: History, json_path: str | Path | None,
                  html_path: str | Path | None) -> None:
    report = report_json(result, history)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if html_path:
        Path(html_path).write_text(render_html(result, history, report), encoding="utf-8")


# -- the summary of a run of several scenarios and seeds ---------------------------

KINDS = ("network", "process", "clock", "disk", "power", "mixed")
SUMMARY_COLUMNS = ["scenario", "seed", "verdict", "acknowledged", "lost", "duplicated",
                   "unexpected", "recovered", "no add (s)", "no delivery (s)",
                   "recover add (s)", "recover delivery (s)"]


def summary_row(outcome: Any) -> dict[str, Any]:
    """One scenario and seed (a chaos.run.RunOutcome) as the summary shows it."""
    r: CheckResult | None = outcome.result
    row: dict[str, Any] = {"scenario": outcome.scenario, "seed": outcome.seed,
                           "kind": outcome.kind, "report": f"{outcome.folder.name}/report.html"}
    if r is None:
        return {**row, "verdict": "SKIPPED", "skipped": outcome.skipped}
    recovery = r.recovery or {}
    return {**row, "verdict": "VALID" if outcome.valid else "INVALID",
            "acknowledged": r.acknowledged, "lost": r.lost, "duplicated": r.duplicated,
            "unexpected": r.unexpected, "recovered": r.recovered,
            "no_add_s": (r.unavailable_add or {}).get("seconds"),
            "no_delivery_s": (r.unavailable_delivery or {}).get("seconds"),
            "recover_add_s": recovery.get("add"), "recover_delivery_s": recovery.get("delivery"),
            "workload_errors": outcome.workload_errors}


def summary_json(outcomes: list[Any], options: Any = None) -> dict[str, Any]:
    """Every outcome's row, grouped by the scenario's kind (KINDS order)."""
    rows = [summary_row(o) for o in outcomes]
    kinds = sorted({row["kind"] for row in rows},
                   key=lambda k: (KINDS.index(k) if k in KINDS else len(KINDS), k))
    by_kind = {kind: [row for row in rows if row["kind"] == kind] for kind in kinds}
    if options is not None and not isinstance(options, dict):
        options = vars(options)
    return {"options": options,
            "valid": all(row["verdict"] != "INVALID" for row in rows),
            "skipped": sum(row["verdict"] == "SKIPPED" for row in rows),
            "kinds": by_kind,
            "totals": {kind: _totals(kind_rows) for kind, kind_rows in by_kind.items()}}


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A kind's runs together: counts summed, windows at their worst."""
    ran = [row for row in rows if row["verdict"] != "SKIPPED"]
    out: dict[str, Any] = {"runs": len(ran)}
    for key in ("acknowledged", "lost", "duplicated", "unexpected", "recovered"):
        out[key] = sum(row[key] for row in ran)
    for key in ("no_add_s", "no_delivery_s", "recover_add_s", "recover_delivery_s"):
        values = [row[key] for row in ran if row[key] is not None]
        out[key] = max(values) if values else None
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def summary_tables(summary: dict[str, Any]) -> str:
    """The per-kind tables as HTML."""
    out = []
    keys = ["acknowledged", "lost", "duplicated", "unexpected", "recovered", "no_add_s",
            "no_delivery_s", "recover_add_s", "recover_delivery_s"]
    for kind, rows in summary["kinds"].items():
        out.append(f'<h2>{html.escape(kind)}</h2><table class="kind" id="kind-{html.escape(kind)}">'
                   "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in SUMMARY_COLUMNS)
                   + "</tr>")
        for row in rows:
            link = (f'<a href="{html.escape(row["report"])}">{html.escape(row["scenario"])}</a>')
            verdict = row["verdict"]
            cls = {"INVALID": "bad", "SKIPPED": "note"}.get(verdict, "")
            if verdict == "SKIPPED":
                cells = [f'<td colspan="{len(keys)}">{html.escape(str(row["skipped"]))}</td>']
            else:
                cells = [f"<td>{html.escape(_cell(row[k]))}</td>" for k in keys]
            out.append(f'<tr class="{cls}"><td>{link}</td><td>{row["seed"]}</td>'
                       f'<td>{verdict}</td>{"".join(cells)}</tr>')
        totals = summary["totals"][kind]
        out.append(f'<tr class="total"><th>all ({totals["runs"]} runs)</th><th></th><th></th>'
                   + "".join(f"<th>{html.escape(_cell(totals[k]))}</th>" for k in keys)
                   + "</tr>")
        out.append("</table>")
    return "\n".join(out)


def render_summary(summary: dict[str, Any]) -> str:
    count = sum(len(rows) for rows in summary["kinds"].values())
    verdict = "VALID" if summary["valid"] else "INVALID"
    options = summary.get("options") or {}
    how = ", ".join(f"{k} {v}" for k, v in options.items() if v not in (None, False))
    skipped = (f"<p class='note'>{summary['skipped']} skipped (see the reason in each row): "
               f"not proven here.</p>" if summary["skipped"] else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Disquette chaos runs - {verdict}</title>
<style>{STYLE}</style></head>
<body>
<h1>Disquette chaos runs ({count}): <span class="{verdict.lower()}">{verdict}</span></h1>
<p>{html.escape(how)}</p>{skipped}
<p>One table per kind of fault; each row is one scenario and seed (its name links to its
report); the last row of each adds the counts up and keeps the longest times.
<i>no add</i> / <i>no delivery</i>: the longest stretch, while producers ran,
with no add acknowledged / no job delivered. <i>recover</i>: seconds from the heal (the
last fault stopped) until an add made after it was acknowledged / a job delivered.</p>
{summary_tables(summary)}
</body></html>
"""


def write_summary(outcomes: list[Any], out: str | Path, options: Any = None) -> dict[str, Any]:
    """``out``/summary.json and ``out``/index.html for these outcomes."""
    summary = summary_json(outcomes, options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "index.html").write_text(render_summary(summary), encoding="utf-8")
    return summary
