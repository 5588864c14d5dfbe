"""deploy/systemd: `systemd-analyze verify` and `security --offline` check the
unit; systemd-sysusers creates its user in a scratch root; the unit's command
line, with the example config, starts a real node."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.deploy.deploy_kit import DEPLOY, UNIT, VENV_BIN, run, tool
from tests.harness import NodeProcess, free_port

INSTANCE = "disquette@7711.service"


def unit_settings() -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (systemd allows a key several times)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            assert section is not None
            section.setdefault(key.strip(), []).append(value.strip())
    return out


def service(key: str) -> str:
    return unit_settings()["Service"][key][-1]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A scratch root holding the system's units, ours, and a stand-in for the
    server binary (verify checks that ExecStart's program exists)."""
    tool("systemd-analyze", "run `make deps` (Debian's systemd)")
    root = tmp_path_factory.mktemp("root")
    units = next(p for p in map(Path, ("/usr/lib/systemd/system", "/lib/systemd/system"))
                 if (p / "sysinit.target").exists())
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system" / UNIT.name)
    exe = root / service("ExecStart").split()[0].lstrip("/")
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return root


def test_unit_passes_systemd_analyze_verify(root):
    res = run([tool("systemd-analyze"), "verify", f"--root={root}", INSTANCE])
    # verify exits 0 on unknown keys and bad values too, but says so.
    assert res.returncode == 0 and res.stdout + res.stderr == "", res.stdout + res.stderr


def test_unit_is_hardened(root):
    # Exposure 0.0 (best) .. 10.0; --threshold is in tenths. 2.0 is "OK".
    res = run([tool("systemd-analyze"), "security", "--offline=true", "--threshold=20",
               f"--root={root}", "--no-pager", INSTANCE])
    assert res.returncode == 0, res.stdout + res.stderr
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d)", res.stdout)
    assert level and float(level.group(1)) <= 2.0, res.stdout
    s = unit_settings()["Service"]
    for key, value in {"Type": "simple", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
                       "ProtectHome": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": ""}.items():
        assert s[key] == [value], key
    # The one writable place is the node's data dir, where ExecStart points it.
    data_dir = re.search(r"--dir (\S+)", service("ExecStart")).group(1)
    assert s["ReadWritePaths"] == [data_dir]
    assert data_dir == "/var/lib/" + service("StateDirectory")


def test_sysusers_creates_the_units_user(tmp_path):
    sysusers = tool("systemd-sysusers", "run `make deps` (Debian's systemd)")
    (tmp_path / "etc").mkdir()
    res = run([sysusers, f"--root={tmp_path}", str(DEPLOY / "systemd" / "disquette.sysusers")])
    assert res.returncode == 0, res.stderr
    users = {line.split(":")[0]: line.split(":") for line in
             (tmp_path / "etc/passwd").read_text().splitlines()}
    user = users[service("User")]
    assert user[6] == "/usr/sbin/nologin"
    groups = {line.split(":")[0]: line for line in (tmp_path / "etc/group").read_text().splitlines()}
    assert service("Group") in groups


def test_units_command_line_and_example_config_start_a_node(tmp_path):
    """ExecStart as systemd would run it for one port: the example config as
    /etc/disquette/<port>.conf, a scratch dir as /var/lib/disquette/<port>."""
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    argv = service("ExecStart").replace("%i", str(port)).split()
    argv[0] = str(VENV_BIN / Path(argv[0]).name)
    argv[1] = str(DEPLOY / "systemd" / "disque.conf")
    argv[argv.index("--dir") + 1] = str(data)
    node = NodeProcess(data, port, argv[1:], cmd=argv[:1])
    node.argv = lambda: argv  # exactly the unit's arguments, no harness defaults
    with node:
        config = node.client().config_get("*")
        assert config["port"] == str(port)
        assert config["dir"] == str(data)
        assert config["appendonly"] == "yes"
        assert config["daemonize"] == "no"
    assert (data / "nodes.conf").exists()
