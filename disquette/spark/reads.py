"""Taking jobs for Spark: fetch on the driver, carry the jobs inside the
partitions (a retried task reads the same rows), keep them from being
re-queued while Spark works (WORKING), acknowledge once Spark is done.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable

from disquette import Client, DisqueError, ReplyError

log = logging.getLogger("disquette.spark")

FETCH_CHUNK = 1000       # jobs per GETJOB
ACK_CHUNK = 1000         # ids per ACKJOB / NACK


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


class Fetched:
    """Jobs taken from the cluster, as rows ``(queue, id, body, nacks,
    additional_deliveries)`` with the node that delivered each."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.node_of: dict[str, str] = {}

    def add(self, node: str, reply: Any, body_type: str) -> int:
        for entry in reply or ():
            queue, jid, raw = _text(entry[0]), _text(entry[1]), bytes(entry[2])
            body: Any = raw if body_type == "binary" else raw.decode("utf-8", "replace")
            nacks = int(entry[4]) if len(entry) >= 7 else 0
            deliveries = int(entry[6]) if len(entry) >= 7 else 0
            self.rows.append((queue, jid, body, nacks, deliveries))
            self.node_of[jid] = node
        return len(reply or ())

    def by_node(self, ids: Iterable[str] | None = None) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for jid in (self.node_of if ids is None else ids):
            groups.setdefault(self.node_of.get(jid, ""), []).append(jid)
        return groups


def fetch(client: Client, queues: list[str], limit: int, body_type: str,
          timeout_ms: int) -> Fetched:
    """Take up to ``limit`` jobs: GETJOB NOHANG on every node in turn (no
    federation hop needed), then, if none had any, one GETJOB waiting
    ``timeout_ms`` on the current node (which lets federation bring jobs)."""
    out = Fetched()
    try:
        client.hello()
    except DisqueError as e:
        log.warning("disquette: HELLO failed (%s); reading from %s only", e, client.node)
    nodes = client.nodes
    active = list(nodes)
    while active and len(out.rows) < limit:
        for node in list(active):
            want = min(FETCH_CHUNK, limit - len(out.rows))
            if want <= 0:
                break
            try:
                [reply] = client.execute_many(
                    [("GETJOB", "NOHANG", "COUNT", want, "WITHCOUNTERS", "FROM", *queues)],
                    node=node)
            except DisqueError as e:
                log.warning("disquette: cannot read from %s: %s", node, e)
                active.remove(node)
                continue
            if isinstance(reply, ReplyError):
                log.warning("disquette: GETJOB on %s: %s", node, reply)
                active.remove(node)
            elif out.add(node, reply, body_type) < want:
                active.remove(node)
    if not out.rows:
        for job in client.get_jobs(*queues, count=min(FETCH_CHUNK, limit), timeout_ms=timeout_ms):
            out.rows.append((job.queue, job.id, job.raw if body_type == "binary"
                             else job.raw.decode("utf-8", "replace"),
                             job.nacks or 0, job.additional_deliveries or 0))
            out.node_of[job.id] = job.node or client.node
    return out


def _per_node(client: Client, groups: dict[str, list[str]], command: str,
              chunk: int) -> int:
    """Send ``command id...`` in chunks to each node (any node if it fails)."""
    done = 0
    for node, ids in groups.items():
        for start in range(0, len(ids), chunk):
            part = ids[start:start + chunk]
            try:
                done += _on(client, node, command, part)
            except DisqueError as e:
                log.warning("disquette: %s of %d jobs on %s failed: %s", command, len(part), node, e)
    return done


def _on(client: Client, node: str, command: str, ids: list[str]) -> int:
    """One multi-id command, on ``node`` first, then wherever the client is."""
    if command == "ACKJOB":
        return client.ack_job(*ids, node=node or None)
    if command == "NACK":
        return client.nack_job(*ids, node=node or None)
    raise ValueError(command)


def ack(client: Client, groups: dict[str, list[str]]) -> int:
    return _per_node(client, groups, "ACKJOB", ACK_CHUNK)


def nack(client: Client, groups: dict[str, list[str]]) -> int:
    return _per_node(client, groups, "NACK", ACK_CHUNK)


class KeepAlive:
    """A thread sending WORKING for jobs in flight, every half RETRY, so no
    node re-queues them while a micro-batch runs (up to half their TTL: the
    broker refuses WORKING after that)."""

    def __init__(self, client: Client, interval: float = 0.25) -> None:
        self.client = client
        self.interval = interval
        self._due: dict[str, tuple[str, float]] = {}   # id -> (node, renew at)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, node_of: dict[str, str]) -> None:
        """Postpone the jobs now and keep them postponed."""
        jobs = {jid: (node, 0.0) for jid, node in node_of.items()}
        with self._lock:
            self._due.update(jobs)
        self._renew(jobs)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="disquette-keepalive",
                                            daemon=True)
            self._thread.start()

    def discard(self, ids: Iterable[str]) -> None:
        with self._lock:
            for jid in ids:
                self._due.pop(jid, None)

    def _renew(self, jobs: dict[str, tuple[str, float]]) -> None:
        groups: dict[str, list[str]] = {}
        for jid, (node, _) in jobs.items():
            groups.setdefault(node, []).append(jid)
        now = time.monotonic()
        renewed: dict[str, tuple[str, float] | None] = {}
        for node, ids in groups.items():
            try:
                replies = self.client.execute_many([("WORKING", j) for j in ids], node=node)
            except DisqueError as e:
                log.warning("disquette: WORKING on %s failed: %s", node, e)
                for jid in ids:
                    renewed[jid] = (node, now + 1.0)   # try again in a second
                continue
            for jid, retry in zip(ids, replies):
                if isinstance(retry, int) and retry > 0:
                    renewed[jid] = (node, now + retry / 2)
                else:  # RETRY 0 (never re-queued), NOJOB, TOOLATE: nothing to renew
                    renewed[jid] = None
        with self._lock:
            for jid, value in renewed.items():
                if jid in self._due:     # not acked meanwhile
                    if value is None:
                        del self._due[jid]
                    else:
                        self._due[jid] = value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            with self._lock:
                due = {j: v for j, v in self._due.items() if v[1] <= now}
            if due:
                self._renew(due)

    def stop(self) -> None:
        self._stop.set()
