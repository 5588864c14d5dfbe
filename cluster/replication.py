# compiled: mypyc (setup.py builds each module whose first line this is)
"""Synchronous replication of new jobs: REPLJOB / GOTJOB / ENQUEUE (SPEC section 8).

ADDJOB with REPLICATE n > 1 sends REPLJOB (the job plus the nodes that may hold it)
to n-1 shuffled reachable peers and answers the client once n copies are confirmed
by GOTJOB. Every 50 ms without enough copies it adds one more peer and re-sends
REPLJOB to every holder that has not confirmed. On timeout the client gets
-NOREPL and the copies made are deleted, best effort (DELJOB).

External replication (over 75% memory, or leaving): no local copy; once the
copies are confirmed one holder is told to queue the job (ENQUEUE).

(ext) A retried ADDJOB with the IDEMPOTENCY key of an add still pending here
follows it (``known_add``): it gets the same outcome, the id once the copies
are confirmed or the same error, and a failed add forgets its key.
"""

from __future__ import annotations

from typing import cast

from broker import draws, lifecycle
from broker.client import Client
from broker.job import (
    ACKED, FLAG_HELD, HELD, QUEUED, WAIT_REPL, Holders, Job, job_to_fields,
)
from broker.node import BLOCKED, Node
from broker.queue import PAUSED_IN
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.requeue import Requeue
from cluster.subprotocol import SubProtocol
from cluster.tombstones import Tombstones
from disquette import job_record as field
from protocol import bus as B
from protocol.resp import Error, Status

WIDEN_EVERY_MS = 50
ASYNC_WIDEN_MAX_MS = 1000
NOREPL_TIMEOUT = Error("NOREPL Timeout reached before replicating to the requested "
                       "number of nodes")
# Disque's words when a job waiting for its copies is deleted (TTL, DELJOB,
# FASTACK, DEBUG FLUSHALL, CLUSTER RESET): the producer must never get the id.
NOREPL_REMOVED = Error("NOREPL job removed (expired?) before the requested replication "
                       "level was achieved")
NOREPL_LEAVING = Error("NOREPL Not enough reachable nodes for the requested replication "
                       "level, since I'm unable to hold a copy of the message for the "
                       "following reason: I'm leaving the cluster")


class PendingAdd:
    """An ADDJOB whose copies are not all confirmed yet."""

    __slots__ = ("job", "client", "deadline", "is_async", "external", "next_widen",
                 "widen_every", "reply", "followers", "later")

    def __init__(self, job: Job, client: Client | None, deadline: int, is_async: bool,
                 external: bool, next_widen: int) -> None:
        self.job = job
        self.client = client            # None once answered (ASYNC) or disconnected
        self.deadline = deadline        # ms, 0 = no timeout
        self.is_async = is_async
        self.external = external        # no local copy
        self.next_widen = next_widen
        self.widen_every = WIDEN_EVERY_MS   # doubles for ASYNC adds: see tick
        self.reply: object = None       # set when it ends, until the client gets it
        # (ext) retries of this add (IDEMPOTENCY key), None while there is none
        self.followers: list[PendingAdd] | None = None
        # The same client's next sync ADDJOB waiting for its reply (_wait_in_order).
        self.later: PendingAdd | None = None


def _nodes(s: Holders | None) -> Holders:
    """A pending job's holders (replicate_new_job sets both lists), typed."""
    return cast("Holders", s)


def _waited(p: PendingAdd) -> bool:
    """Someone still waits for this add's outcome: its client, or a retry."""
    return p.client is not None or bool(p.followers)


