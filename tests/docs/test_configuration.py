"""docs/configuration.md's directive reference and broker/directives.py held
to each other, both ways: every directive has its row, every row is a
directive, and each row says the directive's type (its Kind's describe()),
its default as a config file writes it (its Kind's file_lines), whether
CONFIG SET changes it at run time, and its doc.

``python -m tests.docs.test_configuration`` prints the table as it should be.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker.directives import DIRECTIVES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
HEADER = "| directive | type | default | live | what it does |"
_ROW = re.compile(r"^\| `([a-z-]+)` \|")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def row(d) -> str:
    """A directive's row of the table."""
    default = "; ".join(args for _, args in d.kind.file_lines(d.default))
    return (f"| `{d.name}` | {_cell(d.kind.describe())} | `{_cell(default)}` | "
            f"{'yes' if d.runtime else 'no'} | {_cell(d.doc)} |")


def table() -> str:
    return "\n".join([HEADER, "| --- | --- | --- | --- | --- |",
                      *(row(d) for d in DIRECTIVES.values())])


def page_rows() -> dict[str, str]:
    lines = PAGE.read_text().splitlines()
    start = lines.index(HEADER)
    rows: dict[str, str] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        m = _ROW.match(line)
        assert m, f"not a directive's row: {line!r}"
        assert m.group(1) not in rows, f"{m.group(1)} listed twice"
        rows[m.group(1)] = line
    return rows


def test_every_directive_has_its_row_and_every_row_is_a_directive():
    rows = page_rows()
    assert sorted(rows) == sorted(DIRECTIVES), (
        f"missing: {sorted(set(DIRECTIVES) - set(rows))}, "
        f"not directives: {sorted(set(rows) - set(DIRECTIVES))}")


def test_each_row_says_what_the_code_declares():
    rows = page_rows()
    for name, d in DIRECTIVES.items():
        if name in rows:
            assert rows[name] == row(d), f"docs/configuration.md's row of {name} should be:\n{row(d)}"


def test_the_maxmemory_default_is_written_as_a_config_file_would():
    assert "| `maxmemory` | memory >= 1 | `1gb` | yes |" in page_rows()["maxmemory"]


if __name__ == "__main__":
    print(table())
