"""A short seeded ``python -m chaos run`` of a few scenarios, as an operator
starts it (3 nodes, 30 adds/s): the CI-sized runs of tests/chaos."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO_ROOT


def run_chaos(out: Path, *scenarios: str, seconds: float, seed: int,
              timeout: float = 600) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "chaos", "run", "--nodes", "3", "--seconds", str(seconds),
            "--seed", str(seed), "--out", str(out), "--rate", "30"]
    for name in scenarios:
        args += ["--scenario", name]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
