"""Federation: NEEDJOBS / YOURJOBS, import rates, PAUSE bcast (SPEC section 8).

A node with GETJOB clients blocked on an empty queue asks for jobs: first the
nodes that recently sent it jobs for that queue (25 ms backoff doubling to 2 s),
otherwise every reachable node (2 s doubling to 30 s). A node with queued jobs
answers YOURJOBS with up to half its queue, moving them (RETRY 0 jobs leave the
sender entirely). A node that got NEEDJOBS while it had nothing remembers the
asker for a while and pushes the next job queued here with no local consumer,
so a consumer on A gets jobs produced on B within milliseconds.
"""

from __future__ import annotations

from broker import lifecycle
from broker.queue import PAUSED_OUT
from cluster import replication
from protocol import bus as B

ADHOC_MIN_MS, ADHOC_MAX_MS = 25, 2000
BCAST_MIN_MS, BCAST_MAX_MS = 2000, 30_000
RESPONDER_TTL_MS = 5000         # a node that sent jobs recently is asked first
INTEREST_GRACE_MS = 1000        # how long past its next ask we remember an asker


def _delay(attempt: int, low: int, high: int) -> int:
    return 0 if attempt == 0 else min(low << (attempt - 1), high)


def need_jobs(cluster, q, now: int) -> None:
    """Ask for jobs for q if its backoff allows (called while clients wait).
    While recent sources answer, every reachable node is still asked now and
    then (at most every BCAST_MIN_MS), as Disque's needJobsForQueue does: a
    node with no consumer of its own is found only that way (issue 25: a
    copy re-queued there waited until that node died, its disk damaged)."""
    broker = cluster.broker
    if cluster.m.leaving or q.jobs:
        return
    cluster.hungry.add(q.name)
    count = max(1, sum(c.block_count for c in q.blocked))
    responders = q.needjobs_responders
    if responders:
        for nid, t in list(responders.items()):
            if now - t > RESPONDER_TTL_MS:
                del responders[nid]
    if responders:
        delay = _delay(q.needjobs_adhoc_attempt, ADHOC_MIN_MS, ADHOC_MAX_MS)
        if now >= q.needjobs_adhoc_time + delay:
            q.needjobs_adhoc_time = now
            q.needjobs_adhoc_attempt += 1
            next_ask = _delay(q.needjobs_adhoc_attempt, ADHOC_MIN_MS, ADHOC_MAX_MS)
            cluster.send_many(sorted(responders), B.NEEDJOBS, [q.name, count, next_ask])
    delay = _delay(q.needjobs_bcast_attempt, BCAST_MIN_MS, BCAST_MAX_MS)
    if responders:
        delay = max(delay, BCAST_MIN_MS)
    if now >= q.needjobs_bcast_time + delay:
        q.needjobs_bcast_time = now
        q.needjobs_bcast_attempt += 1
        next_ask = _delay(q.needjobs_bcast_attempt, BCAST_MIN_MS, BCAST_MAX_MS)
        cluster.send_many(cluster.m.reachable_ids(), B.NEEDJOBS, [q.name, count, next_ask])


def tick(cluster, now: int) -> None:
    broker = cluster.broker
    if cluster.push_pending:
        for name in sorted(cluster.push_pending):
            q = broker.queues.get(name)
            if q is not None and q.jobs:
                push_to_interested(cluster, q, now)
        cluster.push_pending.clear()
    hungry = cluster.hungry
    if not hungry:
        return
    for name in list(hungry):
        q = broker.queues.get(name)
        if q is None or not q.blocked:
            hungry.discard(name)
            if q is not None:
                q.needjobs_adhoc_attempt = q.needjobs_bcast_attempt = 0
            continue
        need_jobs(cluster, q, now)


def _take_jobs(cluster, q, count: int, receiver: str, now: int) -> list:
    """Dequeue up to count jobs for another node (moving RETRY 0 jobs)."""
    broker = cluster.broker
    out = []
    while len(out) < count and q.jobs:
        job = q.jobs.pop(0)
        q.jobs_out += 1
        fields = replication.wire_fields(job, now)
        lifecycle.take_for_peer(broker, job, receiver, now)
        fields[12] = job.nodes_delivered if job.retry else None
        out.append(fields)
    q.atime = now
    return out


def on_needjobs(cluster, sender: str, payload, now: int) -> None:
    name, count = bytes(payload[0]), payload[1]
    next_ask = payload[2] if len(payload) > 2 else BCAST_MIN_MS
    broker = cluster.broker
    q = broker.queues.get(name)
    if q is None or not q.jobs or q.flags & PAUSED_OUT:
        cluster.interest.setdefault(name, {})[sender] = now + next_ask + INTEREST_GRACE_MS
        return
    n = min(count, len(q.jobs) // 2) or 1
    cluster.send(sender, B.YOURJOBS, _take_jobs(cluster, q, n, sender, now))


def push_to_interested(cluster, q, now: int) -> bool:
    """A job was queued with no local consumer: hand it to a node that asked."""
    interest = cluster.interest
    if not interest or cluster.importing or q.blocked or q.flags & PAUSED_OUT:
        return False
    askers = interest.get(q.name)
    if not askers:
        return False
    for nid, until in list(askers.items()):
        if until < now or nid not in cluster.m.reachable_ids():
            del askers[nid]
    if not askers:
        del interest[q.name]
        return False
    target = min(askers)
    cluster.send(target, B.YOURJOBS, _take_jobs(cluster, q, len(q.jobs), target, now))
    return True


def on_yourjobs(cluster, sender: str, jobs, now: int) -> None:
    broker = cluster.broker
    imported = 0
    q = None
    cluster.importing = True    # imported jobs are not pushed on to other askers
    for fields in jobs:
        if cluster.is_tombstoned(fields[0]) and broker.get_job(fields[0]) is None:
            if fields[0] in cluster.acked_tombstones:
                # A copy that missed the ack (a node that was down, an AOF that
                # lost its ack record): acked here, so acked there too; dropped
                # silently, its holder would queue it every RETRY until the
                # tombstone expires, then deliver an acked job again.
                cluster.send(sender, B.SETACK, [fields[0], 0])
            continue
        job = lifecycle.adopt_moved(broker, replication.local_fields(fields, now), sender, now)
        if job is None:
            continue
        if lifecycle.queue(broker, job, now):
            imported += 1
        q = broker.queues.get(job.queue)
    cluster.importing = False
    if q is not None and imported:
        if q.needjobs_responders is None:
            q.needjobs_responders = {}
        q.needjobs_responders[sender] = now
        q.needjobs_adhoc_attempt = 0
        q.count_imports(imported, now)


def on_pause(cluster, sender: str, payload, now: int) -> None:
    broker = cluster.broker
    q = broker.get_queue(bytes(payload[0]), create=True)
    broker.set_queue_pause(q, payload[1])
