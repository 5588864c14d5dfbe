"""Disk and power faults (issue 25), on real nodes with ``appendonly yes``.

Each verb takes the scenario's ``Faults`` (chaos/scenarios.py: its history and
cluster) and a seeded generator, damages what a disk would damage, and records
two things in the history: the fault (``fault`` start/stop, drawn as a band)
and what the node did about it, as ``disk`` events (``node``, ``what``, ...):

- ``aof-truncate``: the node killed, its AOF cut at a seeded point (mid-record
  too); on restart it cuts the torn record itself (``repaired``: aof-load-truncated
  yes) or refuses naming the offset (``refused``: the scenario starts it with
  aof-load-truncated no every other time); a cut on a record boundary just
  ``loaded``.
- ``aof-bitflip``: the node killed, a seeded record written twice in a row and a
  seeded bit flipped in a later record (not the last: that is a torn tail); the
  node must refuse to start naming the file and the flipped record's offset.
- ``disk-full``: the AOF made unwritable while the node runs: RLIMIT_FSIZE of the
  running pid set to the file's size (``prlimit``; writes fail with EFBIG, which
  needs nothing mounted, unlike a small loop-mounted file system for ENOSPC). Under everysec the node answers ``-MISCONF`` (``misconf``)
  until the limit goes (``writable``); under always it exits at its first failed
  write, acknowledging nothing it could not log (``exited``), and is restarted.
- ``power-loss``: every node killed at once and each AOF cut back to its size at
  the node's last fsync (the page cache survives kill -9: server/aof.py keeps
  that size in a side file for tests, ``DISQUETTE_TEST_SYNCED_SIZE``), keeping a
  seeded part of the unsynced tail as a torn write (``dropped``). Deliveries
  are paused a while before (``backlog``), so that acknowledged jobs wait in
  their queues when the power goes: what the cut costs shows as lost.

The AOF faults also record, as ``discarded``, the ids of the jobs the node's
file held and the damaged file no longer gives back (``live_jobs``): the
checker names, for a lost job, the damaged disks that had its copies.

After the damage the node is recovered as an operator would (``boot``): start
it; if it refuses, ``disquette-check-aof --fix --force`` (``fixed``) and start
it again; it rejoins with its nodes.conf.
"""

from __future__ import annotations

import os
import random
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from chaos.launcher import SYNCED_SUFFIX, Node, child_env, wait_for
from chaos.workload import QUEUES
from disquette.aof_codec import (
    FILE_HEADER_SIZE, JOB_RECORDS, REC_ACK, REC_DEL, REC_EXPIRED, REC_FLUSHALL, REC_HEADER_SIZE,
    AOFError, Scanner, decode_ids, decode_jobs,
)
from disquette.job_record import ID

AOF_NAME = "disque.aof"                 # appendfilename's default

# What a power loss may cost under each appendfsync policy, in seconds of
# acknowledged adds before the cut (the checker's power_loss figures): always
# nothing; everysec a second of writes, two when an fsync outlasts its second
# (aof_delayed_fsync, as in Redis); no: no bound (the OS writes back when it likes).
POWER_LOSS_WINDOW: dict[str, float | None] = {"always": 0.0, "everysec": 2.0, "no": None}
LOG_ROOM = 16 * 1024            # bytes a full disk leaves the node's log (disk-full)


def aof_path(node: Node) -> Path:
    return node.dir / AOF_NAME


def records(path: Path) -> list[tuple[int, int]]:
    """(start, end) of each whole, checksummed record of the file, in order,
    up to the first damage."""
    out: list[tuple[int, int]] = []
    scanner = Scanner()
    try:
        for offset, payload in scanner.feed(path.read_bytes()):
            out.append((offset, offset + REC_HEADER_SIZE + len(payload)))
    except AOFError:
        pass
    return out


