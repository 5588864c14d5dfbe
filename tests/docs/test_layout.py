"""docs/layout.md holds the tree as it is, by path: every module of the
packages starts a line of the page's layout with its path from the repository's
root, one module a line, and every path the layout names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "broker", "cluster", "server", "disquette", "chaos")
# A path as the page writes one: folders, then a module or a folder.
PATH = re.compile(r"(?<![\w./-])((?:[a-z_0-9]+/)+(?:[a-z_0-9]+\.pyx?)?|[a-z_0-9]+\.pyx?)(?![\w/])")


def layout_block() -> str:
    text = (ROOT / "docs" / "layout.md").read_text()
    return re.search(r"## Layout\n+```text\n(.*?)```", text, re.S).group(1)


def tracked(*paths: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()


def tracked_modules() -> list[str]:
    return [p for p in tracked(*PACKAGES)
            if p.endswith((".py", ".pyx")) and not p.endswith("__init__.py")]


def test_every_module_starts_a_line_with_its_path():
    starts = {line.split()[0] for line in layout_block().splitlines() if line.strip()}
    missing = [p for p in tracked_modules() if p not in starts]
    assert not missing, f"docs/layout.md has no line for: {missing}"


def test_one_module_a_line():
    crowded = [line for line in layout_block().splitlines()
               if len([p for p in PATH.findall(line.split("  ")[0])
                       if p.endswith((".py", ".pyx"))]) > 1]
    assert not crowded, f"docs/layout.md names several modules on one line: {crowded}"


def test_every_path_on_the_page_exists():
    files = set(tracked())
    folders = {str(Path(f).parent) + "/" for f in files} | {
        "/".join(f.split("/")[:i]) + "/" for f in files for i in range(1, f.count("/") + 1)}
    named = set(PATH.findall(layout_block()))
    gone = sorted(p for p in named if p not in files and p not in folders)
    assert not gone, f"docs/layout.md names paths that are not in the tree: {gone}"
