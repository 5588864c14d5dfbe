"""What the Spark tests look at on the cluster: every job, by asking every
node (JSCAN, QPEEK, SHOW over RESP), as a consumer or an operator would; and
the local SparkSession they (and the docs examples) run in."""

from __future__ import annotations

import os
import sys
from typing import Any

from disquette.spark.commits import RECORD_PREFIX
from tests.harness import NodeProcess


def local_spark(master: str, app_name: str, **conf: str) -> Any:
    """A local SparkSession on loopback, no UI, whose Python workers run this
    interpreter (with this venv); ``conf`` adds settings."""
    # pyspark is a test extra, imported only where Spark runs.
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                       "spark.sql.shuffle.partitions": "2",
                       "spark.driver.bindAddress": "127.0.0.1",
                       "spark.driver.host": "127.0.0.1", **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def nodes_option(nodes: list[NodeProcess]) -> str:
    return ",".join(n.addr for n in nodes)


def all_job_ids(nodes: list[NodeProcess]) -> set[str]:
    """Every job any node holds (replicas counted once), but the commit
    records of exactly-once writes (disquette/spark/commits.py)."""
    ids: set[str] = set()
    for n in nodes:
        reply = n.client(protocol=2).execute_command("JSCAN", "0", "BUSYLOOP")
        ids.update(x.decode() for x in reply[1])
    return ids - record_ids(nodes)


def record_ids(nodes: list[NodeProcess]) -> set[str]:
    """The commit records (jobs of the ``disquette.commits/...`` queues): each
    is queued on some node, its copies elsewhere have the same id."""
    ids: set[str] = set()
    for n in nodes:
        c = n.client(protocol=2)
        for queue in c.execute_command("QSCAN", "0", "BUSYLOOP", "MINLEN", "1")[1]:
            if queue.startswith(RECORD_PREFIX.encode()):
                ids.update(e[1].decode() for e in c.execute_command("QPEEK", queue, 1_000_000))
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