def live_jobs(path: Path) -> set[str]:
    """The ids of the jobs a node loads from the file (not deleted, acked or
    expired by a later record), read up to its first damage, as the node does."""
    alive: set[bytes] = set()
    scanner = Scanner()
    try:
        for _, payload in scanner.feed(path.read_bytes()):
            kind = payload[0]
            if kind in JOB_RECORDS:
                alive.update(decode_jobs(payload)[ID])
            elif kind in (REC_DEL, REC_ACK, REC_EXPIRED):
                alive.difference_update(decode_ids(payload))
            elif kind == REC_FLUSHALL:
                alive.clear()
    except AOFError:
        pass
    return {bytes(jid).decode() for jid in alive}


def discarded(faults: Any, fault: int, node: Node, before: set[str]) -> None:
    """Record the jobs ``node`` had in its file (``before``) that its damaged
    file no longer gives back (a ``disk`` event, ``discarded``): the checker
    names, for each job it finds lost, the damaged disks that held a copy."""
    gone = before - live_jobs(aof_path(node))
    faults.history.event("disk", node=node.name, what="discarded", fault=fault,
                         count=len(gone), jobs=sorted(gone))


def truncate(path: Path, offset: int) -> None:
    os.truncate(path, offset)


def flip_bit(path: Path, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(bit // 8)
        byte = f.read(1)[0]
        f.seek(bit // 8)
        f.write(bytes([byte ^ (1 << bit % 8)]))


def duplicate(path: Path, start: int, end: int) -> None:
    """The record at ``start:end`` written twice in a row."""
    data = path.read_bytes()
    path.write_bytes(data[:end] + data[start:end] + data[end:])


def check_aof(path: Path, *flags: str) -> subprocess.CompletedProcess:
    """``disquette-check-aof FLAGS PATH``, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "server.check_aof", *flags, str(path)],
                          env=child_env(), capture_output=True, text=True, timeout=120)


# -- starting a node after damage ----------------------------------------------------
def _loaded(node: Node) -> bool:
    """The node finished loading its AOF (or exited: a refusal)."""
    if not node.is_running():
        return True
    with node.admin(1) as r:
        info = r.info("persistence")
    return info.get("loading") == 0 and info.get("aof_state") == "on"


def _log_size(node: Node) -> int:
    log = node.log_path
    return log.stat().st_size if log.exists() else 0


def _log_since(node: Node, seen: int) -> str:
    with open(node.log_path, "rb") as f:
        f.seek(seen)
        return f.read().decode(errors="replace")


def _spawn(node: Node, args: list[str] = ()) -> int:
    """Start ``node``'s process (with ``args`` added this once); returns
    where its log stood before."""
    seen = _log_size(node)
    base = node.args
    node.args = [*base, *args]
    try:
        node.launch()
    finally:
        node.args = base
    return seen


def _outcome(node: Node, seen: int, timeout: float = 60.0) -> str | None:
    """Once the node loaded its AOF or exited: None if it runs, else the log
    line saying why it refused."""
    wait_for(lambda: _loaded(node), timeout, f"{node.name} to load its AOF")
    if node.is_running():
        return None
    lines = [line for line in _log_since(node, seen).splitlines()
             if not line.startswith("=== ")]        # the launcher's own line
    said = [line for line in lines if "append only file" in line and "offset" in line]
    return (said or lines or [f"exited with {node.proc.returncode}"])[0]


def boot(faults: Any, nodes: list[Node], args: list[str] = ()) -> None:
    """Start nodes whose AOF was damaged (all at once), as an operator would,
    recording what each did: ``repaired`` (it cut a torn tail), ``loaded``, or
    ``refused`` then ``fixed`` (disquette-check-aof --fix --force) and started
    again."""
    history = faults.history
    seen = {node.name: _spawn(node, args) for node in nodes}
    for node in nodes:
        refusal = _outcome(node, seen[node.name])
        if refusal is None:
            m = re.search(r"Truncating it to (\d+) bytes", _log_since(node, seen[node.name]))
            if m:
                history.event("disk", node=node.name, what="repaired", offset=int(m.group(1)))
            else:
                history.event("disk", node=node.name, what="loaded")
            continue
        m = re.search(r"offset (\d+)", refusal)
        history.event("disk", node=node.name, what="refused", message=refusal,
                      offset=int(m.group(1)) if m else None)
        fixed = check_aof(aof_path(node), "--fix", "--force")
        history.event("disk", node=node.name, what="fixed", status=fixed.returncode,
                      output=fixed.stdout.strip().splitlines()[-1:])
        refusal = _outcome(node, _spawn(node))
        if refusal is not None:
            raise RuntimeError(f"{node.name} still refuses to start after "
                               f"disquette-check-aof --fix --force: {refusal}")


def _rejoin(faults: Any, node: Node) -> None:
    faults.cluster.wait_formed(60, [node])


# -- the verbs -------------------------------------------------------------------------
def aof_truncate(faults: Any, node: Node, rng: random.Random, load_truncated: bool = True) -> int:
    """Kill ``node``, cut its AOF at a seeded point; the fault's end starts it
    (with aof-load-truncated no unless ``load_truncated``) and recovers it."""
    node.kill()
    path = aof_path(node)
    before = live_jobs(path)
    size = path.stat().st_size
    cut = rng.randrange(FILE_HEADER_SIZE, size + 1) if size > FILE_HEADER_SIZE else size
    boundary = cut == FILE_HEADER_SIZE or any(end == cut for _, end in records(path))
    truncate(path, cut)
    args = [] if load_truncated else ["--aof-load-truncated", "no"]

    def undo() -> None:
        boot(faults, [node], args)
        _rejoin(faults, node)
    fault = faults._start("aof-truncate", undo, node=node.name, size=size, cut=cut,
                          mid_record=not boundary, load_truncated=load_truncated)
    discarded(faults, fault, node, before)
    return fault


def aof_bitflip(faults: Any, node: Node, rng: random.Random) -> int:
    """Kill ``node``; in its AOF write a seeded record twice and flip a
    seeded bit of a later record (header or payload, never the last one's
    payload: that would be a torn tail). The node must refuse to start naming
    that record's offset; the fault's end recovers it."""
    node.kill()
    path = aof_path(node)
    before = live_jobs(path)
    spans = records(path)
    detail: dict[str, Any] = {"node": node.name}
    if len(spans) >= 3:
        start, end = spans[rng.randrange(len(spans) - 2)]
        duplicate(path, start, end)
        detail["duplicated"] = [start, end]
        spans = records(path)
        first = next(i for i, (s, _) in enumerate(spans) if s >= end)
        start, end = spans[rng.randrange(first + 1, len(spans) - 1)]
        bit = rng.randrange(start * 8, end * 8)
        flip_bit(path, bit)
        detail.update(flipped_bit=bit, expected_offset=start)

    def undo() -> None:
        boot(faults, [node])
        _rejoin(faults, node)
    fault = faults._start("aof-bitflip", undo, **detail)
    discarded(faults, fault, node, before)
    return fault


def _misconf(node: Node) -> str | None:
    """-MISCONF, if the node refuses writes (NACK of an unknown id: refused
    like ADDJOB while the AOF cannot be written, else a harmless 0)."""
    with node.admin(1) as r:
        try:
            r.execute_command("NACK", "D-00000000-000000000000000000000000-0000")
        except Exception as exc:  # noqa: BLE001 - the reply is what we look for
            if str(exc).startswith("MISCONF"):
                return str(exc)
    return None


def disk_full(faults: Any, node: Node, policy: str) -> int:
    """The node's AOF can no longer grow (RLIMIT_FSIZE at its current size,
    or a little more: its log keeps room). Waits until the node shows it:
    -MISCONF (everysec, no) or its exit (always); the fault's end gives the
    space back."""
    pid = node.proc.pid
    # The limit holds for every file the process writes: its log (opened for
    # appending) keeps some room, to say what the node did.
    seen = _log_size(node)
    size = max(aof_path(node).stat().st_size, seen + LOG_ROOM)
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))
    fault = faults._start("disk-full", lambda: _space_back(faults, node, pid, hard),
                          node=node.name, limit=size, policy=policy)
    history = faults.history
    if policy == "always":
        try:
            wait_for(lambda: not node.is_running(), 15, f"{node.name} to exit on a failed write")
        except TimeoutError:
            history.event("disk", node=node.name, what="still running")
            return fault
        m = re.search(r"Can't write to the append-only file: [^\n]*", _log_since(node, seen))
        history.event("disk", node=node.name, what="exited", code=node.proc.returncode,
                      message=m.group(0) if m else None)
    else:
        try:
            reply = wait_for(lambda: _misconf(node), 15, f"{node.name} to answer -MISCONF")
            history.event("disk", node=node.name, what="misconf", reply=reply)
        except TimeoutError:
            history.event("disk", node=node.name, what="no misconf")
    return fault


def _space_back(faults: Any, node: Node, pid: int, hard: int) -> None:
    if node.is_running() and node.proc.pid == pid:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        wait_for(lambda: _misconf(node) is None, 15, f"{node.name} to write its AOF again")
        faults.history.event("disk", node=node.name, what="writable")
    else:
        boot(faults, [node])                # a new process: no limit
        _rejoin(faults, node)


def synced_size(node: Node) -> int:
    """The AOF's size at the node's last fsync (server/aof.py's test hook)."""
    try:
        return int((node.dir / (AOF_NAME + SYNCED_SUFFIX)).read_text())
    except (OSError, ValueError):
        return FILE_HEADER_SIZE             # never fsynced: the empty file it made


def power_loss(faults: Any, rng: random.Random, policy: str) -> int:
    """Every node killed at once; each AOF cut back to its last fsync, a
    seeded part of the unsynced tail kept (a write torn by the cut). The
    fault's end powers the cluster back on."""
    window = POWER_LOSS_WINDOW[policy]
    fault = faults._start("power-loss", lambda: _power_on(faults), policy=policy,
                          tolerates_s=window)
    nodes = [n for n in faults.cluster.nodes if n.is_running()]
    for node in nodes:
        node.proc.send_signal(signal.SIGKILL)   # all first: at once
    for node in nodes:
        node.kill()                         # waits for it
    faults.history.event("disk", what="power off", nodes=[n.name for n in nodes])
    for node in faults.cluster.nodes:
        path = aof_path(node)
        size = path.stat().st_size if path.exists() else 0
        synced = min(synced_size(node), size)
        kept = rng.randint(0, size - synced) if rng.random() < 0.5 else 0
        if synced + kept < size:
            truncate(path, synced + kept)
        faults.history.event("disk", node=node.name, what="dropped", size=size, synced=synced,
                             kept=kept, dropped=size - synced - kept)
    return fault


def backlog(faults: Any) -> int:
    """Deliveries paused on every node (``PAUSE queue out bcast``): the jobs
    acknowledged meanwhile wait in their queues, so a power loss has
    undelivered work to lose (consumers keep up otherwise)."""
    node = next(n for n in faults.cluster.nodes if n.is_running())
    with node.admin() as r:
        for queue in QUEUES:
            r.execute_command("PAUSE", queue, "out", "bcast")

    def undo() -> None:
        for n in faults.cluster.nodes:
            with n.admin() as r:
                for queue in QUEUES:
                    r.execute_command("PAUSE", queue, "none")
    return faults._start("paused out", undo, queues=list(QUEUES))


def _power_on(faults: Any) -> None:
    boot(faults, [n for n in faults.cluster.nodes if not n.is_running()])
    faults.cluster.wait_formed(60)


# -- the checker's figures ----------------------------------------------------------------
def power_loss_lines(result: Any) -> str:
    """The power-loss figures of a CheckResult, for the run's summary."""
    lines = []
    for p in getattr(result, "power_loss", None) or []:
        promise = ("no bound" if p["tolerates_s"] is None else
                   "nothing" if not p["tolerates_s"] else f"{p['tolerates_s']:g} s")
        lines.append(f"power loss (appendfsync {p['policy']}): {p['lost']} of "
                     f"{p['acked_before']} acknowledged adds lost, window "
                     f"{p['window_s']:.3f} s (the policy's promise: {promise})")
    return "\n".join(lines)
