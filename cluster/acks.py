# compiled: mypyc (setup.py builds each module whose first line this is)
"""Acknowledgement garbage collection: SETACK / GOTACK / DELJOB, dummy acks and
FASTACK (SPEC section 8).

ACKJOB marks the job acked and sends SETACK(may-have) to the holders that have not
confirmed; each answers GOTACK(known). Once every holder confirmed, DELJOB goes to
all of them and the job is deleted. Attempts repeat with exponential backoff
(1 s doubling, capped near 3 min, with jitter) until done, so an ack given during
a partition reaches the other side after it heals. Every holder that learns the
ack runs the same GC later, so the collection survives the node that started it.

An ACKJOB for an id we never held creates a dummy ack (at-least-once ids only):
it SETACKs every node until a real holder confirms (that holder then collects),
or every node answered that it does not know the job.
"""

from __future__ import annotations

from typing import cast

from broker import lifecycle
from broker.job import (
    ACKED, FLAG_DUMMY_ACK, FLAG_KEY_ANSWERED, Holders, Job, id_is_at_least_once, ttl_from_id,
)
from broker.lifecycle import GC_FIRST_MS
from broker.node import Node
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.replication import Replication
from cluster.subprotocol import SubProtocol
from cluster.tombstones import Tombstones
from protocol import bus as B


class Acks(SubProtocol):
    """Owns ``dummy_acks`` (the id of a dummy ack -> the nodes that answered
    they do not know the job)."""

    def __init__(self, broker: Node, membership: Membership, outbox: Outbox,
                 tombstones: Tombstones, replication: Replication) -> None:
        super().__init__(broker, membership, outbox, tombstones)
        self.replication = replication
        self.dummy_acks: dict[bytes, set[str]] = {}

    def _other_nodes(self) -> list[str]:
        me = self.m.node_id
        return [n for n in self.m.known_ids() if n != me]

    def try_job_gc(self, job: Job, now: int) -> None:
        if job.state != ACKED:
            return
        outbox = self.outbox
        if job.flags & FLAG_DUMMY_ACK:
            unknown = self.dummy_acks.setdefault(job.id, set())
            targets = [n for n in self._other_nodes() if n not in unknown]
            if not targets:
                self._drop_dummy(job)
                return
            outbox.send_many(targets, B.SETACK, [job.id, 0])
            lifecycle.gc_backoff(self.broker, job, now)
            return
        others = outbox.others_of(job)
        confirmed = job.nodes_confirmed or ()
        missing = [n for n in others if n not in confirmed]
        if not missing:
            outbox.send_many(others, B.DELJOB, job.id)
            lifecycle.delete(self.broker, job)
            return
        # (holders listed: others_of found some)
        outbox.send_many(missing, B.SETACK,
                         [job.id, len(cast("Holders", job.nodes_delivered))])
        lifecycle.gc_backoff(self.broker, job, now)

    def _drop_dummy(self, job: Job) -> None:
        self.dummy_acks.pop(job.id, None)
        lifecycle.delete(self.broker, job)

    def ack_unknown_job(self, jid: bytes) -> None:
        """ACKJOB of an id we do not hold: remember the ack and spread it."""
        broker = self.broker
        if len(self.m.known_ids()) <= 1 or self.m.leaving or not id_is_at_least_once(jid):
            return
        now = broker.clock()
        job = lifecycle.add_dummy_ack(broker, jid, max(ttl_from_id(jid), 60), now)
        self.try_job_gc(job, now)

    def fastack(self, jid: bytes, job: Job | None) -> None:
        """Best-effort DELJOB to whoever may hold it (everyone if we don't know)."""
        targets = self.outbox.others_of(job) if job is not None else self._other_nodes()
        self.outbox.send_many(targets, B.DELJOB, jid)

    # ---------------------------------------------------------------- messages
    def on_setack(self, sender: str, payload: list, now: int) -> None:
        jid, may_have = payload
        broker = self.broker
        job = broker.get_job(jid)
        if job is None:
            # a REPLJOB still in flight must not revive it
            self.tombstones.bury(jid, broker.clock())
            self.outbox.send(sender, B.GOTACK, [jid, 0])
            return
        dummy = bool(job.flags & FLAG_DUMMY_ACK)
        if job.state != ACKED:
            # The sender collects; we take over only if it does not finish.
            lifecycle.ack(broker, job, now, gc_in=GC_FIRST_MS)
        self.outbox.send(sender, B.GOTACK, [jid, 0 if dummy else 1])
        if not dummy and len(job.nodes_delivered or ()) > may_have:
            # We know holders the sender does not (or it holds a dummy ack): collect now.
            self.try_job_gc(job, now)

    def on_gotack(self, sender: str, payload: list, now: int) -> None:
        jid, known = payload
        job = self.broker.get_job(jid)
        if job is None or job.state != ACKED:
            return
        if job.flags & FLAG_DUMMY_ACK:
            if known:
                self._drop_dummy(job)   # a real holder has the ack and collects
            else:
                unknown = self.dummy_acks.setdefault(jid, set())
                unknown.add(sender)
                if all(n in unknown for n in self._other_nodes()):
                    self._drop_dummy(job)
            return
        # "Not known" from a listed holder: nothing to collect there either.
        confirmed = job.nodes_confirmed = self.broker.holders.with_holder(
            job.nodes_confirmed, sender)
        others = self.outbox.others_of(job)
        if all(n in confirmed for n in others):
            self.outbox.send_many(others, B.DELJOB, jid)
            lifecycle.delete(self.broker, job)

    def on_deljob(self, sender: str, jid: bytes, now: int) -> None:
        broker = self.broker
        job = broker.get_job(jid)
        if job is not None:
            if job.state != ACKED:
                # (ext) Not an ack GC: the originator's ADDJOB failed (or a FASTACK):
                # unless a retry of that add got this copy's id here, the job is gone
                # for the producer and its IDEMPOTENCY key with it.
                if job.flags & FLAG_KEY_ANSWERED:
                    return
                lifecycle.forget_key(broker, job)
            self.dummy_acks.pop(job.id, None)
            lifecycle.delete(broker, job)
        else:
            self.replication.deleted_elsewhere(jid)
        self.tombstones.bury(jid, broker.clock())
