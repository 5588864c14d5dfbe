"""What the Spark tests look at on the cluster: every job, by asking every
node (JSCAN, QPEEK, SHOW over RESP), as a consumer or an operator would."""

from __future__ import annotations

from typing import Any

from tests.harness import NodeProcess


def nodes_option(nodes: list[NodeProcess]) -> str:
    return ",".join(n.addr for n in nodes)


def all_job_ids(nodes: list[NodeProcess]) -> set[str]:
    """Every job any node holds (replicas counted once)."""
    ids: set[str] = set()
    for n in nodes:
        reply = n.client(protocol=2).execute_command("JSCAN", "0", "BUSYLOOP")
        ids.update(x.decode() for x in reply[1])
    return ids


def queued(nodes: list[NodeProcess], queue: str) -> dict[str, bytes]:
    """id -> body of every job queued in ``queue`` on any node; asserts that
    no job is queued on two nodes at once."""
    out: dict[str, bytes] = {}
    for n in nodes:
        for entry in n.client(protocol=2).execute_command("QPEEK", queue, 1_000_000) or []:
            jid = entry[1].decode()
            assert jid not in out, f"{jid} queued on two nodes"
            out[jid] = entry[2]
    return out


def show(nodes: list[NodeProcess], jid: str) -> dict[str, Any] | None:
    """SHOW from the first node that knows the job."""
    for n in nodes:
        reply = n.client(protocol=2).execute_command("SHOW", jid)
        if reply:
            return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}
    return None


def addjob_calls(nodes: list[NodeProcess]) -> int:
    """ADDJOB commands the nodes ran since the last ``reset_stats``."""
    total = 0
    for n in nodes:
        stats = n.client(protocol=2).info("commandstats")
        total += int(stats.get("cmdstat_addjob", {}).get("calls", 0))
    return total


def reset_stats(nodes: list[NodeProcess]) -> None:
    for n in nodes:
        n.client(protocol=2).execute_command("CONFIG", "RESETSTAT")
