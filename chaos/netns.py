"""Packet loss with iptables, inside a network namespace of the run's own.

netem is not available in these kernels, so loss comes from iptables'
``statistic`` match: a rule drops a seeded share of the TCP packets to or from
a port. The rules must never touch the host's firewall, so a scenario that
needs them (``Scenario.netns``) runs in a fresh network namespace: the
runner re-executes ``python -m chaos run`` for it under ``unshare -n`` with
``lo`` up (root or CAP_NET_ADMIN; without, ``unshare -r -n`` maps the user
to root in a user namespace of its own). The cluster, the fault proxy and the
workload all live on 127.0.0.1, so they all move into the namespace with it.
When neither works, the scenario is skipped with the reason, never passed.

Each dropped port gets two rules in the INPUT chain (every loopback packet
crosses it once), tagged with a comment: one that only counts the packets
seen, then the ``statistic`` rule that drops; their counters, read with
``iptables -L INPUT -v -x -n``, say how much was really dropped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# Set in the re-executed run: the rules may be written, this namespace is ours.
INSIDE_ENV = "DISQUETTE_CHAOS_NETNS"
# Brings loopback up in the new namespace, then runs the command given after it.
_LO_UP = 'ip link set lo up && exec "$@"'
_PROBE = "ip link set lo up && iptables -w -L INPUT -n >/dev/null"


def inside() -> bool:
    return os.environ.get(INSIDE_ENV) == "1"


def unshare_prefix() -> tuple[list[str] | None, str]:
    """The ``unshare`` command that gives a namespace where iptables works,
    or None and why there is none."""
    missing = [tool for tool in ("unshare", "ip", "iptables") if shutil.which(tool) is None]
    if missing:
        return None, f"{', '.join(missing)} not installed (Debian: util-linux, iproute2, iptables)"
    errors = []
    for prefix in (["unshare", "-n"], ["unshare", "-r", "-n"]):
        probe = subprocess.run([*prefix, "--", "sh", "-c", _PROBE], capture_output=True,
                               text=True, timeout=30)
        if probe.returncode == 0:
            return prefix, ""
        errors.append(f"`{' '.join(prefix)}`: {probe.stderr.strip() or probe.returncode}")
    return None, ("no network namespace with iptables (needs root or CAP_NET_ADMIN): "
                  + "; ".join(errors))


def wrap(prefix: list[str], argv: list[str]) -> list[str]:
    """``argv`` run in a new namespace made by ``prefix``, loopback up."""
    return [*prefix, "--", "sh", "-c", _LO_UP, "sh", *argv]


def _iptables(*args: str) -> str:
    return subprocess.run(["iptables", "-w", *args], check=True, capture_output=True,
                          text=True, timeout=30).stdout


@dataclass
class LossRules:
    """The rules dropping ``probability`` of the packets to and from ``ports``."""
    tag: str
    ports: list[int]
    probability: float

    def _specs(self) -> list[list[str]]:
        specs = []
        for port in self.ports:
            for way in ("--dport", "--sport"):
                match = ["-p", "tcp", way, str(port)]
                specs.append([*match, "-m", "comment", "--comment", f"{self.tag}-seen"])
                specs.append([*match, "-m", "statistic", "--mode", "random", "--probability",
                              f"{self.probability:.4f}", "-m", "comment", "--comment",
                              f"{self.tag}-drop", "-j", "DROP"])
        return specs

    def add(self) -> None:
        if not inside():
            raise RuntimeError("packet loss rules are only written in the run's own "
                               "network namespace (chaos/netns.py)")
        for spec in self._specs():
            _iptables("-A", "INPUT", *spec)

    def counters(self) -> dict[str, int]:
        """Packets seen on the ports and packets dropped, so far."""
        seen = dropped = 0
        for line in _iptables("-L", "INPUT", "-v", "-x", "-n").splitlines():
            fields = line.split()
            if not fields or not fields[0].isdigit():
                continue
            if f"/* {self.tag}-seen */" in line:
                seen += int(fields[0])
            elif f"/* {self.tag}-drop */" in line:
                dropped += int(fields[0])
        return {"packets_seen": seen, "packets_dropped": dropped}

    def remove(self) -> dict[str, int]:
        """Delete the rules; their final counters."""
        counted = self.counters()
        for spec in self._specs():
            _iptables("-D", "INPUT", *spec)
        return counted
