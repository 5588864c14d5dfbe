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

from typing import TYPE_CHECKING, Any

from broker import lifecycle
from broker.job import ACKED, FLAG_BCAST_QUEUED, FLAG_DELIVERED, HELD, QUEUED, Job, with_holder
from protocol import bus as B

if TYPE_CHECKING:       # annotations only: cluster/cluster.py imports this module
    from cluster.cluster import Cluster


# Holders re-queue in a fixed order (by node id, among the reachable ones), this
# far apart, so the first one's QUEUED usually reaches the others before their
# own time comes: they postpone instead of delivering a second copy. It is larger
# than the +-250 ms jitter so that the order, not the draw, decides.
REQUEUE_STAGGER_MS = 600


def send_willqueue(cluster: Cluster, job: Job) -> int:
    """WILLQUEUE to the other holders; returns how much later than planned we
    re-queue (the stagger behind the reachable holders with smaller ids)."""
    others = cluster.others_of(job)
    if not others:
        return 0
    cluster.send_many(others, B.WILLQUEUE, job.id)
    reachable = set(cluster.m.reachable_ids())
    ahead = sum(1 for n in others if n in reachable and n < cluster.myself_id)
    return ahead * REQUEUE_STAGGER_MS


def job_queued(cluster: Cluster, job: Job) -> None:
    """Tell the other holders we queued it (not on the first queueing after
    ADDJOB: their copies already wait one retry period)."""
    if not job.nodes_delivered or not job.flags & (FLAG_BCAST_QUEUED | FLAG_DELIVERED):
        return
    job.flags &= ~FLAG_BCAST_QUEUED
    _send_queued(cluster, job)


def job_released(cluster: Cluster, job: Job) -> None:
    """(ext) A held job was released here (ENQUEUE): the other holders hear it
    as a QUEUED, so that theirs go active and re-queue it after retry if this
    node's copy is not acked in time (it may die)."""
    _send_queued(cluster, job)


def _send_queued(cluster: Cluster, job: Job) -> None:
    others = cluster.others_of(job)
    if others:
        cluster.send_many(others, B.QUEUED, queued_payload(job))


def queued_payload(job: Job) -> list:
    """QUEUED carries the delivery counters, so every holder shows the same
    nacks / additional-deliveries whichever of them re-queues next."""
    return [job.id, job.nacks, job.additional_deliveries]


def released_by(cluster: Cluster, sender: str, job: Job, now: int) -> None:
    """(ext) A held copy learns that another holder released the job. The
    node that created it asked every holder (REPLJOB, widening included), the
    releaser may know fewer: the creator passes the news on (WILLQUEUE: a
    held copy hears it as a release, any other copy ignores it)."""
    lifecycle.released_elsewhere(cluster.broker, job, now)
    if job.id[2:10] == cluster.myself_id[:8].encode():
        cluster.send_many([n for n in cluster.others_of(job) if n != sender],
                          B.WILLQUEUE, job.id)


def released_early(cluster: Cluster, job: Job, now: int) -> None:
    """(ext) A held copy adopted after a QUEUED or WILLQUEUE for it came in
    (cluster.heard_queued): the job was released already."""
    if job.id in cluster.heard_queued:
        lifecycle.released_elsewhere(cluster.broker, job, now)


def on_willqueue(cluster: Cluster, sender: str, jid: Any, now: int) -> None:
    broker = cluster.broker
    job = broker.get_job(jid)
    if job is None:
        if not cluster.is_tombstoned(jid):
            cluster.note_queued_unknown(jid)
        return
    if job.state == QUEUED:
        cluster.send(sender, B.QUEUED, queued_payload(job))
    elif job.state == ACKED:
        cluster.send(sender, B.SETACK, [jid, len(job.nodes_delivered or ())])
    elif job.state == HELD:
        # (ext) Only a released job is re-queued: its QUEUED did not reach us.
        released_by(cluster, sender, job, now)


def on_queued(cluster: Cluster, sender: str, payload: Any, now: int) -> None:
    broker = cluster.broker
    jid, nacks, deliveries = payload
    job = broker.get_job(jid)
    if job is None:
        if not cluster.is_tombstoned(jid):
            cluster.note_queued_unknown(jid)
        return
    if job.state == ACKED:
        return
    lifecycle.merge_counters(job, nacks, deliveries)
    if job.nodes_delivered is not None:
        job.nodes_delivered = with_holder(job.nodes_delivered, sender)
    if job.state == HELD:
        # (ext) The sender released it (or re-queued it after its release).
        released_by(cluster, sender, job, now)
        return
    if job.state == QUEUED and sender < cluster.myself_id:
        # We win: tell the sender, which then drops its queued copy.
        cluster.send(sender, B.QUEUED, queued_payload(job))
        return
    lifecycle.postpone(broker, job, now)


def on_working(cluster: Cluster, sender: str, jid: Any, now: int) -> None:
    """A client is still working on the job: postpone our requeue too."""
    broker = cluster.broker
    job = broker.get_job(jid)
    if job is None or job.state == ACKED:
        return
    lifecycle.postpone(broker, job, now)
