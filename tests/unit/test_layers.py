"""The code's shape (DESIGN.md): imports go one way only, protocol <- broker core
<- cluster <- commands <- server, without cycles (import-linter contracts in
pyproject.toml), and no import is hidden in a function to dodge them."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "broker", "cluster", "server")


def test_import_linter_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    assert lint, "import-linter is installed by `make venv` (test extras)"
    r = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_the_broker_core_layer_lists_every_core_module():
    """A core module missing from the layers contract would escape it."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in conf["contracts"] if c["type"] == "layers"]
    listed = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    core = {f"broker.{p.stem}" for p in (ROOT / "broker").glob("*.py")
            if p.stem not in ("__init__", "__main__")}
    assert core <= listed, sorted(core - listed)


def test_no_project_import_inside_a_function():
    hidden = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and node.module and \
                            node.module.split(".")[0] in PACKAGES:
                        hidden.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                    elif isinstance(node, ast.Import) and any(
                            a.name.split(".")[0] in PACKAGES for a in node.names):
                        hidden.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not hidden, hidden
