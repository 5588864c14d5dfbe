"""The distributions as a user gets them: built from this checkout's files
with `python -m build` (the node's wheel from its sdist, as pip would build
it), once per test session, then installed into fresh venvs that have no
compiler on PATH and do not see the checkout.

Building the node compiles its core (Cython and mypyc), the slow part: every
test here shares one build (xdist_group "wheel": one worker runs them all).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
# The compilers a build would look for by name; each a script that records
# the call and fails.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "x86_64-linux-gnu-gcc",
             "aarch64-linux-gnu-gcc")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/wheel/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.xdist_group("wheel"))


@dataclass
class Dists:
    sdk: Path           # disquette-<v>-py3-none-any.whl
    node: Path          # disquette_server-<v>-cp3xx-...whl
    node_sdist: Path    # disquette_server-<v>.tar.gz
    version: str


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    """``argv`` to its end; its output in the failure's message."""
    r = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert r.returncode == 0, f"{argv} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def source_copy(dest: Path) -> Path:
    """The files a commit of this checkout would hold (tracked, or new and not
    ignored), links kept as links: what a fresh clone builds, without this
    checkout's build outputs and compiled modules."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=ROOT).stdout.split("\0")
    for name in filter(None, listed):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue            # deleted in the work tree, not yet in the index
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    return dest


def build_env() -> dict[str, str]:
    """The environment `python -m build` runs in: the constraints for the
    isolated build environments (as the Makefile installs), and the compiled
    build whatever this run's build is."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISQUETTE_NO_EXTENSIONS", "PYTHONPATH")}
    env["PIP_CONSTRAINT"] = str(CONSTRAINTS)
    return env


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> Dists:
    work = tmp_path_factory.mktemp("dists")
    src = source_copy(work / "src")
    out = work / "dist"
    python = [sys.executable, "-m", "build", "--outdir", str(out)]
    run([*python, str(src)], cwd=work, env=build_env())           # the node: sdist, then its wheel
    run([*python, str(src / "sdk")], cwd=work, env=build_env())   # the SDK
    (sdk,) = out.glob("disquette-*-py3-none-any.whl")
    (node,) = out.glob("disquette_server-*.whl")
    (node_sdist,) = out.glob("disquette_server-*.tar.gz")
    version = sdk.name.split("-")[1]
    return Dists(sdk=sdk, node=node, node_sdist=node_sdist, version=version)


@dataclass
class Venv:
    """A fresh venv and the environment its programs run in: no compiler on
    PATH (the names a build would call record the call and fail; CC and CXX
    point nowhere), no PYTHONPATH, run from a directory outside the checkout."""
    dir: Path
    cwd: Path
    env: dict[str, str]
    compiler_calls: Path

    @property
    def python(self) -> str:
        return str(self.dir / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.dir / "bin" / name)

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
        return run(argv, cwd=self.cwd, env=self.env, **kwargs)

    def pip_install(self, *requirements: str, constrained: bool) -> None:
        """pip install, with the Makefile's constraints or without them."""
        env = dict(self.env)
        argv = [self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        if constrained:
            env["PIP_CONSTRAINT"] = str(CONSTRAINTS)
        run([*argv, *requirements], cwd=self.cwd, env=env)

    def compilers_called(self) -> str:
        return self.compiler_calls.read_text() if self.compiler_calls.exists() else ""


def fresh_venv(base: Path) -> Venv:
    base.mkdir(parents=True)
    shims, cwd = base / "no-compiler", base / "cwd"
    shims.mkdir()
    cwd.mkdir()
    calls = base / "compiler-calls.log"
    for name in COMPILERS:
        shim = shims / name
        shim.write_text(f'#!/bin/sh\necho "$0 $*" >> "{calls}"\nexit 1\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    venv = base / "venv"
    # The venv module makes it from the base interpreter: none of this run's packages.
    run([sys.executable, "-m", "venv", str(venv)])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV",
                        "DISQUETTE_NO_EXTENSIONS", "PIP_CONSTRAINT")
           and not k.startswith(("PYTEST_", "COV_"))}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(shims), os.environ["PATH"]])
    env["CC"] = env["CXX"] = str(base / "no-such-compiler")
    env["VIRTUAL_ENV"] = str(venv)
    return Venv(dir=venv, cwd=cwd, env=env, compiler_calls=calls)


@pytest.fixture(scope="session")
def make_venv(tmp_path_factory):
    def make(name: str) -> Venv:
        return fresh_venv(tmp_path_factory.mktemp("venvs") / name)
    return make
