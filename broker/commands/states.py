# compiled: mypyc (setup.py builds each module whose first line this is)
"""ACKJOB, FASTACK, NACK, WORKING, ENQUEUE, DEQUEUE: moving jobs between states."""

from __future__ import annotations

from broker import lifecycle
from broker.commands.args import parse_job_ids
from broker.client import Client
from broker.commands.table import command
from broker.dispatch import F_DENYOOM, F_FAST, F_WRITE
from broker.job import ACKED, BADID, QUEUED, valid_job_id
from broker.job import HELD
from broker.node import Node
from protocol.resp import Error


@command("ackjob", -1, F_WRITE | F_FAST,
         doc="ACKJOB [job-id ...]: the jobs were processed; start the ack GC.")
def ackjob(node: Node, client: Client, argv: list):
    known = 0
    now = node.clock()
    cluster = node.cluster
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is None:
            cluster.ack_unknown_job(jid)
            continue
        if job.state != ACKED:
            lifecycle.ack(node, job, now)
            known += 1
        # Delete it once every holder knows (SPEC section 8); a job only this
        # node holds goes at once.
        if not job.nodes_delivered:
            lifecycle.delete(node, job)
        else:
            cluster.try_job_gc(job, now)
    return known


@command("fastack", -1, F_WRITE | F_FAST,
         doc="FASTACK [job-id ...]: delete here and tell the others, best effort.")
def fastack(node: Node, client: Client, argv: list):
    deleted = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        node.cluster.fastack(jid, job)
        if job is not None:
            lifecycle.delete(node, job)
            deleted += 1
    return deleted


def _requeue(node: Node, argv, nack: bool) -> int:
    changed = 0
    now = node.clock()
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is not None and lifecycle.requeue(node, job, now, nack):
            changed += 1
    return changed


@command("nack", -1, F_DENYOOM | F_WRITE | F_FAST,
         doc="NACK [job-id ...]: put the jobs back in their queues now, counting nacks.")
def nack(node: Node, client: Client, argv: list):
    return _requeue(node, argv, nack=True)


@command("enqueue", -1, F_DENYOOM | F_WRITE | F_FAST,
         doc="ENQUEUE [job-id ...]: queue jobs that are not queued (not acked ones); "
             "(ext) releases held jobs.")
def enqueue(node: Node, client: Client, argv: list):
    return _requeue(node, argv, nack=False)


@command("dequeue", -1, F_WRITE | F_FAST,
         doc="DEQUEUE [job-id ...]: take jobs out of their queues, keeping them.")
def dequeue(node: Node, client: Client, argv: list):
    changed = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is not None and job.state == QUEUED:
            lifecycle.dequeue(node, job)
            lifecycle.schedule(node, job)
            changed += 1
    return changed


@command("working", 2, F_FAST,
         doc="WORKING job-id: still processing; postpone the next requeue by RETRY seconds.")
def working(node: Node, client: Client, argv: list):
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
    lifecycle.working(node, job, now)
    if job.state != HELD:       # (ext) held: nothing postponed
        node.cluster.broadcast_working(job)
    return job.retry
