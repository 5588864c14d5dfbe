# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the broker core and the commands ask of the cluster layer: every call,
typed, in one class. ``Node.cluster`` is one: cluster/cluster.py's ``Cluster``
(a subclass) on a node composed with its cluster bus (server/compose.py), and
this class itself, the null object, on a bare ``Node`` (unit tests, the core's
benchmark). Its answers are a lone node's: no other node to replicate to, ask,
tell or wait for, never leaving; the CLUSTER commands refuse, as Disque does
without a bus.

Compiled with the core (setup.py): a native base class here and a compiled
subclass in cluster/ make each call a vtable call, as a call into this module's
own methods would be.
"""

from __future__ import annotations

from typing import Final

from broker.client import Client
from broker.dispatch import CommandError
from broker.job import Job
from broker.queue import Queue
from protocol.resp import Error, Status

NO_BUS: Final = "ERR This node is not running the cluster bus"
NOREPL_NODES: Final = Error(
    "NOREPL Not enough reachable nodes for the requested replication level")


class ClusterError(Exception):
    """An admin call (CLUSTER MEET, FORGET) the cluster layer cannot apply; the
    text is the error reply without its ``ERR`` (Redis's words)."""


class ClusterHooks:
    """The cluster layer as the broker sees it; as is, a node without one."""

    def __init__(self) -> None:
        # Runs the cluster bus: CLUSTER commands work, HELLO says "cluster",
        # INFO cluster_enabled:1.
        self.enabled = False

    # ------------------------------------------------- what the request path asks
    def leaving(self) -> bool:
        """CLUSTER LEAVING yes: we hold no new copies and serve no GETJOB."""
        return False

    def reachable_count(self) -> int:
        """The nodes a job may be replicated to, this one included."""
        return 1

    # --------------------------------------------------- the commands' calls
    def replicate_new_job(self, client: Client, job: Job, timeout: int, is_async: bool,
                          external: bool) -> object:
        """ADDJOB with REPLICATE > 1, or with no copy kept here (``external``):
        the reply (the id for ASYNC), or BLOCKED (broker/node.py) until the
        copies are confirmed. ADDJOB asks only when enough nodes are reachable."""
        return NOREPL_NODES

    def known_add(self, client: Client, jid: bytes) -> object:
        """(ext) An ADDJOB retried with the IDEMPOTENCY key of job ``jid``: its
        id, or BLOCKED while that job's own ADDJOB still waits for its copies."""
        return Status(jid.decode())

    def ack_unknown_job(self, jid: bytes) -> None:
        """ACKJOB of an id not held here: spread the ack (a dummy ack)."""

    def try_job_gc(self, job: Job, now: int) -> None:
        """An acked job that other nodes hold: collect it once every holder
        knows (SETACK, GOTACK, DELJOB), or try again later."""

    def fastack(self, jid: bytes, job: Job | None) -> None:
        """FASTACK: tell whoever may hold it to delete it (best effort)."""

    def broadcast_working(self, job: Job) -> None:
        """WORKING: the other holders postpone their requeue too."""

    def broadcast_pause(self, q: Queue) -> None:
        """PAUSE ... BCAST: every reachable node pauses the queue the same way."""

    def hello_entries(self, myself_id: str, ip: str, port: int) -> list[list[bytes]]:
        """HELLO's [id, ip, port, priority] for every known node, this one
        first. A lone node lists itself at the address its config advertises
        (given by the caller), priority 1."""
        return [[myself_id.encode(), ip.encode(), b"%d" % port, b"1"]]

    # ------------------------------------------------- CLUSTER ... (admin)
    # Without a bus each refuses (NO_BUS), as the CLUSTER command does first.
    def meet(self, ip: str, bus_port: int, now: int) -> None:
        """CLUSTER MEET; ClusterError for an address the node table refuses."""
        raise CommandError(NO_BUS)

    def forget(self, node_id: str, now: int) -> None:
        """CLUSTER FORGET; ClusterError for ourselves or an unknown node."""
        raise CommandError(NO_BUS)

    def reset(self, hard: bool, now: int) -> None:
        """CLUSTER RESET: forget every node; HARD also drops every job and takes
        a new id (Node.myself_id follows)."""
        raise CommandError(NO_BUS)

    def set_leaving(self, leaving: bool, now: int) -> None:
        raise CommandError(NO_BUS)

    def save_config(self) -> None:
        """CLUSTER SAVECONFIG: write nodes.conf (an output, like any save)."""
        raise CommandError(NO_BUS)

    def nodes_lines(self) -> list[str]:
        """CLUSTER NODES, a line per node."""
        raise CommandError(NO_BUS)

    def cluster_info(self) -> dict[str, int | str]:
        """CLUSTER INFO's fields."""
        raise CommandError(NO_BUS)

    # ------------------------------------------------ the core's calls (lifecycle)
    def job_queued(self, job: Job) -> None:
        """A job went into its queue here: the other holders may hear it
        (QUEUED), a node that asked for jobs of that queue may get it."""

    def job_released(self, job: Job) -> None:
        """(ext) A held job that other nodes hold was released here."""

    def before_requeue(self, job: Job) -> None:
        """Its timer re-queues the job: the QUEUED that follows is announced."""

    def send_willqueue(self, job: Job) -> int:
        """The job is re-queued soon: warn the other holders (WILLQUEUE); how
        many ms later than planned this node re-queues it (their order)."""
        return 0

    def job_deleted(self, job: Job) -> None:
        """A job left this node (any reason)."""

    def jobs_flushed(self) -> None:
        """Every job left this node (DEBUG FLUSHALL, CLUSTER RESET HARD)."""

    # ------------------------------------------------------ the Node's calls
    def client_closed(self, client: Client) -> None:
        """The client is gone: its waiting ADDJOBs answer nobody."""

    def need_jobs(self, q: Queue, now: int) -> None:
        """Clients wait on the empty queue q: ask other nodes for jobs."""

    def tick(self, now: int) -> None:
        """Timers: node table, replication retries, federation."""

    def next_deadline(self) -> int | None:
        """When tick has something to do next (ms), or None."""
        return None

    def config_changed(self, name: str) -> None:
        """CONFIG SET changed directive ``name`` (Node.config_changed)."""
