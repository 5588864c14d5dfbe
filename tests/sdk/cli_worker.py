"""``disquette worker`` as a subprocess, with handlers written to a module in
the test's temporary directory: what a user runs, killed or signalled as
their process manager would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.sdk.test_cli import WorkerProcess, disquette_exe

# Handlers of the tests (module ``tasks``): each records the ids it started
# and finished in files named after $TASKS_OUT.
TASKS = '''
import os, time

OUT = os.environ["TASKS_OUT"]

def _note(suffix, job):
    with open(OUT + suffix, "a") as f:
        f.write(job.id + "\\n")

def hang(job):
    """Starts, then never finishes (the test kills the process)."""
    _note(".started", job)
    time.sleep(3600)

def gated(job):
    """Finishes once the test creates the release file."""
    _note(".started", job)
    while not os.path.exists(OUT + ".release"):
        time.sleep(0.01)
    _note(".done", job)
'''


class CliWorker(WorkerProcess):
    """A worker process (``signal``, ``wait`` and ``kill`` as test_cli's),
    its stdout (what the CLI prints) apart from its log (stderr)."""

    def __init__(self, tmp: Path, node_addr: str, handler: str, *extra: str) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "tasks.py").write_text(TASKS)
        self.out = tmp / "jobs"
        self.stdout_path, self.log_path = tmp / "worker.out", tmp / "worker.log"
        self.log = open(self.log_path, "w")
        with open(self.stdout_path, "w") as stdout:  # the process keeps its own copy
            self.proc = subprocess.Popen(
                [*disquette_exe(), "worker", f"tasks:{handler}", "--queue", "q", "--nodes",
                 node_addr, "--poll-ms", "200", *extra],
                cwd=tmp, env={**os.environ, "TASKS_OUT": str(self.out)},
                stdout=stdout, stderr=self.log)

    def _ids(self, suffix: str) -> list[str]:
        path = self.out.with_name(self.out.name + suffix)
        return path.read_text().split() if path.exists() else []

    def started(self) -> list[str]:
        return self._ids(".started")

    def done(self) -> list[str]:
        return self._ids(".done")

    def release(self) -> None:
        self.out.with_name(self.out.name + ".release").touch()

    def stdout(self) -> str:
        return self.stdout_path.read_text()


@pytest.fixture
def cli_workers() -> Iterator[list[CliWorker]]:
    """Worker processes a test starts, killed at its end if still running."""
    started: list[CliWorker] = []
    yield started
    for w in started:
        w.kill()
