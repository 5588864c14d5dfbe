"""docs/layout.md holds the tree as it is: every module of the packages is named
on the page, and every module the page names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "broker", "cluster", "server", "disquette", "chaos")


def layout_block() -> str:
    text = (ROOT / "docs" / "layout.md").read_text()
    return re.search(r"## Layout\n+```text\n(.*?)```", text, re.S).group(1)


def tracked_modules() -> list[Path]:
    out = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return [Path(p) for p in out if p.endswith((".py", ".pyx"))]


def test_every_module_is_on_the_page():
    block = layout_block()
    missing = [str(p) for p in tracked_modules()
               if p.name != "__init__.py" and p.name not in block]
    assert not missing, f"docs/layout.md does not name: {missing}"


def test_every_module_on_the_page_exists():
    names = {p.name for p in tracked_modules()} | {
        p.name for p in ROOT.glob("*.py")} | {p.name for p in ROOT.glob("bench/*.py")}
    named = set(re.findall(r"\b([a-z_0-9]+\.pyx?)\b", layout_block()))
    stale = sorted(named - names)
    assert not stale, f"docs/layout.md names modules that are gone: {stale}"
