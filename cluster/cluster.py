"""The cluster layer of one node: glue between the Node (jobs, queues), the
Membership (node table, failure detection) and the job state machines
(replication, requeue, acks, federation), sans-IO.

The broker core and the commands call it as broker/cluster_hooks.py declares
(``Cluster`` is a ``ClusterHooks``: job_queued, try_job_gc, need_jobs,
replicate_new_job, CLUSTER MEET...). Bus messages come in through ``handle_message``;
everything to send, save or drop goes to ``self.out`` as the Membership's output
objects (Send, DropLink, SaveConfig, NodeEvent), drained by whoever runs the node
(server/driver.py, for the process's bus in server/bus.py or the simulator in
cluster/sim.py).

Job-layer messages are not turned into Sends one by one: ``send``/``send_many``
queue (type, payload) per destination and ``drain`` makes one Send per node out
of them (a BATCH message when there are several), so a shell that drains once per
event-loop turn sends one frame per peer per turn however many jobs that turn
replicated, acked or requeued. ``has_output`` tells whether a drain is due.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from broker import lifecycle
from broker.client import Client
from broker.cluster_hooks import ClusterHooks
from broker.job import ACKED, FLAG_BCAST_QUEUED, Holders, Job, holders_of
from broker.node import Node
from broker.queue import Queue
from cluster import acks, federation, replication, requeue
from cluster.membership import ClusterNode, Membership
from cluster.outputs import NodeEvent, SaveConfig, Send
from protocol import bus as B

log = logging.getLogger("cluster")

MEMBERSHIP_TICK_MS = 100
# A deleted replicated job is remembered this long, so that a REPLJOB or YOURJOBS
# delayed in the network (or in a reconnect backlog) cannot bring it back.
TOMBSTONE_MS = 30_000
MAX_TOMBSTONES = 1_000_000


def _remember(ids: dict, jid: bytes, until: int) -> None:
    """A job id remembered until a time (tombstones, heard_queued), bounded."""
    ids.pop(jid, None)      # re-insert at the end: expiry order = insertion order
    ids[jid] = until
    if len(ids) > MAX_TOMBSTONES:
        del ids[next(iter(ids))]


def _forget_expired(ids: dict, now: int) -> None:
    while ids:
        jid = next(iter(ids))
        if ids[jid] > now:
            break
        del ids[jid]


def _same_items(a: list, b: list) -> bool:
    """Two batches of the same messages: the same payload objects, in order (as
    send_many queues one payload for several nodes)."""
    if len(a) != len(b):
        return False
    for i in range(len(a)):
        if a[i] is not b[i]:
            return False
    return True


def announced_address(config: Any) -> tuple[str, int, int]:
    """(ip, port, bus port) peers are told: the announce directives when set."""
    ip = config.cluster_announce_ip
    if not ip and config.bind and config.bind[0] not in ("0.0.0.0", "::", "*"):
        ip = config.bind[0]
    return (ip or "", config.cluster_announce_port or config.client_port,
            config.cluster_announce_bus_port or config.effective_bus_port)


class Cluster(ClusterHooks):
    def __init__(self, broker: Node, membership: Membership) -> None:
        super().__init__()
        self.enabled = True
        self.broker = broker
        self.m = membership
        # The membership's node table and our own entry in it: the same objects
        # for the membership's whole life (RESET HARD renames our entry, it does
        # not replace it), held here so that every message sent does not look
        # them up again.
        self.nodes: dict[str, ClusterNode] = membership.nodes
        self.me: ClusterNode = membership.myself
        self.out: list = []
        # Job-layer messages not drained yet: node id -> [type, payload, type, ...]
        # (the flat layout of a BATCH payload), in the order they were sent.
        self.batches: dict[str, list] = {}
        self.pending: dict[bytes, replication.PendingAdd] = {}
        # client -> the oldest and the newest of its sync ADDJOBs still waiting
        # (replies in order: replication._wait_in_order)
        self.waiting_adds: dict[Any, list[replication.PendingAdd]] = {}
        self.dummy_acks: dict[bytes, set[str]] = {}  # dummy ack id -> nodes that said "unknown"
        self.hungry: set[bytes] = set()          # queues with clients waiting for jobs
        self.interest: dict[bytes, dict] = {}    # queue -> {asking node: until}
        self.importing = False
        self.push_pending: set[bytes] = set()    # queues with jobs for nodes that asked
        self.tombstones: dict[bytes, int] = {}   # deleted job id -> until (insertion order)
        # the tombstones of jobs deleted acked: a copy moved to us later is
        # answered with SETACK (federation.on_yourjobs), not bounced for 30 s
        self.acked_tombstones: dict[bytes, int] = {}
        # (ext) job id -> until: a QUEUED or WILLQUEUE for a job we did not hold
        # yet. Its REPLJOB may come later (another link): a held copy is then
        # released at once (requeue.released_early).
        self.heard_queued: dict[bytes, int] = {}
        self.next_membership_tick = 0
        self.events: list[NodeEvent] = []
        # all_holders' tuple and the reachable peers (reachable_sorted's tuple,
        # the same object until the node table changes) it was made for
        self._holders: Holders = ()
        self._holders_of: tuple[str, ...] | None = None
        broker.cluster = self
        broker.myself_id = membership.node_id

    # ------------------------------------------------------------- plumbing
    @property
    def myself_id(self) -> str:
        return self.m.node_id

    def _collect(self, outputs: list) -> None:
        for o in outputs:
            if isinstance(o, NodeEvent):
                self.on_event(o)
            self.out.append(o)

    # ----------------------------------------------- admin (CLUSTER ..., CONFIG SET)
    # Membership changes go through here, so their outputs join the others.
    def meet(self, ip: str, bus_port: int, now: int) -> None:
        self._collect(self.m.meet(ip, bus_port, now))

    def forget(self, node_id: str, now: int) -> None:
        self._collect(self.m.forget(node_id, now))

    def reset(self, hard: bool, now: int) -> None:
        """CLUSTER RESET: forget every node; HARD also drops every job and takes
        a new id."""
        if hard:
            lifecycle.flush_all(self.broker)
        else:
            replication.abort_all(self, replication.NOREPL_REMOVED)
        self.pending.clear()            # ASYNC ones too: no peer left to confirm
        self._collect(self.m.reset(hard, now=now))
        self.broker.myself_id = self.m.node_id     # job ids carry the new one

    def set_leaving(self, leaving: bool, now: int) -> None:
        if leaving and not self.m.leaving:
            # A leaving node holds no new copies: ADDJOBs waiting for theirs end.
            replication.abort_all(self, replication.NOREPL_LEAVING)
        self._collect(self.m.set_leaving(leaving, now))

    def config_changed(self, name: str) -> None:
        """Directives the cluster layer applies at run time (from
        Node.config_changed, after CONFIG SET)."""
        if name == "cluster-node-timeout":
            self.m.node_timeout = self.broker.config.cluster_node_timeout
        elif name.startswith("cluster-announce"):
            self._collect(self.m.set_address(*announced_address(self.broker.config)))

    def save_config(self) -> None:
        self.out.append(SaveConfig(self.m.to_nodes_conf()))

    def nodes_lines(self) -> list[str]:
        return self.m.nodes_lines()

    def cluster_info(self) -> dict[str, int | str]:
        return self.m.cluster_info()

    def leaving(self) -> bool:
        return self.m.leaving

    @property
    def has_output(self) -> bool:
        return bool(self.out or self.batches)

    def drain(self) -> list:
        if self.batches:
            self._flush_batches()
        out, self.out = self.out, []
        return out

    def _flush_batches(self) -> None:
        # The address is read now, not when the message was queued: a node deleted
        # since then gets nothing (the membership already closed its link), one that
        # moved gets it at its new address.
        nodes = self.nodes
        m = self.m     # m.message(...) is a native call; a bound method's is not
        out = self.out
        # Destinations queued the same messages (a REPLJOB to every copy's holder)
        # share one message object, which the shell encodes once.
        made: list[tuple[list, B.BusMessage]] = []
        for nid, items in self.batches.items():
            n = nodes.get(nid)
            if n is None or not n.ip:
                continue
            msg = None
            for other, earlier in made:
                if _same_items(items, other):
                    msg = earlier
                    break
            if msg is None:
                if len(items) == 2:
                    msg = m.message(items[0], items[1])
                else:
                    msg = m.message(B.BATCH, items)
                made.append((items, msg))
            out.append(Send(nid, n.ip, n.bus_port, msg))
        self.batches = {}

    def send(self, node_id: str, mtype: int, payload: Any) -> None:
        n = self.nodes.get(node_id)
        if n is None or not n.ip:
            return
        self.m.stats_sent += 1
        b = self.batches.get(node_id)
        if b is None:
            self.batches[node_id] = [mtype, payload]
        else:
            b.append(mtype)
            b.append(payload)

    def send_many(self, node_ids: Iterable[str], mtype: int, payload: Any) -> None:
        """The same message to several nodes (the payload object is shared)."""
        nodes = self.nodes
        batches = self.batches
        me = self.me.id
        sent = 0
        for nid in node_ids:
            n = nodes.get(nid)
            if n is None or not n.ip or nid == me:
                continue
            sent += 1
            b = batches.get(nid)
            if b is None:
                batches[nid] = [mtype, payload]
            else:
                b.append(mtype)
                b.append(payload)
        self.m.stats_sent += sent

    def all_holders(self, peers: tuple[str, ...]) -> Holders:
        """Our id and ``peers`` (from reachable_sorted): the holders of a job
        replicated to every reachable node (REPLICATE n on n nodes), the same
        for every such ADDJOB until the node table changes, so looked up once
        then."""
        if peers is not self._holders_of or self.me.id not in self._holders:
            self._holders = holders_of((self.me.id, *peers))
            self._holders_of = peers
        return self._holders

    def reachable_count(self) -> int:
        return len(self.m.reachable_sorted()) + 1

    def others_of(self, job: Job) -> list[str]:
        """Other nodes that may hold a copy of job."""
        nd = job.nodes_delivered
        if not nd:
            return []
        me = self.me.id
        return [n for n in nd if n != me]     # sorted, as nd is: simulations replay exactly

    # ---------------------------------------------------------------- inputs
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
        checked it); a type without a handler here is ignored. The commonest
        types first; a chain rather than a table of functions, so that the
        compiled build calls each handler natively. An exception here is our
        bug (Node.internal_error): it fails a test or a simulation; in
        production it is logged and counted, and the rest of the batch is
        still handled."""
        try:
            if mtype == B.REPLJOB:
                replication.on_repljob(self, sender, payload, now)
            elif mtype == B.GOTJOB:
                replication.on_gotjob(self, sender, payload, now)
            elif mtype == B.SETACK:
                acks.on_setack(self, sender, payload, now)
            elif mtype == B.GOTACK:
                acks.on_gotack(self, sender, payload, now)
            elif mtype == B.DELJOB:
                acks.on_deljob(self, sender, payload, now)
            elif mtype == B.WILLQUEUE:
                requeue.on_willqueue(self, sender, payload, now)
            elif mtype == B.QUEUED:
                requeue.on_queued(self, sender, payload, now)
            elif mtype == B.WORKING:
                requeue.on_working(self, sender, payload, now)
            elif mtype == B.ENQUEUE:
                replication.on_enqueue(self, sender, payload, now)
            elif mtype == B.NEEDJOBS:
                federation.on_needjobs(self, sender, payload, now)
            elif mtype == B.YOURJOBS:
                federation.on_yourjobs(self, sender, payload, now)
            elif mtype == B.PAUSE:
                federation.on_pause(self, sender, payload, now)
        except Exception as e:
            self.broker.internal_error(e, "the %s handler" % B.TYPE_NAMES.get(mtype, mtype))

    def job_deleted(self, job: Job) -> None:
        if job.nodes_delivered:
            self.tombstone(job.id)
            if job.state == ACKED:
                _remember(self.acked_tombstones, job.id, self.broker.clock() + TOMBSTONE_MS)
        if self.pending:
            replication.job_deleted(self, job)

    def jobs_flushed(self) -> None:
        replication.jobs_flushed(self)

    def tombstone(self, jid: bytes) -> None:
        _remember(self.tombstones, jid, self.broker.clock() + TOMBSTONE_MS)

    def is_tombstoned(self, jid: bytes) -> bool:
        return jid in self.tombstones

    def note_queued_unknown(self, jid: bytes) -> None:
        _remember(self.heard_queued, jid, self.broker.clock() + TOMBSTONE_MS)

    def tick(self, now: int) -> None:
        _forget_expired(self.tombstones, now)
        _forget_expired(self.acked_tombstones, now)
        _forget_expired(self.heard_queued, now)
        if now >= self.next_membership_tick:    # the node table wants ~10 Hz
            self.next_membership_tick = now + MEMBERSHIP_TICK_MS
            self._collect(self.m.tick(now))
        replication.tick(self, now)
        federation.tick(self, now)

    def next_deadline(self) -> int | None:
        if self.push_pending:
            return self.broker.clock()
        return self.broker.clock() + 50 if self.pending else None

    def on_event(self, ev: NodeEvent) -> None:
        self.events.append(ev)
        if len(self.events) > 1000:
            del self.events[:500]

    # ------------------------------------------- the Node's calls (see node.py)
    def replicate_new_job(self, client: Client, job: Job, timeout: int, is_async: bool,
                          external: bool) -> object:
        return replication.replicate_new_job(self, client, job, timeout, is_async, external)

    def known_add(self, client: Client, jid: bytes) -> object:
        return replication.known_add(self, client, jid)

    def job_queued(self, job: Job) -> None:
        requeue.job_queued(self, job)
        if self.interest and not self.importing:
            # Pushed on the next tick: the command that queued it answers first.
            self.push_pending.add(job.queue)

    def job_released(self, job: Job) -> None:
        requeue.job_released(self, job)

    def before_requeue(self, job: Job) -> None:
        job.flags |= FLAG_BCAST_QUEUED      # a timer requeue is announced (QUEUED)

    def send_willqueue(self, job: Job) -> int:
        return requeue.send_willqueue(self, job)

    def broadcast_working(self, job: Job) -> None:
        self.send_many(self.others_of(job), B.WORKING, job.id)

    def try_job_gc(self, job: Job, now: int) -> None:
        acks.try_job_gc(self, job, now)

    def ack_unknown_job(self, jid: bytes) -> None:
        acks.ack_unknown_job(self, jid)

    def fastack(self, jid: bytes, job: Job | None) -> None:
        p = self.pending.get(jid)
        if p is not None and p.external:
            # No copy here to delete: the pending ADDJOB ends all the same.
            replication.abort(self, p, replication.NOREPL_REMOVED)
        acks.fastack(self, jid, job)

    def need_jobs(self, q: Queue, now: int) -> None:
        """Clients wait on empty q: NEEDJOBS, for as many jobs as they wait for
        (federation.need_jobs counts them on the queue)."""
        federation.need_jobs(self, q, now)

    def broadcast_pause(self, q: Queue) -> None:
        self.send_many(self.m.reachable_ids(), B.PAUSE, [q.name, q.flags])

    def hello_entries(self, myself_id: str, ip: str, port: int) -> list[list[bytes]]:
        # The node table has our id and the address we announce.
        return [[nid.encode(), ip.encode(), b"%d" % port, b"%d" % prio]
                for nid, ip, port, prio in self.m.hello_entries()]

    def link_up(self, node_id: str, now: int) -> None:
        self._collect(self.m.link_up(node_id, now))

    def link_down(self, node_id: str, now: int) -> None:
        self._collect(self.m.link_down(node_id, now))

    def client_closed(self, client: Client) -> None:
        replication.client_closed(self, client)
