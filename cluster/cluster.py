# compiled: mypyc (setup.py builds each module whose first line this is)
"""The cluster layer of one node, sans-IO: the Node's cluster hooks, composed
of the Membership (node table, failure detection) and the job layer's
sub-protocols, each owning its state: replication (REPLJOB/GOTJOB), acks
(SETACK/GOTACK/DELJOB), requeue (WILLQUEUE/QUEUED/WORKING), federation
(NEEDJOBS/YOURJOBS/PAUSE), over the tombstones and the outbox below them.

The broker core and the commands call it as broker/cluster_hooks.py declares
(``Cluster`` is a ``ClusterHooks``: job_queued, try_job_gc, need_jobs,
replicate_new_job, CLUSTER MEET...); each call goes to the sub-protocol that
owns what it changes. Bus messages come in through ``handle_message``, each
job-layer type to its sub-protocol's handler. Everything to send, save or drop
waits in the outbox (cluster/outbox.py: the Membership's outputs, Send, DropLink,
SaveConfig, NodeEvent, and the job layer's messages batched per peer), drained
by whoever runs the node (server/driver.py, for the process's bus in
server/bus.py or the simulator in server/sim/simulation.py).
"""

from __future__ import annotations

import logging
from typing import Any

from broker import lifecycle
from broker.client import Client
from broker.cluster_hooks import ClusterHooks
from broker.job import Job
from broker.node import Node
from broker.queue import Queue
from cluster.acks import Acks
from cluster.federation import Federation
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.outputs import SaveConfig
from cluster.replication import NOREPL_LEAVING, NOREPL_REMOVED, Replication
from cluster.requeue import Requeue
from cluster.tombstones import Tombstones
from protocol import bus as B

log = logging.getLogger("cluster")

MEMBERSHIP_TICK_MS = 100


def announced_address(config: Any) -> tuple[str, int, int]:
    """(ip, port, bus port) peers are told: the announce directives when set."""
    ip = config.cluster_announce_ip
    if not ip and config.bind and config.bind[0] not in ("0.0.0.0", "::", "*"):
        ip = config.bind[0]
    return (ip or "", config.cluster_announce_port or config.client_port,
            config.cluster_announce_bus_port or config.effective_bus_port)


