"""The way in from Disque: a Disque 1.0-rc1 AOF written again as a Disquette
AOF (``disquette-check-aof --import-disque``, server/check_aof.py).

protocol/disque_aof.py reads Disque's file; each job it still holds becomes a
Job (broker/job.py) and the file is written by the node's own encoder
(broker/aof_format.py), so a node loads it with ``appendonly yes`` as any AOF
of ours. What changes on the way:

- the expire time: Disque's is in unix seconds, ours in ms;
- the flags: Disque's DELIVERED bit (4) is our FLAG_DELIVERED; its other
  bits (broadcasts in flight) are not state;
- the holders: Disque keeps, when it loads a job, only the holders its
  nodes.conf knows. Given Disque's nodes.conf (``disque_nodes``) the import
  does the same and the node keeps Disque's node id and peers (``nodes.conf``
  written beside the AOF), so a job's holders are the same nodes as before;
  without it the importing node is the job's one holder;
- a DELAY not yet elapsed is recorded as the job's requeue time (creation +
  DELAY), so the job is queued when its delay ends; Disque itself, loading
  its AOF, forgets it for a RETRY 0 job (which is then never queued).

Jobs come back ``active`` and are re-queued by their RETRY timers, as when
Disque loads its own AOF; jobs already expired are dropped by the node when
it loads the file.
"""

from __future__ import annotations

import os
import random
from typing import NamedTuple

from broker import aof_format as fmt
from broker.job import FLAG_DELIVERED, HolderLists, Job
from cluster.membership import Membership
from protocol import disque_aof
from server.aof_files import OSFiles

DISQUE_BUS_OFFSET = 10000       # Disque's bus port: its port + 10000
# Disque's nodes.conf flags a Disquette node keeps at start; the others
# (fail, fail?, pfail) a fresh start measures again.
_KEPT_NODE_FLAGS = ("myself", "noaddr", "leaving")


class DisqueNodes(NamedTuple):
    """A Disque node's nodes.conf: its own id, and the ids it knew."""

    myself: str
    known: frozenset
    text: str           # the same table as a Disquette nodes.conf


def read_disque_nodes(text: str) -> DisqueNodes:
    """Disque's nodes.conf (``id ip:port flags ping-sent pong-received
    link-state`` a line, one of them ``myself``); ValueError naming the line
    that is not one."""
    lines = []
    my_port = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] == "vars":
            continue
        if len(parts) != 6:
            raise ValueError(f"Disque nodes.conf line {lineno}: expected 6 fields "
                             f"(id ip:port flags ping pong state), found {len(parts)}")
        nid, addr, flags = parts[0], parts[1], parts[2].split(",")
        if "handshake" in flags:
            continue
        host, colon, port = addr.rpartition(":")
        if not colon or not port.isdigit():
            raise ValueError(f"Disque nodes.conf line {lineno}: bad address {addr!r}")
        if "myself" in flags:
            my_port = int(port)
        kept = [f for f in flags if f in _KEPT_NODE_FLAGS] or ["noflags"]
        lines.append(f"{nid} {host}:{port}@{int(port) + DISQUE_BUS_OFFSET} {','.join(kept)}")
    # Our own nodes.conf parser checks the ids and the one myself line.
    table = Membership.from_nodes_conf("\n".join(lines), ip="", port=my_port,
                                       bus_port=my_port + DISQUE_BUS_OFFSET,
                                       rng=random.Random(0))
    mine = table.myself
    return DisqueNodes(mine.id, frozenset(table.nodes), table.to_nodes_conf())


def job_of(d: disque_aof.DisqueJob, known: frozenset | None, shared: HolderLists) -> Job:
    """The Job a Disque job is here (see the module's docstring); its holders
    one of ``shared``'s lists."""
    job = Job(d.id, d.queue, d.body, d.state, d.repl, d.etime * 1000, d.ctime, d.delay,
              d.retry)
    if d.flags & disque_aof.FLAG_DELIVERED:
        job.flags = FLAG_DELIVERED
    job.nacks = d.nacks
    job.additional_deliveries = d.additional_deliveries
    if known is not None:
        holders = [n for n in d.nodes_delivered if n in known]
        if holders:
            job.nodes_delivered = shared.of(holders)
    if d.delay:
        # ctime: ms * 1,000,000 + counter. A delay already over is in the
        # past: the loader then re-queues by RETRY, from its own now.
        job.requeue_time = d.ctime // 1_000_000 + d.delay * 1000
    return job


class Imported(NamedTuple):
    jobs: list                  # the Jobs written
    aof: bytes                  # the Disquette AOF's bytes


def convert(data: bytes, nodes: DisqueNodes | None = None) -> Imported:
    """A Disque AOF's bytes as a Disquette AOF's; DisqueAOFError (with the
    offset) if it is damaged or cut."""
    known = nodes.known if nodes is not None else None
    shared = HolderLists()
    jobs = [job_of(d, known, shared) for d in disque_aof.live_jobs(data)]
    return Imported(jobs, fmt.file_header() + fmt.encode_jobs(jobs))


def disque_aof_hint(path: str, head: bytes) -> str | None:
    """For a file that is not a Disquette AOF (``head``: its first bytes): if
    it is a Disque one, what to do with it (else None)."""
    if not disque_aof.looks_like_disque_aof(head):
        return None
    return (f"{path} is a Disque AOF: import it with disquette-check-aof --import-disque "
            f"{path} --out NEW_FILE (docs/operations.md, Coming from Disque)")


def write_new(path: str, data: bytes) -> None:
    """Write ``path``, which must not exist, durably (temp file, fsync,
    rename); FileExistsError if it does."""
    if os.path.lexists(path):
        raise FileExistsError(f"{path} exists: move it away first")
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        OSFiles().unlink_quietly(tmp)
        raise
    OSFiles.fsync_dir(path)
