"""``python -m chaos check HISTORY [--json PATH] [--html PATH] [--no-files]``

Re-checks a recorded run: prints the summary table, writes the JSON and HTML
reports (by default beside the history: ``<name>.report.json`` and
``<name>.report.html``) and exits 0 when the run is valid, 1 when something
was lost, unexpected, or a RETRY 0 job was delivered twice, 2 when the history
cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chaos.checker import check
from chaos.history import HistoryError, read_history
from chaos.report import summary_table, write_reports


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
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
