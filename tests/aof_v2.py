"""An AOF of format version 2 (the J and j job records, fields in the older
order), made by the code that wrote version 2, and what that code read from
it: tests/data/aof-v2.aof and tests/data/aof-v2.json, against which
tests/unit/broker/test_aof_format.py and tests/spark/test_aof_read.py hold the
loader and the Spark reader of today.

The fixture was made on main at commit 8079746 (the last version 2 writer),
from a checkout of it with this file copied in::

    git worktree add ../v2 8079746 && cp tests/aof_v2.py ../v2/tests/
    cd ../v2 && DISQUETTE_NO_EXTENSIONS=1 python -m tests.aof_v2 <this checkout>/tests/data

This module uses only what both versions have (the Node, its commands and
records, aof_format's encoders and Loader, the Spark reader's read_range).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from broker import aof_format as fmt
from broker.commands import COMMANDS
from broker.config import Config
from broker.node import Node
from disquette.spark.aof_files import plan
from disquette.spark.aof_rows import read_range

T0 = 1_700_000_000_000
DATA = Path(__file__).resolve().parent / "data"
AOF = DATA / "aof-v2.aof"
EXPECTED = DATA / "aof-v2.json"
PEERS = ("a" * 40, "b" * 40)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def make() -> tuple[bytes, int]:
    """The file a node with ``aof-history yes`` writes for a mix of commands
    and timers, then a batch of its live jobs (columns, holders among them)
    and a few (rows), as a rewrite would; and the time it ends at."""
    clock = Clock()
    node = Node(Config(), clock, random.Random(7), commands=COMMANDS, strict=True)
    node.persist = True
    node.persist_history = True
    out = [fmt.file_header()]
    marked = [0]

    def flush() -> None:
        records = node.take_records()
        if records:
            if clock.now != marked[0]:
                out.append(fmt.encode_time(clock.now))
                marked[0] = clock.now
            out.append(fmt.encode_items(records))

    c = node.new_client()

    def run(*args) -> object:
        reply = node.handle_command(c, [a if isinstance(a, bytes) else str(a).encode()
                                        for a in args])
        flush()
        return reply

    def advance(ms: int) -> None:
        end = clock.now + ms
        while clock.now < end:
            clock.now = min(end, max(clock.now + 1, min(node.next_deadline(), end)))
            node.tick()
            flush()

    ids = []
    for i in range(24):
        clock.now += 1
        opts = [["RETRY", 5], ["RETRY", 0], ["DELAY", 3, "RETRY", 9], ["TTL", 600, "RETRY", 7],
                ["IDEMPOTENCY", "key-%d" % i], ["HOLD"]][i % 6]
        ids.append(run("ADDJOB", "q%d" % (i % 3), b"body-%d\x00\xff" % i, 0, *opts).encode())
    run("GETJOB", "COUNT", 4, "FROM", "q0", "q1")
    run("NACK", ids[0])
    run("WORKING", ids[3])
    run("ENQUEUE", ids[5])                  # a held job released
    run("ACKJOB", ids[6])
    run("DELJOB", ids[7])
    run("FASTACK", ids[8])
    run("ADDJOB", "short", "gone", 0, "TTL", 1)
    advance(9000)                           # requeues, an expiry
    run("GETJOB", "COUNT", 2, "FROM", "q0")
    for jid in ids[9:14]:
        job = node.get_job(jid)
        if job is not None:
            job.nodes_delivered = node.holders.of((*PEERS[:1 + len(jid) % 2], node.myself_id))
    live = sorted(node.iter_jobs(), key=lambda j: j.id)
    out.append(fmt.encode_jobs(live))                           # columns, keys among them
    out.append(fmt.encode_jobs([j for j in live if j.idem_key is None][:16]))   # no keys
    out.append(fmt.encode_jobs([node.get_job(j) for j in ids[9:14] if node.get_job(j)]))  # rows
    run("ACKJOB", ids[10])
    return b"".join(out), clock.now


def loaded_jobs(data: bytes, now: int) -> dict:
    """What the loader makes of the file: its counts and every job's fields."""
    node = Node(Config(), Clock(), random.Random(8), commands=COMMANDS, strict=True)
    loader, torn = fmt.load_bytes(node, data, now)
    jobs = []
    for j in sorted(node.iter_jobs(), key=lambda j: j.id):
        jobs.append({
            "id": j.id.decode(), "queue": j.queue.hex(), "body": j.body.hex(),
            "state": j.state, "flags": j.flags, "repl": j.repl, "etime": j.etime,
            "ctime": j.ctime, "delay": j.delay, "retry": j.retry, "nacks": j.nacks,
            "additional_deliveries": j.additional_deliveries,
            "nodes_delivered": list(j.nodes_delivered or ()), "requeue_time": j.requeue_time,
            "idem_key": j.idem_key.hex() if j.idem_key is not None else None,
        })
    return {"torn": torn is not None, "stats": loader.stats, "jobs": jobs}


def spark_rows(path: Path) -> list:
    """The rows the ``disquette-aof`` reader decodes from the file (one
    partition, bodies as bytes), as JSON values."""
    rows = []
    for fr in plan([str(path)], 1 << 30, False):
        for batch in read_range(fr, True, False):
            for row in batch.to_pylist():
                rows.append({k: json_value(v) for k, v in row.items() if k != "file"})
    return rows


def json_value(v: object) -> object:
    if isinstance(v, bytes):
        return v.hex()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def main(out: str) -> None:
    data, now = make()
    folder = Path(out)
    (folder / AOF.name).write_bytes(data)
    expected = {"now": now, "loaded": loaded_jobs(data, now),
                "rows": spark_rows(folder / AOF.name)}
    # One job or row a line.
    text = json.dumps(expected).replace("}, {", "},\n {")
    (folder / EXPECTED.name).write_text(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