class Replication(SubProtocol):
    """Owns ``pending`` (job id -> PendingAdd: the ADDJOBs of this node whose
    copies are not all confirmed, ASYNC ones included) and ``waiting_adds``
    (client -> the oldest and the newest of its sync ADDJOBs still waiting,
    whose replies leave in order: _wait_in_order)."""

    def __init__(self, broker: Node, membership: Membership, outbox: Outbox,
                 tombstones: Tombstones, requeue: Requeue) -> None:
        super().__init__(broker, membership, outbox, tombstones)
        self.requeue = requeue
        self.pending: dict[bytes, PendingAdd] = {}
        self.waiting_adds: dict[Client, list[PendingAdd]] = {}
        # all_holders' tuple and the reachable peers (reachable_sorted's tuple,
        # the same object until the node table changes) it was made for
        self._holders: Holders = ()
        self._holders_of: tuple[str, ...] | None = None

    # ------------------------------------------------------------ the replies
    def _answer(self, p: PendingAdd, reply: object) -> None:
        """The waiting client's reply. A client may have several sync ADDJOBs
        waiting (a pipeline of them, see server/resp.py): their replies leave in
        the order the commands came, whatever order their copies are confirmed in.
        The add's followers (retries with its IDEMPOTENCY key) get the same reply;
        if it is an error, the key is forgotten: a retry must create the job."""
        followers = p.followers
        if followers:
            p.followers = None
            for f in followers:
                self._answer(f, reply)
        job = p.job
        if reply.__class__ is Error:
            lifecycle.forget_key(self.broker, job)
        client = p.client
        if client is None:
            return
        p.client = None
        p.reply = reply
        waiting = self.waiting_adds[client]
        outbox = self.broker.outbox
        first: PendingAdd | None = waiting[0]
        while first is not None and first.reply is not None:
            outbox.append((client, first.reply))
            first = first.later
        if first is None:
            del self.waiting_adds[client]
        else:
            waiting[0] = first

    def _wait_in_order(self, client: Client, p: PendingAdd) -> None:
        """p's reply goes to client after those of its earlier sync ADDJOBs
        (_answer): a client's waiting adds are a chain through PendingAdd.later,
        of which waiting_adds keeps [oldest, newest] (no queue object made and
        dropped for each ADDJOB)."""
        waiting = self.waiting_adds.get(client)
        if waiting is None:
            self.waiting_adds[client] = [p, p]
        else:
            waiting[1].later = p
            waiting[1] = p

    def client_closed(self, client: Client) -> None:
        waiting = self.waiting_adds.pop(client, None)
        p = waiting[0] if waiting is not None else None
        while p is not None:
            p.client = None
            p = p.later

    # ---------------------------------------------------------------- ADDJOB
    def known_add(self, client: Client, jid: bytes) -> object:
        """(ext) An ADDJOB whose IDEMPOTENCY key names job `jid`: if that job's own
        sync ADDJOB still waits here for its copies, this one waits for the same
        outcome (BLOCKED, answered in order with the client's other adds); else
        the id, at once."""
        p = self.pending.get(jid)
        if p is None or p.is_async:
            return Status(jid.decode())
        f = PendingAdd(p.job, client, 0, False, p.external, 0)
        if p.followers is None:
            p.followers = [f]
        else:
            p.followers.append(f)
        self._wait_in_order(client, f)
        return BLOCKED

    def all_holders(self, peers: tuple[str, ...]) -> Holders:
        """Our id and ``peers`` (from reachable_sorted): the holders of a job
        replicated to every reachable node (REPLICATE n on n nodes), the same
        for every such ADDJOB until the node table changes, so looked up once
        then."""
        me = self.m.node_id
        if peers is not self._holders_of or me not in self._holders:
            self._holders = self.broker.holders.of((me, *peers))
            self._holders_of = peers
        return self._holders

    def replicate_new_job(self, client: Client, job: Job, timeout: int, is_async: bool,
                          external: bool) -> object:
        broker = self.broker
        now: int = broker.clock()
        peers = self.m.reachable_sorted()
        wanted = job.repl if external else job.repl - 1
        # Every reachable peer (REPLICATE 3 on 3 nodes): no choice to make.
        chosen = peers if wanted == len(peers) else draws.sample(broker.rng, peers, wanted)
        holders = broker.holders
        if external:
            job.nodes_delivered = holders.of(chosen)
            job.nodes_confirmed = ()
        else:
            me = self.m.node_id
            if chosen is peers:
                job.nodes_delivered = self.all_holders(peers)
            else:
                job.nodes_delivered = holders.of((me, *chosen))
            job.nodes_confirmed = holders.of((me,))
        p = PendingAdd(job, None if is_async else client, now + timeout if timeout else 0,
                       is_async, external, now + WIDEN_EVERY_MS)
        self.pending[job.id] = p
        if not is_async:
            self._wait_in_order(client, p)
        if not external:
            lifecycle.add_pending(broker, job)    # wait-repl until confirmed (or ASYNC below)
        self.outbox.send_many(chosen, B.REPLJOB, wire_fields(job, now))
        if is_async:
            if not external:
                lifecycle.activate(broker, job, now)
            return Status(job.id.decode())
        return BLOCKED

    def _achieved(self, p: PendingAdd, now: int) -> None:
        broker = self.broker
        job = p.job
        del self.pending[job.id]
        if p.external and not job.flags & FLAG_HELD:   # (ext) held: queued at release
            # Have one holder queue it; we keep nothing.
            target = draws.choice(broker.rng, _nodes(job.nodes_confirmed))     # sorted
            self.outbox.send(target, B.ENQUEUE, job.id)
        elif not p.is_async:
            lifecycle.activate(broker, job, now)
        if _waited(p):                      # not an ASYNC add, answered at once
            self._answer(p, Status(job.id.decode()))

    # ------------------------------------------------------- ending it early
    def abort(self, p: PendingAdd, reply: object) -> None:
        """End a pending ADDJOB before its copies are confirmed: the waiting client
        gets `reply` (an error, never the id), the copies made are deleted (DELJOB,
        best effort), and ours."""
        job = p.job
        broker = self.broker
        self.pending.pop(job.id, None)
        self.outbox.send_many(self.outbox.others_of(job), B.DELJOB, job.id)
        if not p.external and broker.is_registered(job):
            lifecycle.delete(broker, job)
        self._answer(p, reply)

    def abort_all(self, reply: object) -> None:
        """Every pending ADDJOB still waiting for its client (CLUSTER RESET, the
        node starting to leave); ASYNC ones, answered already, are left to finish."""
        for p in [p for p in self.pending.values() if _waited(p)]:
            self.abort(p, reply)

    def forget_pending(self) -> None:
        """CLUSTER RESET: ASYNC adds too stop replicating: no peer left to confirm."""
        self.pending.clear()

    def fastacked(self, jid: bytes) -> None:
        """FASTACK here of a job whose ADDJOB of ours is pending with no copy
        here (external): that add ends all the same (-NOREPL)."""
        p = self.pending.get(jid)
        if p is not None and p.external:
            self.abort(p, NOREPL_REMOVED)

    def deleted_elsewhere(self, jid: bytes) -> None:
        """A holder deleted a job we hold no copy of (DELJOB): an ADDJOB of
        ours for it (replicated externally), still pending, ends (-NOREPL)."""
        p = self.pending.get(jid)
        if p is not None:
            self.abort(p, NOREPL_REMOVED)

    def job_deleted(self, job: Job) -> None:
        """Our copy of a job was deleted (TTL, DELJOB, FASTACK, ack GC...). If its
        ADDJOB is still pending, it ends here: acked already, the job was accepted
        (as Disque on SETACK); otherwise the client gets -NOREPL."""
        p = self.pending.get(job.id)
        if p is None or p.job is not job:
            return
        del self.pending[job.id]
        if not _waited(p):
            return                          # ASYNC: answered at once
        if job.state == ACKED:
            self._answer(p, Status(job.id.decode()))
            return
        self.outbox.send_many(self.outbox.others_of(job), B.DELJOB, job.id)
        self._answer(p, NOREPL_REMOVED)

    def jobs_flushed(self) -> None:
        """DEBUG FLUSHALL, CLUSTER RESET HARD: every job goes, pending ones too."""
        for p in list(self.pending.values()):
            del self.pending[p.job.id]
            if _waited(p):
                self.outbox.send_many(self.outbox.others_of(p.job), B.DELJOB, p.job.id)
                self._answer(p, NOREPL_REMOVED)

    # ---------------------------------------------------------------- timers
    def tick(self, now: int) -> None:
        if not self.pending:
            return
        broker = self.broker
        outbox = self.outbox
        for p in list(self.pending.values()):
            job = p.job
            if job.state == ACKED:
                # A replica was delivered, processed and acked before we heard
                # enough GOTJOBs: the job was accepted, say so.
                del self.pending[job.id]
                self._answer(p, Status(job.id.decode()))
                continue
            if job.etime <= now:
                # Expired first (a copy held elsewhere only: ours expires by its timer).
                self.abort(p, NOREPL_REMOVED)
                continue
            if p.deadline and now >= p.deadline:
                del self.pending[job.id]
                if p.is_async:
                    continue                # live job: stop widening, keep it
                outbox.send_many(outbox.others_of(job), B.DELJOB, job.id)
                if not p.external:
                    lifecycle.delete(broker, job)
                self._answer(p, NOREPL_TIMEOUT)
                continue
            if now >= p.next_widen:
                # A client waiting for its copies widens every 50 ms, as Disque's
                # clientsCronHandleDelayedJobReplication does. An ASYNC add keeps
                # replicating in the background (SPEC section 3) but backs off
                # (50, 100, 200... up to 1 s): re-sending every 50 ms while the
                # GOTJOBs queue behind a burst of ASYNC adds multiplied the bus
                # traffic (4 REPLJOBs per job at -P 16).
                p.next_widen = now + p.widen_every
                if p.is_async:
                    p.widen_every = min(p.widen_every * 2, ASYNC_WIDEN_MAX_MS)
                delivered = _nodes(job.nodes_delivered)
                spare = sorted(set(self.m.reachable_ids()) - set(delivered))
                if spare:
                    delivered = job.nodes_delivered = broker.holders.with_holder(
                        delivered, draws.choice(broker.rng, spare))
                confirmed = _nodes(job.nodes_confirmed)
                missing = [n for n in delivered if n not in confirmed]
                outbox.send_many(missing, B.REPLJOB, wire_fields(job, now))

    # ---------------------------------------------------------------- messages
    def on_gotjob(self, sender: str, jid: bytes, now: int) -> None:
        p = self.pending.get(jid)
        if p is None or p.job.state == ACKED:
            return
        job = p.job
        holders = self.broker.holders
        delivered = job.nodes_delivered = holders.with_holder(job.nodes_delivered, sender)
        confirmed = _nodes(job.nodes_confirmed)
        if len(confirmed) + 1 == len(delivered) and sender not in confirmed:
            confirmed = delivered   # (a subset of it) every holder now: that very tuple
        else:
            confirmed = holders.with_holder(confirmed, sender)
        job.nodes_confirmed = confirmed
        if len(confirmed) >= job.repl:
            self._achieved(p, now)

    def on_repljob(self, sender: str, fields: list, now: int) -> None:
        """A peer asks us to hold a copy. Refused (no GOTJOB) over 75% memory, while
        leaving or loading the AOF, or when the queue is paused in. (``fields``:
        a list, protocol/bus.py checked its shape.)"""
        broker = self.broker
        if self.m.leaving or broker.loading or broker.memory_level() >= 1:
            return
        jid = fields[field.ID]
        q = broker.queues.get(fields[field.QUEUE])
        if q is not None and q.flags & PAUSED_IN:
            return
        if jid in self.tombstones.ids and broker.get_job(jid) is None:
            return                          # a late REPLJOB for a job already collected
        skew = sender_skew(fields, now)
        job = lifecycle.adopt_replica(broker, _moved_by(fields, skew), now, skew)
        if job.state == HELD and self.requeue.heard_queued:
            self.requeue.released_early(job, now)
        self.outbox.send(sender, B.GOTJOB, jid)

    def on_enqueue(self, sender: str, jid: bytes, now: int) -> None:
        """The originator kept no copy (external replication): we queue the job."""
        broker = self.broker
        job = broker.get_job(jid)
        if job is None or job.state in (ACKED, QUEUED, WAIT_REPL, HELD):
            return
        lifecycle.enqueue_after_delay(broker, job, now)


