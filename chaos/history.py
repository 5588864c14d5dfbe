"""The history of a chaos run: one JSON object a line, written as the run
goes (so a crashed run still leaves what happened) and read back by the
checker and the report (``python -m chaos check HISTORY`` re-checks a run).

The first line is the run's ``meta``; every other line has ``t`` (seconds
since the run started, monotonic) and ``type``:

======================  ================================================================
type (phase)            fields
======================  ================================================================
meta                    format, version, started_at (UTC, ISO 8601), then free keys:
                        scenario, seed, nodes {name: address}, args, ...
add (invoke)            op, node, queue, value (the job body, unique in the run),
                        replicate, retry (seconds), client
add (ok)                op, id
add (fail)              op, error: the add definitely did not happen (an error reply)
add (info)              op, error: unknown outcome (timeout, connection lost)
deliver                 id, value, node, queue, client, drain (true during the
                        final drain), nacks, additional_deliveries
ack                     id, node, fast (FASTACK), result (the integer reply) or error
nack                    id, node, result or error
working                 id, node, result (retry seconds) or error
fault (start)           fault (number), name, detail {...}
fault (stop)            fault, then what it measured as it stopped (packet-loss:
                        packets_seen, packets_dropped)
disk                    node, what the node did about a disk or power fault
                        (chaos/disk.py): repaired, loaded, refused (message,
                        offset), fixed (status), misconf, writable, exited,
                        power off, dropped (size, synced, kept, dropped bytes);
                        no misconf, still running: the fault did not bite
heal                    every fault stopped
drain (start)           the workload stopped producing; consumers empty every queue
drain (end)             complete: true when every queue was seen empty
leftover                node, jobs {id: state} still held by the node after healing
error                   message: a workload thread failed (a bug in the run, not
                        in the cluster; the run is not valid)
end                     the run finished writing
======================  ================================================================

An ``add`` with no ``ok``/``fail``/``info`` by the end is indeterminate.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

FORMAT = "disquette-chaos-history"
VERSION = 1

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
START, STOP, END = "start", "stop", "end"


class HistoryError(ValueError):
    """The file is not a history this version can read."""


class HistoryWriter:
    """Appends events to ``path`` as they happen (each line flushed); safe to
    share between the workload's threads (op numbers and lines never mix).

    ``clock`` (monotonic seconds) is injected so crafted histories in tests
    carry the times they need."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.monotonic,
                 started_at: str | None = None, **meta: Any) -> None:
        self.path = Path(path)
        self.clock = clock
        self.t0 = clock()
        self._ops = 0
        self._faults = 0
        self._lock = threading.RLock()
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")
        started_at = started_at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
        self._write({"type": "meta", "format": FORMAT, "version": VERSION,
                     "started_at": started_at, **meta})

    def _write(self, event: dict[str, Any]) -> dict[str, Any]:
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._file.flush()
        return event

    def event(self, type: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            return self._write({"t": round(self.clock() - self.t0, 6), "type": type, **fields})

    # -- adds ----------------------------------------------------------------
    def add_invoked(self, *, node: str, queue: str, value: str, replicate: int | None = None,
                    retry: float | None = None, client: str | None = None) -> int:
        """Record an ADDJOB about to be sent; returns the op number."""
        with self._lock:
            self._ops += 1
            op = self._ops
            self.event("add", phase=INVOKE, op=op, node=node, queue=queue, value=value,
                       replicate=replicate, retry=retry, client=client)
        return op

    def add_ok(self, op: int, id: str) -> None:
        self.event("add", phase=OK, op=op, id=id)

    def add_failed(self, op: int, error: str) -> None:
        self.event("add", phase=FAIL, op=op, error=error)

    def add_indeterminate(self, op: int, error: str) -> None:
        self.event("add", phase=INFO, op=op, error=error)

    # -- consumers -----------------------------------------------------------
    def delivered(self, *, id: str, value: str, node: str, queue: str | None = None,
                  client: str | None = None, drain: bool = False, nacks: int | None = None,
                  additional_deliveries: int | None = None) -> None:
        self.event("deliver", id=id, value=value, node=node, queue=queue, client=client,
                   drain=drain, nacks=nacks, additional_deliveries=additional_deliveries)

    def acked(self, id: str, node: str, result: int | None = None, *, fast: bool = False,
              error: str | None = None) -> None:
        self.event("ack", id=id, node=node, fast=fast, result=result, error=error)

    def nacked(self, id: str, node: str, result: int | None = None, *,
               error: str | None = None) -> None:
        self.event("nack", id=id, node=node, result=result, error=error)

    def working(self, id: str, node: str, result: int | None = None, *,
                error: str | None = None) -> None:
        self.event("working", id=id, node=node, result=result, error=error)

    # -- faults and phases ---------------------------------------------------
    def fault_started(self, name: str, **detail: Any) -> int:
        with self._lock:
            self._faults += 1
            fault = self._faults
            self.event("fault", phase=START, fault=fault, name=name, detail=detail)
        return fault

    def fault_stopped(self, fault: int, **outcome: Any) -> None:
        """``outcome``: what the fault did, measured as it stopped (e.g. the
        packets a packet-loss fault dropped)."""
        self.event("fault", phase=STOP, fault=fault, **outcome)

    def healed(self) -> None:
        self.event("heal")

    def drain_started(self) -> None:
        self.event("drain", phase=START)

    def drain_ended(self, complete: bool) -> None:
        self.event("drain", phase=END, complete=complete)

    def leftovers(self, node: str, jobs: dict[str, str]) -> None:
        self.event("leftover", node=node, jobs=jobs)

    def workload_error(self, message: str) -> None:
        self.event("error", message=message)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self.event("end")
                self._file.close()

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class History:
    meta: dict[str, Any]
    events: list[dict[str, Any]]
    path: Path | None = None
    torn: bool = False              # the last line was cut short (the run died writing it)
    ended: bool = False             # an ``end`` event was written
    warnings: list[str] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return max((e["t"] for e in self.events), default=0.0)


def parse_history(lines: list[str], path: Path | None = None) -> History:
    where = str(path) if path else "history"
    records: list[dict[str, Any]] = []
    torn = False
    warnings: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                torn = True
                warnings.append(f"{where}:{number}: last line cut short, ignored")
                break
            raise HistoryError(f"{where}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise HistoryError(f"{where}:{number}: not an event (an object with a type)")
        if records and not isinstance(record.get("t"), (int, float)):
            raise HistoryError(f"{where}:{number}: event without a time 't'")
        records.append(record)
    if not records or records[0]["type"] != "meta" or records[0].get("format") != FORMAT:
        raise HistoryError(f"{where}:1: not a {FORMAT} (no meta line)")
    if records[0].get("version") != VERSION:
        raise HistoryError(f"{where}:1: history version {records[0].get('version')!r}, "
                           f"this reader knows {VERSION}")
    events = records[1:]
    return History(meta=records[0], events=events, path=path, torn=torn,
                   ended=any(e["type"] == "end" for e in events), warnings=warnings)


def read_history(path: str | Path) -> History:
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        return parse_history(f.readlines(), path)
