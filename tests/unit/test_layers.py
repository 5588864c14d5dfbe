"""The code's shape (docs/design.md): imports go one way only, protocol <- broker
<- cluster <- server, each a package; the SDK (disquette/) and the chaos suite import
none of the server's packages; no import cycles (import-linter contracts in
pyproject.toml, which must cover every package and module); and no import is
hidden in a function, except of an optional dependency, commented so."""

from __future__ import annotations

import ast
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
ROOTS = CONF["root_packages"]
# Top-level directories and modules that hold no code of the product: the
# tests, the benchmarks (scripts; their imports are checked below all the
# same), the build script.
NOT_PRODUCT = {"tests", "bench", "deploy", "docs", "setup"}
# Top-level modules import-linter cannot take as a root package, with the only
# packages each may import.
TOP_MODULES = {"pyspark_disquette": {"disquette"}, "pyspark_disquette_aof": {"disquette"}}
# Directories whose in-function imports are checked (the product and bench/).
SCANNED = [*ROOTS, "bench"]
OPTIONAL = re.compile(r"#.*\boptional\b", re.IGNORECASE)

# Known exceptions, each until another change lands. A cycle edge no longer
# there fails the test, so that list only shrinks.
CYCLE_EDGES_ALLOWED: set[tuple[str, str]] = set()
UNCOMMENTED_ALLOWED: set[tuple[str, str]] = set()


# What a package's __init__ may import and still count as importing nothing:
# the build selection (protocol/build.py, the lowest layer), which must install
# the pure build's finder before any of the package's modules loads.
INIT_MAY_IMPORT = {"protocol.build"}


def _modules(pkg: str) -> set[str]:
    """Every module of a package, but the __init__s that import nothing besides
    INIT_MAY_IMPORT."""
    out = set()
    for path in (ROOT / pkg).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            tree = ast.parse(path.read_text())
            imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                        for a in n.names}
            imported |= {n.module or "." for n in ast.walk(tree)
                         if isinstance(n, ast.ImportFrom)}
            if imported <= INIT_MAY_IMPORT:
                continue
            parts = parts[:-1]
        out.add(".".join(parts))
    return out


def _covers(names, module: str) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


# Under a second on a quiet machine. Its own limit, under the test's own
# pytest timeout (above the suite's), so a hang says which one hung.
LINT_TIMEOUT = 300


@pytest.mark.timeout(LINT_TIMEOUT + 60)
def test_import_linter_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    assert lint, "import-linter is installed by `make venv` (test extras)"
    r = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                       timeout=LINT_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_every_package_is_a_root_of_the_contracts():
    """A new top-level package or module must join the contracts."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - NOT_PRODUCT
    assert packages == set(ROOTS), "pyproject [tool.importlinter] root_packages"
    top = {p.stem for p in ROOT.glob("*.py")} - NOT_PRODUCT
    assert top == set(TOP_MODULES), "a top-level module: add it to TOP_MODULES"


def test_every_module_is_under_a_contract():
    """Each of the server's packages is a layer, whole (the contract names
    packages, never a module of one), each other module in the source of a
    forbidden contract; each package and subpackage is an ancestor of the
    acyclic contract."""
    (layers,) = [c["layers"] for c in CONF["contracts"] if c["type"] == "layers"]
    layered = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    assert all((ROOT / m / "__init__.py").exists() for m in layered), \
        f"a layer is a top-level package: {sorted(layered)}"
    sources = {m for c in CONF["contracts"] for m in c.get("source_modules", [])}
    (ancestors,) = [set(c["ancestors"]) for c in CONF["contracts"]
                    if c["type"] == "acyclic_siblings"]
    outside, not_acyclic = [], []
    for pkg in ROOTS:
        under = layered if _covers({m.split(".")[0] for m in layered}, pkg) else sources
        for module in _modules(pkg):
            if not _covers(under, module):
                outside.append(module)
        for init in (ROOT / pkg).rglob("__init__.py"):
            name = ".".join(init.parent.relative_to(ROOT).parts)
            if name not in ancestors:
                not_acyclic.append(name)
    assert not outside, sorted(outside)
    assert not not_acyclic, sorted(not_acyclic)


def test_top_level_modules_import_only_what_they_may():
    for name, allowed in TOP_MODULES.items():
        tree = ast.parse((ROOT / f"{name}.py").read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names}
        imported |= {n.module for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module}
        project = {m for m in imported if m.split(".")[0] in (*ROOTS, "tests", "bench")}
        assert all(_covers(allowed, m) for m in project), (name, sorted(project))


def _cycles(graph) -> list[list[str]]:
    """The import graph's strongly connected components of two modules or more
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_through_a_package_init():
    """acyclic_siblings compares a package's children, not the package's own
    __init__: a module importing its package, whose __init__ imports it, is a
    cycle it does not see. Here every module counts, __init__s included."""
    g = grimp.build_graph(*ROOTS, cache_dir=None,
                          exclude_type_checking_imports=CONF["exclude_type_checking_imports"])
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    for importer, imported in CYCLE_EDGES_ALLOWED:
        assert imported in graph[importer], \
            f"{importer} -> {imported} is gone: remove it from CYCLE_EDGES_ALLOWED"
        graph[importer].discard(imported)
    assert not _cycles(graph), _cycles(graph)


def test_no_import_inside_a_function_but_of_an_optional_dependency():
    """An import in a function would dodge the contracts; the one exception is
    an optional dependency (pyspark, uvloop, prometheus-client in the SDK,
    cryptography...), with a comment saying so on its line or the line above."""
    hidden = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            text = path.read_text()
            lines = text.splitlines()
            found = {}
            for fn in ast.walk(ast.parse(text, rel)):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for node in ast.walk(fn):
                        if isinstance(node, (ast.Import, ast.ImportFrom)):
                            found[node.lineno] = node
            for line, node in sorted(found.items()):
                if any(OPTIONAL.search(said) for said in lines[max(line - 2, 0):line]):
                    continue
                names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else ["." * node.level + (node.module or "")]
                if all((rel, n) in UNCOMMENTED_ALLOWED for n in names):
                    continue
                hidden.append(f"{rel}:{line} {', '.join(names)}")
    assert not hidden, hidden