# ------------------------------------------------- (ext) times across the bus
def wire_fields(job: Job, now: int) -> list:
    """A job for REPLJOB / YOURJOBS: its fields (broker/job.py) and, last, the
    sender's clock. The expire time is absolute in the sender's clock; with
    the sender's clock beside it, a receiver whose clock is ahead cannot
    expire its copy early, nor one behind late (docs/operations.md, Clocks)."""
    fields = job_to_fields(job)
    fields.append(now)
    return fields


def _has_sender_clock(fields: list) -> bool:
    n = len(fields)
    return (n == field.FIELDS + 1 or n == field.KEYED_FIELDS + 1) and type(fields[n - 1]) is int


def sender_skew(fields: list, now: int) -> int:
    """Our clock minus the sender's, by the clock a job's fields end with
    (0 from a peer without the extension): what moves the sender's times
    (expire time, ctime's milliseconds) to ours."""
    if _has_sender_clock(fields):
        sent_at: int = fields[len(fields) - 1]
        return now - sent_at
    return 0


def local_fields(fields: list, now: int) -> list:
    """A job's fields from the bus, its expire time moved to our clock (by the
    sender's clock it ends with, if it does: a peer without the extension
    sends none), the sender's clock removed. A copy: the message may be
    shared (the simulator hands one to every destination)."""
    return _moved_by(fields, sender_skew(fields, now))


def _moved_by(fields: list, skew: int) -> list:
    """local_fields, given the skew sender_skew found for these fields."""
    if _has_sender_clock(fields):
        local = fields[:len(fields) - 1]
        etime: int = fields[field.ETIME]
        local[field.ETIME] = etime + skew
        return local
    return fields
