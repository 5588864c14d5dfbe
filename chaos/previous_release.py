"""The previous release, runnable beside this one: its source taken from the
repository's own history, run as its pure build (DISQUETTE_NO_EXTENSIONS=1,
nothing compiled) in a venv of its own whose site-packages reach this one's
installed dependencies through a .pth. What the rolling upgrade (the chaos
scenario ``rolling-upgrade``) starts its first nodes from, and what the tests
of a mixed cluster and of a downgrade run.

The commit is looked up in the checkout's history; a shallow clone fetches it
from its remote. Where neither can (no git, no checkout, no remote), the
release is unavailable, with the reason (``Unavailable``): a caller skips,
saying it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

#: The previous release: the last commit before bus versions were settled
#: (it speaks bus version 1 only and writes AOF format version 2).
PREVIOUS_RELEASE = "8079746ee000d76f4cc83e89c9622f5fdc47e86a"

ROOT = Path(__file__).resolve().parent.parent


class Unavailable(RuntimeError):
    """The release's source cannot be had here; the message says why."""


class Release:
    """A release's source and the interpreter that runs it."""

    def __init__(self, commit: str, source: Path, python: Path) -> None:
        self.commit = commit
        self.source = source
        self.python = python

    @property
    def short(self) -> str:
        return self.commit[:7]

    def server_command(self) -> list[str]:
        """Its node: ``python -m server`` where it has one, else ``python -m
        broker`` (the entry point until server/__main__.py)."""
        package = "server" if (self.source / "server" / "__main__.py").exists() else "broker"
        return [str(self.python), "-m", package]

    def check_aof_command(self) -> list[str]:
        """Its ``disquette-check-aof``."""
        return [str(self.python), "-c", "import sys; from server.check_aof import main; "
                "sys.exit(main())"]

    def env(self) -> dict[str, str]:
        """What its processes need in their environment (over this one's):
        its source first on the path, nothing of this checkout's, its pure build."""
        return {"PYTHONPATH": str(self.source), "DISQUETTE_NO_EXTENSIONS": "1",
                "PYTHONDONTWRITEBYTECODE": "1"}


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=check, stdin=subprocess.DEVNULL)


def _have(commit: str) -> bool:
    return _git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0


def _find(commit: str) -> None:
    """The commit in the local history, fetched from a remote if it is not."""
    if shutil.which("git") is None:
        raise Unavailable("git is not installed: the previous release's source comes "
                          "from the repository's history")
    if _git("rev-parse", "--git-dir", check=False).returncode != 0:
        raise Unavailable(f"{ROOT} is not a git checkout: the previous release's source "
                          "comes from the repository's history")
    if _have(commit):
        return
    remotes = _git("remote", check=False).stdout.split()
    for remote in remotes:
        # A shallow clone (CI's may be) lacks the history: fetch just that commit.
        _git("fetch", "--quiet", "--depth=1", remote, commit, check=False)
        if _have(commit):
            return
    raise Unavailable(f"commit {commit[:7]} is not in this checkout's history"
                      + (f" and could not be fetched from {', '.join(remotes)}" if remotes
                         else " and it has no remote to fetch it from"))


def _cache_dir(commit: str) -> Path:
    """Per commit and per interpreter (the venv's .pth names this one's
    site-packages), in the temporary directory."""
    key = hashlib.sha256(f"{commit} {sys.prefix}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"disquette-release-{commit[:7]}-{os.getuid()}-{key}"


def materialize(commit: str = PREVIOUS_RELEASE, where: Path | None = None) -> Release:
    """The release at ``commit``, made once (``where``, by default a cache
    in the temporary directory, shared by the processes that ask for it):
    its tree by ``git archive``, a venv with no pip and no compiler run."""
    dest = where or _cache_dir(commit)
    release = Release(commit, dest / "src", dest / "venv" / "bin" / "python")
    if (dest / "ready").exists():
        return release
    _find(commit)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        (work / "src").mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit],
                                 capture_output=True, check=True, stdin=subprocess.DEVNULL)
        subprocess.run(["tar", "-x", "-C", str(work / "src")], input=archive.stdout,
                       check=True, capture_output=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")],
                       check=True, capture_output=True, stdin=subprocess.DEVNULL)
        # This interpreter's installed dependencies, as directories only: the
        # .pth files there (this checkout's editable install) are not run.
        paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
        site = Path(subprocess.run(
            [str(work / "venv" / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True).stdout.strip())
        (site / "disquette-dependencies.pth").write_text("".join(f"{p}\n" for p in paths))
        (work / "ready").write_text(commit + "\n")
        try:
            work.rename(dest)
        except OSError:
            if not (dest / "ready").exists():      # not another process's, done first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Release(commit, dest / "src", dest / "venv" / "bin" / "python")


def previous_release() -> Release:
    """The previous release (PREVIOUS_RELEASE), runnable; Unavailable if not here."""
    return materialize(PREVIOUS_RELEASE)
