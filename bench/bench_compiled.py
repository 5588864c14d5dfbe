#!/usr/bin/env python3
"""The compiled core, tried: the same tree built three ways, side by side in
one run (issue 17). Nothing here is what ships; it is how we decided.

    make bench-compiled                      # or: .venv/bin/python bench/bench_compiled.py
    .venv/bin/python bench/bench_compiled.py --quick

Variants, each a copy of this checkout's files in a temporary directory:

  python   the modules as they are (the pure build)
  cython   every module on the request path (protocol/, broker/, cluster/ but the
           simulator, server/resp.py, driver.py, bus.py) compiled by Cython 3 from
           the unchanged .py files, annotations not used for typing (so a loose
           annotation cannot change behaviour)
  mypyc    the build that ships (setup.py, `make venv`): the hot core compiled by
           mypyc, and the request reader by Cython

For each variant one node; ``redis-benchmark -c 50`` sends PING, ``ADDJOB q
<100 B> 0`` and ``GETJOB NOHANG FROM q``, the variants taking turns in rounds that
alternate their order. Printed: requests/s and the node's CPU time per request
(user + system, /proc/PID/stat), each with its ratio to the python variant.
Needs Cython and mypy (the ``bench`` extra, which ``make bench-compiled`` installs)
and a C compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import (
    REPO_ROOT, Server, body, cpu_seconds, median, parse_bench_args, redis_benchmark,
    settle, start_disquette, temp_dir,
)

BODY = body(100)
VARIANTS = ["python", "cython", "mypyc"]
COMMANDS = {
    "PING": ["PING"],
    "ADDJOB": ["ADDJOB", "q", BODY, "0"],
    "GETJOB NOHANG": ["GETJOB", "NOHANG", "FROM", "q"],
}

CYTHON_SETUP = '''
from glob import glob
from setuptools import setup
from Cython.Build import cythonize
modules = sorted(
    set(glob("protocol/*.py") + glob("broker/*.py") + glob("broker/commands/*.py")
        + glob("cluster/*.py") + ["server/resp.py", "server/driver.py", "server/bus.py"])
    - set(glob("*/__init__.py") + glob("*/*/__init__.py") + glob("*/__main__.py")))
setup(ext_modules=cythonize(modules, quiet=True, language_level=3,
      compiler_directives={"annotation_typing": False, "binding": True}))
'''

# (file, old, new): the edits each compiler needs, applied to the copy only;
# each must match exactly once, or the script stops (the source moved on).
EDITS = {
    # Cython iterates a bytes literal as 1-byte bytes, CPython as ints.
    "cython": [("broker/job.py", 'in enumerate(b"ABCDEFGHIJ', 'in enumerate(list(b"ABCDEFGHIJ'),
               ("broker/job.py", '0123456789+/"):', '0123456789+/")):')],
}

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def copy_tree(dest: Path) -> None:
    """The checkout's tracked files as they are now (edits included)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = REPO_ROOT / f.decode()
        if src.is_file():
            (dest / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f.decode())


def build(variant: str, dest: Path) -> None:
    copy_tree(dest)
    t0 = time.monotonic()
    for name, old, new in EDITS.get(variant, []):
        path = dest / name
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{variant}: an edit no longer applies to {name}: {old!r}")
        path.write_text(text.replace(old, new))
    if variant == "cython":
        (dest / "setup_cython.py").write_text(CYTHON_SETUP)
        run([sys.executable, "setup_cython.py", "build_ext", "--inplace",
             "-j", str(os.cpu_count() or 1)], dest)
    elif variant == "mypyc":
        run([sys.executable, "setup.py", "build_ext", "--inplace"], dest)
    built = sorted(str(p.relative_to(dest)) for p in dest.rglob("*.so")
                   if p.relative_to(dest).parts[0] != "build")
    if variant != "python" and not built:
        raise SystemExit(f"{variant}: nothing was compiled")
    log(f"{variant}: {len(built)} compiled modules, built in {time.monotonic() - t0:.0f} s")


def run(argv: list[str], cwd: Path) -> None:
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed:\n{p.stdout.decode()[-3000:]}")


def measure(node: Server, command: list, n: int) -> tuple[float, float]:
    """requests/s and the node's CPU microseconds per request."""
    settle(node, 0.2)
    u0, s0 = cpu_seconds(node.pid)
    rps = redis_benchmark(node.port, command, n)
    u1, s1 = cpu_seconds(node.pid)
    return rps, (u1 - u0 + s1 - s0) / n * 1e6


def main(argv=None) -> int:
    args = parse_bench_args(argv, "The same tree pure and compiled two ways (issue 17).",
                            VARIANTS)
    variants = args.names or VARIANTS
    if "python" not in variants:
        variants = ["python", *variants]        # the reference of every ratio
    for mod in {"cython": "Cython", "mypyc": "mypyc"}.items():
        if mod[0] in variants:
            try:
                __import__(mod[1])
            except ImportError:
                raise SystemExit(f"{mod[1]} is not installed: make bench-compiled installs it")
    rounds = args.rounds or (1 if args.quick else 3)
    n = max(2000, int((20_000 if args.quick else 100_000) * args.scale))

    nodes: dict[str, Server] = {}
    for v in variants:
        root = Path(temp_dir(f"disquette-{v}-"))
        build(v, root)
        nodes[v] = start_disquette(root=root)
        info = nodes[v].call("PING")
        assert info == b"+PONG", info
    rps: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, command in COMMANDS.items():
            for v in order:
                # GETJOB needs jobs: the ADDJOB row of the same round left n of them.
                a, b = measure(nodes[v], command, n)
                rps.setdefault((name, v), []).append(a)
                cpu.setdefault((name, v), []).append(b)
                log(f"  round {r + 1}/{rounds} {name:14s} {v:7s} {a:9,.0f} rps  {b:5.1f} us/req")

    print(f"\nPython {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; medians of {rounds} round(s), "
          f"{n} requests each, 50 clients\n")
    head = ["command"] + [f"{v} rps" for v in variants] + [f"{v} us/req" for v in variants] \
        + [f"{v} / python (CPU)" for v in variants if v != "python"]
    print("| " + " | ".join(head) + " |")
    print("| --- " * len(head) + "|")
    for name in COMMANDS:
        r = {v: median(rps[name, v]) for v in variants}
        c = {v: median(cpu[name, v]) for v in variants}
        cells = [name] + [f"{r[v]:,.0f}" for v in variants] + [f"{c[v]:.1f}" for v in variants] \
            + [f"{c[v] / c['python']:.2f}x" for v in variants if v != "python"]
        print("| " + " | ".join(cells) + " |")
    print("\nCPU ratio < 1.00x: the compiled variant costs the node less per request.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