class Cluster(ClusterHooks):
    """Owns when the membership ticks next; the rest is its parts'."""

    def __init__(self, broker: Node, membership: Membership) -> None:
        super().__init__()
        self.enabled = True
        self.broker = broker
        self.m = membership
        self.outbox = Outbox(membership)
        self.tombstones = Tombstones()
        self.requeue = Requeue(broker, membership, self.outbox, self.tombstones)
        self.replication = Replication(broker, membership, self.outbox, self.tombstones,
                                       self.requeue)
        self.acks = Acks(broker, membership, self.outbox, self.tombstones, self.replication)
        self.federation = Federation(broker, membership, self.outbox, self.tombstones)
        # The federation's interest table (the same dict: it never replaces
        # it), read on every job queued: a typed field here, where reading it
        # off the interpreted Federation was a generic attribute lookup.
        self.asked_for_jobs: dict[bytes, dict[str, int]] = self.federation.interest
        self.next_membership_tick = 0
        broker.cluster = self
        # Our id is the node table's; the Node keeps the copy job ids are made of.
        broker.myself_id = membership.node_id

    def _collect(self, outputs: list) -> None:
        """The membership's outputs, in order with the rest (most inputs give
        none: a loop over nothing costs less than an extend)."""
        out = self.outbox.out
        for o in outputs:
            out.append(o)

    # ------------------------------------------------------------ the driver's
    def handle_message(self, link: Any, msg: B.BusMessage, now: int) -> None:
        m = self.m
        self._collect(m.handle_message(link, msg, now))
        mtype = msg.type
        if msg.malformed:
            # Payloads protocol/bus.py rejected: the peer's fault, only those
            # messages are dropped.
            self.broker.stats["malformed_bus_messages"] += msg.malformed
            log.warning("Dropped %d malformed %s message(s) from %s", msg.malformed,
                        msg.type_name, msg.sender)
            if mtype != B.BATCH:
                return
        if mtype >= B.FIRST_JOB_TYPE and m.is_known(msg.sender):
            sender = msg.sender
            if mtype == B.BATCH:
                items: list = msg.payload
                m.stats_received += len(items) // 2 - 1   # each counts as a message
                for i in range(0, len(items), 2):
                    self._run(sender, items[i], items[i + 1], now)
            else:
                self._run(sender, mtype, msg.payload, now)
        if self.broker.ready_queues:
            self.broker.serve_ready_queues()

    def _run(self, sender: str, mtype: int, payload: Any, now: int) -> None:
        """One job-layer message, of the shape its type has (protocol/bus.py
        checked it), to the sub-protocol that owns its type; a type without a
        handler here is ignored. The commonest types first; a chain rather than
        a table of functions, so that the compiled build calls each handler
        natively. An exception here is our bug (Node.internal_error): it fails
        a test or a simulation; in production it is logged and counted, and the
        rest of the batch is still handled."""
        try:
            if mtype == B.REPLJOB:
                self.replication.on_repljob(sender, payload, now)
            elif mtype == B.GOTJOB:
                self.replication.on_gotjob(sender, payload, now)
            elif mtype == B.SETACK:
                self.acks.on_setack(sender, payload, now)
            elif mtype == B.GOTACK:
                self.acks.on_gotack(sender, payload, now)
            elif mtype == B.DELJOB:
                self.acks.on_deljob(sender, payload, now)
            elif mtype == B.WILLQUEUE:
                self.requeue.on_willqueue(sender, payload, now)
            elif mtype == B.QUEUED:
                self.requeue.on_queued(sender, payload, now)
            elif mtype == B.WORKING:
                self.requeue.on_working(sender, payload, now)
            elif mtype == B.ENQUEUE:
                self.replication.on_enqueue(sender, payload, now)
            elif mtype == B.NEEDJOBS:
                self.federation.on_needjobs(sender, payload, now)
            elif mtype == B.YOURJOBS:
                self.federation.on_yourjobs(sender, payload, now)
            elif mtype == B.PAUSE:
                self.federation.on_pause(sender, payload, now)
        except Exception as e:
            self.broker.internal_error(e, "the %s handler" % B.TYPE_NAMES.get(mtype, mtype))

    def link_up(self, node_id: str, now: int) -> None:
        self._collect(self.m.link_up(node_id, now))

    def link_down(self, node_id: str, now: int) -> None:
        self._collect(self.m.link_down(node_id, now))

    # --------------------------------------------------- the hooks: timers
    def tick(self, now: int) -> None:
        self.tombstones.tick(now)
        self.requeue.tick(now)
        if now >= self.next_membership_tick:    # the node table wants ~10 Hz
            self.next_membership_tick = now + MEMBERSHIP_TICK_MS
            self._collect(self.m.tick(now))
        self.replication.tick(now)
        self.federation.tick(now)

    def next_deadline(self) -> int | None:
        if self.federation.push_pending:
            return self.broker.clock()
        return self.broker.clock() + 50 if self.replication.pending else None

    # ------------------------------------- the hooks: admin (CLUSTER, CONFIG SET)
    # Membership changes go through here, so their outputs join the others.
    def meet(self, ip: str, bus_port: int, now: int) -> None:
        self._collect(self.m.meet(ip, bus_port, now))

    def forget(self, node_id: str, now: int) -> None:
        self._collect(self.m.forget(node_id, now))

    def reset(self, hard: bool, now: int) -> None:
        if hard:
            lifecycle.flush_all(self.broker)
        else:
            self.replication.abort_all(NOREPL_REMOVED)
        self.replication.forget_pending()
        self._collect(self.m.reset(hard, now=now))
        self.broker.myself_id = self.m.node_id     # job ids carry the new one

    def set_leaving(self, leaving: bool, now: int) -> None:
        if leaving and not self.m.leaving:
            # A leaving node holds no new copies: ADDJOBs waiting for theirs end.
            self.replication.abort_all(NOREPL_LEAVING)
        self._collect(self.m.set_leaving(leaving, now))

    def config_changed(self, name: str) -> None:
        if name == "cluster-node-timeout":
            self.m.node_timeout = self.broker.config.cluster_node_timeout
        elif name.startswith("cluster-announce"):
            self._collect(self.m.set_address(*announced_address(self.broker.config)))

    def save_config(self) -> None:
        self.outbox.out.append(SaveConfig(self.m.to_nodes_conf()))

    def nodes_lines(self) -> list[str]:
        return self.m.nodes_lines()

    def cluster_info(self) -> dict[str, int | str]:
        return self.m.cluster_info()

    def hello_entries(self, myself_id: str, ip: str, port: int) -> list[list[bytes]]:
        # The node table has our id and the address we announce.
        return [[nid.encode(), nip.encode(), b"%d" % nport, b"%d" % prio]
                for nid, nip, nport, prio in self.m.hello_entries()]

    # --------------------------------------- the hooks: the request path's
    def leaving(self) -> bool:
        return self.m.leaving

    def reachable_count(self) -> int:
        return len(self.m.reachable_sorted()) + 1

    def replicate_new_job(self, client: Client, job: Job, timeout: int, is_async: bool,
                          external: bool) -> object:
        return self.replication.replicate_new_job(client, job, timeout, is_async, external)

    def known_add(self, client: Client, jid: bytes) -> object:
        return self.replication.known_add(client, jid)

    def client_closed(self, client: Client) -> None:
        self.replication.client_closed(client)

    def job_queued(self, job: Job) -> None:
        if job.nodes_delivered:
            self.requeue.job_queued(job)
        # A call into the federation (interpreted in both builds) only when a
        # node asked for jobs.
        if self.asked_for_jobs:
            self.federation.job_queued(job)

    def job_released(self, job: Job) -> None:
        self.requeue.job_released(job)

    def before_requeue(self, job: Job) -> None:
        self.requeue.before_requeue(job)

    def send_willqueue(self, job: Job) -> int:
        return self.requeue.send_willqueue(job)

    def broadcast_working(self, job: Job) -> None:
        self.requeue.broadcast_working(job)

    def job_deleted(self, job: Job) -> None:
        if job.nodes_delivered:
            self.tombstones.job_deleted(job, self.broker.clock())
        if self.replication.pending:
            self.replication.job_deleted(job)

    def jobs_flushed(self) -> None:
        self.replication.jobs_flushed()

    def try_job_gc(self, job: Job, now: int) -> None:
        self.acks.try_job_gc(job, now)

    def ack_unknown_job(self, jid: bytes) -> None:
        self.acks.ack_unknown_job(jid)

    def fastack(self, jid: bytes, job: Job | None) -> None:
        self.replication.fastacked(jid)     # (no copy here to delete: it ends all the same)
        self.acks.fastack(jid, job)

    def need_jobs(self, q: Queue, now: int) -> None:
        """Clients wait on empty q: NEEDJOBS, for as many jobs as they wait for
        (Federation.need_jobs counts them on the queue)."""
        self.federation.need_jobs(q, now)

    def broadcast_pause(self, q: Queue) -> None:
        self.federation.broadcast_pause(q)
