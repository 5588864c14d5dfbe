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
from broker.job import Job
from broker.node import Node
from broker.queue import PAUSED_OUT, Queue
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.replication import local_fields, wire_fields
from cluster.subprotocol import SubProtocol
from cluster.tombstones import Tombstones
from disquette import job_record as field
from protocol import bus as B

ADHOC_MIN_MS, ADHOC_MAX_MS = 25, 2000
BCAST_MIN_MS, BCAST_MAX_MS = 2000, 30_000
RESPONDER_TTL_MS = 5000         # a node that sent jobs recently is asked first
INTEREST_GRACE_MS = 1000        # how long past its next ask we remember an asker


def _delay(attempt: int, low: int, high: int) -> int:
    return 0 if attempt == 0 else min(low << (attempt - 1), high)


class Federation(SubProtocol):
    """Owns ``hungry`` (queues with clients waiting for jobs), ``interest``
    (queue -> {asking node: until}: who asked us for jobs we did not have;
    one dict for the node's life, which Cluster reads on every job queued),
    ``push_pending`` (queues that got a job since, pushed on the next tick)
    and ``importing`` (true while YOURJOBS queues jobs here: those are not
    pushed on). The queues' own NEEDJOBS backoff and import rate stay on
    them (broker/queue.py)."""

    def __init__(self, broker: Node, membership: Membership, outbox: Outbox,
                 tombstones: Tombstones) -> None:
        super().__init__(broker, membership, outbox, tombstones)
        self.hungry: set[bytes] = set()
        self.interest: dict[bytes, dict[str, int]] = {}
        self.importing = False
        self.push_pending: set[bytes] = set()

    def need_jobs(self, q: Queue, now: int) -> None:
        """Ask for jobs for q if its backoff allows (called while clients wait).
        While recent sources answer, every reachable node is still asked now and
        then (at most every BCAST_MIN_MS), as Disque's needJobsForQueue does: a
        node with no consumer of its own is found only that way (issue 25: a
        copy re-queued there waited until that node died, its disk damaged)."""
        if self.m.leaving or q.jobs:
            return
        self.hungry.add(q.name)
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
                self.outbox.send_many(sorted(responders), B.NEEDJOBS,
                                      [q.name, count, next_ask])
        delay = _delay(q.needjobs_bcast_attempt, BCAST_MIN_MS, BCAST_MAX_MS)
        if responders:
            delay = max(delay, BCAST_MIN_MS)
        if now >= q.needjobs_bcast_time + delay:
            q.needjobs_bcast_time = now
            q.needjobs_bcast_attempt += 1
            next_ask = _delay(q.needjobs_bcast_attempt, BCAST_MIN_MS, BCAST_MAX_MS)
            self.outbox.send_many(self.m.reachable_ids(), B.NEEDJOBS, [q.name, count, next_ask])

    def job_queued(self, job: Job) -> None:
        """A job was queued here while some node wants jobs: pushed on the next
        tick (the command that queued it answers first)."""
        if self.interest and not self.importing:
            self.push_pending.add(job.queue)

    def broadcast_pause(self, q: Queue) -> None:
        """PAUSE ... BCAST."""
        self.outbox.send_many(self.m.reachable_ids(), B.PAUSE, [q.name, q.flags])

    def tick(self, now: int) -> None:
        broker = self.broker
        if self.push_pending:
            for name in sorted(self.push_pending):
                q = broker.queues.get(name)
                if q is not None and q.jobs:
                    self.push_to_interested(q, now)
            self.push_pending.clear()
        hungry = self.hungry
        if not hungry:
            return
        for name in list(hungry):
            q = broker.queues.get(name)
            if q is None or not q.blocked:
                hungry.discard(name)
                if q is not None:
                    q.needjobs_adhoc_attempt = q.needjobs_bcast_attempt = 0
                continue
            self.need_jobs(q, now)

    def _take_jobs(self, q: Queue, count: int, receiver: str, now: int) -> list:
        """Dequeue up to count jobs for another node (moving RETRY 0 jobs)."""
        broker = self.broker
        out = []
        while len(out) < count and q.jobs:
            job = q.jobs.pop(0)
            q.jobs_out += 1
            fields = wire_fields(job, now)
            lifecycle.take_for_peer(broker, job, receiver, now)
            fields[field.NODES_DELIVERED] = job.nodes_delivered if job.retry else None
            out.append(fields)
        q.atime = now
        return out

    def push_to_interested(self, q: Queue, now: int) -> bool:
        """A job was queued with no local consumer: hand it to a node that asked."""
        interest = self.interest
        if not interest or self.importing or q.blocked or q.flags & PAUSED_OUT:
            return False
        askers = interest.get(q.name)
        if not askers:
            return False
        for nid, until in list(askers.items()):
            if until < now or nid not in self.m.reachable_ids():
                del askers[nid]
        if not askers:
            del interest[q.name]
            return False
        target = min(askers)
        self.outbox.send(target, B.YOURJOBS, self._take_jobs(q, len(q.jobs), target, now))
        return True

    # ---------------------------------------------------------------- messages
    def on_needjobs(self, sender: str, payload: list, now: int) -> None:
        name, count = bytes(payload[0]), payload[1]
        next_ask = payload[2] if len(payload) > 2 else BCAST_MIN_MS
        q = self.broker.queues.get(name)
        if q is None or not q.jobs or q.flags & PAUSED_OUT:
            self.interest.setdefault(name, {})[sender] = now + next_ask + INTEREST_GRACE_MS
            return
        n = min(count, len(q.jobs) // 2) or 1
        self.outbox.send(sender, B.YOURJOBS, self._take_jobs(q, n, sender, now))

    def on_yourjobs(self, sender: str, jobs: list, now: int) -> None:
        broker = self.broker
        tombstones = self.tombstones
        imported = 0
        q = None
        self.importing = True       # imported jobs are not pushed on to other askers
        for fields in jobs:
            if fields[field.ID] in tombstones.ids and broker.get_job(fields[field.ID]) is None:
                if fields[field.ID] in tombstones.acked:
                    # A copy that missed the ack (a node that was down, an AOF that
                    # lost its ack record): acked here, so acked there too; dropped
                    # silently, its holder would queue it every RETRY until the
                    # tombstone expires, then deliver an acked job again.
                    self.outbox.send(sender, B.SETACK, [fields[field.ID], 0])
                continue
            job = lifecycle.adopt_moved(broker, local_fields(fields, now), sender, now)
            if job is None:
                continue
            if lifecycle.queue(broker, job, now):
                imported += 1
            q = broker.queues.get(job.queue)
        self.importing = False
        if q is not None and imported:
            if q.needjobs_responders is None:
                q.needjobs_responders = {}
            q.needjobs_responders[sender] = now
            q.needjobs_adhoc_attempt = 0
            q.count_imports(imported, now)

    def on_pause(self, sender: str, payload: list, now: int) -> None:
        broker = self.broker
        q = broker.get_queue(bytes(payload[0]), create=True)
        broker.set_queue_pause(q, payload[1])
