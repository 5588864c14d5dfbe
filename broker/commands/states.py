"""ACKJOB, FASTACK, NACK, WORKING, ENQUEUE, DEQUEUE: moving jobs between states."""

from __future__ import annotations

from broker.commands import F_DENYOOM, F_FAST, F_WRITE, command, parse_job_ids
from broker.job import (
    ACKED, ACTIVE, BADID, FLAG_BCAST_WILLQUEUE, FLAG_QUEUED_ONCE, QUEUED, valid_job_id,
)
from protocol.resp import Error


@command("ackjob", -1, F_WRITE | F_FAST)
def ackjob(node, client, argv):
    """ACKJOB [job-id ...]: the jobs were processed; start the ack GC."""
    known = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is None:
            if node.cluster is not None:
                node.cluster.ack_unknown_job(jid)
            continue
        if job.state != ACKED:
            node.ack_job(job)
            known += 1
        node.try_job_gc(job)
    return known


@command("fastack", -1, F_WRITE | F_FAST)
def fastack(node, client, argv):
    """FASTACK [job-id ...]: delete here and tell the others, best effort."""
    deleted = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if node.cluster is not None:
            node.cluster.fastack(jid, job)
        if job is not None:
            node.unregister_job(job)
            deleted += 1
    return deleted


def _requeue(node, argv, nack: bool) -> int:
    changed = 0
    now = node.clock()
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is None or job.state != ACTIVE:
            continue
        # As Disque: queueing a job for the first time here (a DELAY job put
        # in its queue early) is not an additional delivery; a NACK always
        # counts; an at-most-once job is queued once at most, even if dequeued.
        again = job.flags & FLAG_QUEUED_ONCE
        if again and not job.retry:
            continue
        if node.queue_job(job, now):
            if nack:
                job.nacks += 1
            elif again:
                job.additional_deliveries += 1
            node.schedule_job(job)
            changed += 1
    return changed


@command("nack", -1, F_DENYOOM | F_WRITE | F_FAST)
def nack(node, client, argv):
    """NACK [job-id ...]: put the jobs back in their queues now, counting nacks."""
    return _requeue(node, argv, nack=True)


@command("enqueue", -1, F_DENYOOM | F_WRITE | F_FAST)
def enqueue(node, client, argv):
    """ENQUEUE [job-id ...]: queue jobs that are not queued (not acked ones)."""
    return _requeue(node, argv, nack=False)


@command("dequeue", -1, F_WRITE | F_FAST)
def dequeue(node, client, argv):
    """DEQUEUE [job-id ...]: take jobs out of their queues, keeping them."""
    changed = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is not None and job.state == QUEUED:
            node.dequeue_job(job)
            node.schedule_job(job)
            changed += 1
    return changed


@command("working", 2, F_FAST)
def working(node, client, argv):
    """WORKING job-id: still processing; postpone the next requeue by RETRY seconds."""
    jid = argv[1]
    if not valid_job_id(jid):
        return Error(BADID)
    job = node.get_job(jid)
    if job is None:
        return Error("NOJOB Job not known in the context of this node.")
    now = node.clock()
    created_ms = job.ctime // 1_000_000
    ttl = job.etime - created_ms
    if ttl > 0 and now - created_ms > ttl // 2:
        return Error("TOOLATE Half of job TTL already elapsed, you are no longer "
                     "allowed to postpone the next delivery.")
    if job.state == QUEUED:
        node.dequeue_job(job)
    job.flags |= FLAG_BCAST_WILLQUEUE
    job.qtime = now + job.retry * 1000
    node.schedule_job(job)
    if node.cluster is not None:
        node.cluster.broadcast_working(job)
    return job.retry
