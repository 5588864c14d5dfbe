"""``python -m chaos run [--scenario NAME|all] [--nodes 5] [--seconds 60] [--seed N]
[--seeds K] [--rate R] [--producers P] [--batch B] [--toxiproxy URL] [--out DIR]``
runs scenarios against real nodes (chaos/run.py), writes the summary report
(DIR/index.html, DIR/summary.json) and exits 1 if any run lost a job,
delivered an unexpected one or a RETRY 0 job twice. A scenario that cannot
run here (packet-loss without a network namespace) is reported SKIPPED.

``python -m chaos summary DIR`` rebuilds DIR's summary from the runs' reports
in it (after runs made apart, or an interrupted one).

``python -m chaos check HISTORY [--json PATH] [--html PATH] [--no-files]``
re-checks a recorded run: prints the summary table, writes the JSON and HTML
reports (by default beside the history: ``<name>.report.json`` and
``<name>.report.html``) and exits 0 when the run is valid, 1 when something
was lost, unexpected, or a RETRY 0 job was delivered twice, 2 when the history
cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chaos.checker import check
from chaos.history import HistoryError, read_history
from chaos.report import summary_table, write_reports
from chaos.report import write_summary
from chaos.run import RunOptions, outcomes_in, pick_seeds, run
from chaos.scenarios import SCENARIOS


def _report_path(history: Path, suffix: str) -> Path:
    stem = history.name.removesuffix(".jsonl").removesuffix(".json")
    return history.with_name(f"{stem}.report.{suffix}")


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.history)
    try:
        history = read_history(path)
    except (OSError, HistoryError) as exc:
        print(f"chaos check: {exc}", file=sys.stderr)
        return 2
    result = check(history)
    print(summary_table(result, history))
    if not args.no_files:
        json_path = Path(args.json) if args.json else _report_path(path, "json")
        html_path = Path(args.html) if args.html else _report_path(path, "html")
        write_reports(result, history, json_path, html_path)
        print(f"\nreports: {json_path} {html_path}")
    return 0 if result.valid else 1


def _seconds(figure: dict | None, key: str = "seconds") -> str:
    value = None if figure is None else figure[key]
    return "-" if value is None else f"{value:.2f}"


def cmd_run(args: argparse.Namespace) -> int:
    names = list(SCENARIOS) if "all" in args.scenario else args.scenario
    options = RunOptions(nodes=args.nodes, seconds=args.seconds, rate=args.rate,
                         producers=args.producers, consumers=args.consumers, batch=args.batch,
                         drain_timeout=args.drain_timeout,
                         recovery_timeout=args.recovery_timeout, toxiproxy_url=args.toxiproxy)
    seeds = pick_seeds(args.seed, args.seeds)
    out = Path(args.out)
    outcomes = run(names, options, seeds=seeds, out=out, summary=not args.no_summary)
    width = max(len(o.scenario) for o in outcomes)
    print("scenario".ljust(width), "      seed  verdict  acked adds  lost  unexpected  dup rate  "
          "RETRY0 twice  uncollected  no add (s)  no delivery (s)  recover (s)")
    for o in outcomes:
        r = o.result
        if r is None:
            print(f"{o.scenario:<{width}}  {o.seed:>8}  SKIPPED  {o.skipped}")
            continue
        print(f"{o.scenario:<{width}}  {o.seed:>8}  {'ok' if o.valid else 'FAIL':<7}  "
              f"{r.acknowledged:>10}  {r.lost:>4}  {r.unexpected:>10}  {r.duplicate_rate:>8.2%}  "
              f"{r.retry0_redelivered:>12}  {r.uncollected:>11}  "
              f"{_seconds(r.unavailable_add):>10}  {_seconds(r.unavailable_delivery):>15}  "
              f"{_seconds(r.recovery, 'both'):>11}")
    print(f"replay: python -m chaos run --seed {seeds[0]} --nodes {args.nodes} "
          f"--seconds {args.seconds:g} --scenario NAME")
    if not args.no_summary:
        print(f"summary: {out / 'index.html'}")
    ran = [o for o in outcomes if o.skipped is None]
    return 0 if all(o.valid for o in ran) else 1


def cmd_summary(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    outcomes = outcomes_in(out)
    if not outcomes:
        print(f"chaos summary: no */report.json in {out}", file=sys.stderr)
        return 2
    # the options every run shares (the first run's; scenarios set the rest)
    first = outcomes[0].folder / "report.json"
    args_of_run = json.loads(first.read_text(encoding="utf-8"))["meta"].get("args") or {}
    options = {k: v for k, v in args_of_run.items()
               if k in ("nodes", "seconds", "rate", "producers", "consumers", "batch")}
    summary = write_summary(outcomes, out, options)
    print(f"summary of {len(outcomes)} runs: {out / 'index.html'}")
    return 0 if summary["valid"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos",
                                     description="Disquette's chaos suite.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check a recorded history and write its reports")
    p.add_argument("history", help="a history file (JSON lines) written by a run")
    p.add_argument("--json", help="where to write the JSON report")
    p.add_argument("--html", help="where to write the HTML report")
    p.add_argument("--no-files", action="store_true", help="only print the summary")
    p.set_defaults(run=cmd_check)
    r = sub.add_parser("run", help="run scenarios against a real cluster and check them")
    r.add_argument("--scenario", action="append", choices=[*SCENARIOS, "all"],
                   help="a scenario (repeatable) or all (the default)")
    r.add_argument("--nodes", type=int, default=5, help="cluster size (default 5)")
    r.add_argument("--seconds", type=float, default=60.0,
                   help="how long the workload runs under faults (default 60)")
    r.add_argument("--seed", type=int, help="replay a run (default: a random seed, printed)")
    r.add_argument("--seeds", type=int, default=1,
                   help="run every scenario with this many seeds, from --seed on (default 1)")
    r.add_argument("--toxiproxy", metavar="URL",
                   help="a running Toxiproxy server to use instead of chaos.proxy")
    r.add_argument("--out", default="chaos-runs", help="where runs write (default chaos-runs/)")
    r.add_argument("--rate", type=float, default=40.0,
                   help="adds per second of each producer (default 40)")
    r.add_argument("--producers", type=int, default=1,
                   help="producer threads per node (default 1)")
    r.add_argument("--consumers", type=int, default=1,
                   help="consumer threads per node (default 1)")
    r.add_argument("--batch", type=int, default=1,
                   help="adds per pipelined call of a producer (add_jobs; default 1)")
    r.add_argument("--drain-timeout", type=float, default=60.0,
                   help="seconds the final drain may take (default 60)")
    r.add_argument("--recovery-timeout", type=float, default=30.0,
                   help="seconds after the heal that adds and deliveries may take to "
                        "succeed again (default 30)")
    r.add_argument("--no-summary", action="store_true",
                   help="write no summary under --out (the packet-loss re-run in its "
                        "network namespace uses it)")
    r.set_defaults(run=cmd_run, scenario=None)
    m = sub.add_parser("summary", help="rebuild the summary of the runs in a folder")
    m.add_argument("dir", help="a --out folder: its */report.json are the runs")
    m.set_defaults(run=cmd_summary)
    args = parser.parse_args(argv)
    if args.command == "run" and not args.scenario:
        args.scenario = ["all"]
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
