# compiled: mypyc (setup.py builds each module whose first line this is)
"""Requeue across holders: WILLQUEUE / QUEUED / WORKING (SPEC section 8).

500 ms before re-queueing a job, a holder sends WILLQUEUE to the other holders:
one that has it queued answers QUEUED (so we postpone instead of queueing a
second copy), one that has it acked answers SETACK. A node that re-queues sends
QUEUED to the holders; a holder that also has it queued dequeues it when the
sender wins the fixed comparison (greater node id), so usually one node queues it.

(ext) A held job (ADDJOB ... HOLD) is released on one holder by ENQUEUE: that
node sends QUEUED to the others, whose held copies then go active with a
requeue timer, as copies of a job added unheld; a WILLQUEUE or QUEUED about a
job still held here means the same (the release's QUEUED was lost).
"""

from __future__ import annotations

from typing import Final

from broker import lifecycle
from broker.job import ACKED, FLAG_BCAST_QUEUED, FLAG_DELIVERED, HELD, QUEUED, Job
from broker.node import Node
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.subprotocol import SubProtocol
from cluster.tombstones import TOMBSTONE_MS, Tombstones, forget_expired, remember
from protocol import bus as B

# Holders re-queue in a fixed order (by node id, among the reachable ones), this
# far apart, so the first one's QUEUED usually reaches the others before their
# own time comes: they postpone instead of delivering a second copy. It is larger
# than the +-250 ms jitter so that the order, not the draw, decides.
REQUEUE_STAGGER_MS: Final = 600


def queued_payload(job: Job) -> list:
    """QUEUED carries the delivery counters, so every holder shows the same
    nacks / additional-deliveries whichever of them re-queues next."""
    return [job.id, job.nacks, job.additional_deliveries]


class Requeue(SubProtocol):
    """Owns ``heard_queued`` ((ext) job id -> until: a QUEUED or WILLQUEUE for
    a job we did not hold yet; its REPLJOB may come later, on another link: a
    held copy is then released at once, see released_early)."""

    def __init__(self, broker: Node, membership: Membership, outbox: Outbox,
                 tombstones: Tombstones) -> None:
        super().__init__(broker, membership, outbox, tombstones)
        self.heard_queued: dict[bytes, int] = {}

    def tick(self, now: int) -> None:
        forget_expired(self.heard_queued, now)

    # ------------------------------------------------------ what this node does
    def send_willqueue(self, job: Job) -> int:
        """WILLQUEUE to the other holders; returns how much later than planned we
        re-queue (the stagger behind the reachable holders with smaller ids)."""
        others = self.outbox.others_of(job)
        if not others:
            return 0
        self.outbox.send_many(others, B.WILLQUEUE, job.id)
        reachable = set(self.m.reachable_ids())
        me = self.m.node_id
        ahead = sum(1 for n in others if n in reachable and n < me)
        return ahead * REQUEUE_STAGGER_MS

    def before_requeue(self, job: Job) -> None:
        job.flags |= FLAG_BCAST_QUEUED      # a timer requeue is announced (QUEUED)

    def job_queued(self, job: Job) -> None:
        """Tell the other holders we queued it (not on the first queueing after
        ADDJOB: their copies already wait one retry period)."""
        if not job.nodes_delivered or not job.flags & (FLAG_BCAST_QUEUED | FLAG_DELIVERED):
            return
        job.flags &= ~FLAG_BCAST_QUEUED
        self._send_queued(job)

    def job_released(self, job: Job) -> None:
        """(ext) A held job was released here (ENQUEUE): the other holders hear it
        as a QUEUED, so that theirs go active and re-queue it after retry if this
        node's copy is not acked in time (it may die)."""
        self._send_queued(job)

    def broadcast_working(self, job: Job) -> None:
        """WORKING here: the other holders postpone their requeue too."""
        self.outbox.send_many(self.outbox.others_of(job), B.WORKING, job.id)

    def _send_queued(self, job: Job) -> None:
        others = self.outbox.others_of(job)
        if others:
            self.outbox.send_many(others, B.QUEUED, queued_payload(job))

    # ------------------------------------------------------- (ext) held copies
    def released_by(self, sender: str, job: Job, now: int) -> None:
        """(ext) A held copy learns that another holder released the job. The
        node that created it asked every holder (REPLJOB, widening included), the
        releaser may know fewer: the creator passes the news on (WILLQUEUE: a
        held copy hears it as a release, any other copy ignores it)."""
        lifecycle.released_elsewhere(self.broker, job, now)
        if job.id[2:10] == self.m.node_id[:8].encode():
            self.outbox.send_many([n for n in self.outbox.others_of(job) if n != sender],
                                  B.WILLQUEUE, job.id)

    def released_early(self, job: Job, now: int) -> None:
        """(ext) A held copy adopted (REPLJOB) after a QUEUED or WILLQUEUE for
        it came in: the job was released already."""
        if job.id in self.heard_queued:
            lifecycle.released_elsewhere(self.broker, job, now)

    def _heard_unknown(self, jid: bytes) -> None:
        """A QUEUED or WILLQUEUE for a job not held here (and not deleted)."""
        if jid not in self.tombstones.ids:
            remember(self.heard_queued, jid, self.broker.clock() + TOMBSTONE_MS)

    # ---------------------------------------------------------------- messages
    def on_willqueue(self, sender: str, jid: bytes, now: int) -> None:
        job = self.broker.get_job(jid)
        if job is None:
            self._heard_unknown(jid)
            return
        if job.state == QUEUED:
            self.outbox.send(sender, B.QUEUED, queued_payload(job))
        elif job.state == ACKED:
            self.outbox.send(sender, B.SETACK, [jid, len(job.nodes_delivered or ())])
        elif job.state == HELD:
            # (ext) Only a released job is re-queued: its QUEUED did not reach us.
            self.released_by(sender, job, now)

    def on_queued(self, sender: str, payload: list, now: int) -> None:
        jid, nacks, deliveries = payload
        job = self.broker.get_job(jid)
        if job is None:
            self._heard_unknown(jid)
            return
        if job.state == ACKED:
            return
        lifecycle.merge_counters(job, nacks, deliveries)
        if job.nodes_delivered is not None:
            job.nodes_delivered = self.broker.holders.with_holder(job.nodes_delivered, sender)
        if job.state == HELD:
            # (ext) The sender released it (or re-queued it after its release).
            self.released_by(sender, job, now)
            return
        if job.state == QUEUED and sender < self.m.node_id:
            # We win: tell the sender, which then drops its queued copy.
            self.outbox.send(sender, B.QUEUED, queued_payload(job))
            return
        lifecycle.postpone(self.broker, job, now)

    def on_working(self, sender: str, jid: bytes, now: int) -> None:
        """A client is still working on the job: postpone our requeue too."""
        job = self.broker.get_job(jid)
        if job is None or job.state == ACKED:
            return
        lifecycle.postpone(self.broker, job, now)
