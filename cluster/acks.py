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

from typing import TYPE_CHECKING, Any, cast

from broker import lifecycle
from broker.job import (
    ACKED, FLAG_DUMMY_ACK, FLAG_KEY_ANSWERED, Holders, Job, id_is_at_least_once, ttl_from_id,
    with_holder,
)
from broker.lifecycle import GC_FIRST_MS
from cluster import replication
from protocol import bus as B

if TYPE_CHECKING:       # annotations only: cluster/cluster.py imports this module
    from cluster.cluster import Cluster


def _other_nodes(cluster: Cluster) -> list[str]:
    me = cluster.myself_id
    return [n for n in cluster.m.known_ids() if n != me]


def try_job_gc(cluster: Cluster, job: Job, now: int) -> None:
    broker = cluster.broker
    if job.state != ACKED:
        return
    if job.flags & FLAG_DUMMY_ACK:
        unknown = cluster.dummy_acks.setdefault(job.id, set())
        targets = [n for n in _other_nodes(cluster) if n not in unknown]
        if not targets:
            _drop_dummy(cluster, job)
            return
        cluster.send_many(targets, B.SETACK, [job.id, 0])
        lifecycle.gc_backoff(broker, job, now)
        return
    others = cluster.others_of(job)
    confirmed = job.nodes_confirmed or ()
    missing = [n for n in others if n not in confirmed]
    if not missing:
        cluster.send_many(others, B.DELJOB, job.id)
        lifecycle.delete(broker, job)
        return
    # (holders listed: others_of found some)
    cluster.send_many(missing, B.SETACK, [job.id, len(cast("Holders", job.nodes_delivered))])
    lifecycle.gc_backoff(broker, job, now)


def _drop_dummy(cluster: Cluster, job: Job) -> None:
    cluster.dummy_acks.pop(job.id, None)
    lifecycle.delete(cluster.broker, job)


def ack_unknown_job(cluster: Cluster, jid: bytes) -> None:
    """ACKJOB of an id we do not hold: remember the ack and spread it."""
    broker = cluster.broker
    if len(cluster.m.known_ids()) <= 1 or cluster.m.leaving or not id_is_at_least_once(jid):
        return
    now = broker.clock()
    job = lifecycle.add_dummy_ack(broker, jid, max(ttl_from_id(jid), 60), now)
    try_job_gc(cluster, job, now)


def on_setack(cluster: Cluster, sender: str, payload: Any, now: int) -> None:
    jid, may_have = payload
    broker = cluster.broker
    job = broker.get_job(jid)
    if job is None:
        cluster.tombstone(jid)      # a REPLJOB still in flight must not revive it
        cluster.send(sender, B.GOTACK, [jid, 0])
        return
    dummy = bool(job.flags & FLAG_DUMMY_ACK)
    if job.state != ACKED:
        # The sender collects; we take over only if it does not finish.
        lifecycle.ack(broker, job, now, gc_in=GC_FIRST_MS)
    cluster.send(sender, B.GOTACK, [jid, 0 if dummy else 1])
    if not dummy and len(job.nodes_delivered or ()) > may_have:
        # We know holders the sender does not (or it holds a dummy ack): collect now.
        try_job_gc(cluster, job, now)


def on_gotack(cluster: Cluster, sender: str, payload: Any, now: int) -> None:
    jid, known = payload
    broker = cluster.broker
    job = broker.get_job(jid)
    if job is None or job.state != ACKED:
        return
    if job.flags & FLAG_DUMMY_ACK:
        if known:
            _drop_dummy(cluster, job)   # a real holder has the ack and collects
        else:
            unknown = cluster.dummy_acks.setdefault(jid, set())
            unknown.add(sender)
            if all(n in unknown for n in _other_nodes(cluster)):
                _drop_dummy(cluster, job)
        return
    # "Not known" from a listed holder: nothing to collect there either.
    confirmed = job.nodes_confirmed = with_holder(job.nodes_confirmed, sender)
    others = cluster.others_of(job)
    if all(n in confirmed for n in others):
        cluster.send_many(others, B.DELJOB, jid)
        lifecycle.delete(broker, job)


def on_deljob(cluster: Cluster, sender: str, jid: Any, now: int) -> None:
    broker = cluster.broker
    job = broker.get_job(jid)
    if job is not None:
        if job.state != ACKED:
            # (ext) Not an ack GC: the originator's ADDJOB failed (or a FASTACK):
            # unless a retry of that add got this copy's id here, the job is gone
            # for the producer and its IDEMPOTENCY key with it.
            if job.flags & FLAG_KEY_ANSWERED:
                return
            lifecycle.forget_key(broker, job)
        cluster.dummy_acks.pop(job.id, None)
        lifecycle.delete(broker, job)
    elif jid in cluster.pending:
        # An ADDJOB of ours replicated externally (no copy here) ends too.
        replication.abort(cluster, cluster.pending[jid], replication.NOREPL_REMOVED)
    cluster.tombstone(jid)


def fastack(cluster: Cluster, jid: bytes, job: Job | None) -> None:
    """Best-effort DELJOB to whoever may hold it (everyone if we don't know)."""
    targets = cluster.others_of(job) if job is not None else _other_nodes(cluster)
    cluster.send_many(targets, B.DELJOB, jid)
