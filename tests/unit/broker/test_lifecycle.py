"""broker/lifecycle.py: a job's states on one node, as its callers (the
commands, the cluster's handlers, the timers) drive them: what the node then
holds (state, queue, timer) and the AOF records it leaves. On a bare Node
(broker/node.py, a Registry: the null cluster, a lone node) in virtual time."""

from __future__ import annotations

import random

import pytest

from broker import lifecycle
from broker.commands import COMMANDS
from broker.config import Config
from broker.job import ACKED, ACTIVE, HELD, QUEUED, WAIT_REPL, job_to_fields
from broker.node import Node
from broker.records import REC_ACK, REC_DEL, REC_EXPIRED, REC_NACK, REC_RELEASED
from server.sim.clock import VirtualClock

PEER = "f" * 40


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
def node(clock):
    node = Node(Config(), clock, random.Random(1), commands=COMMANDS, strict=True)
    node.persist = True
    return node


def advance(node: Node, clock: VirtualClock, ms: int) -> None:
    """The node's timers, run as the shell runs them, for ``ms``."""
    end = clock.now + ms
    while clock.now < end:
        clock.now = min(end, max(clock.now + 1, min(node.next_deadline(), end)))
        node.tick()


def new(node: Node, clock: VirtualClock, queue=b"q", retry=5, ttl=60, delay=0):
    return lifecycle.new_job(node, queue, b"body", 1, ttl, delay, retry, clock.now)


def queued_ids(node: Node, queue=b"q") -> list:
    q = node.queues.get(queue)
    return [j.id for j in q.jobs] if q is not None else []


def test_add_makes_a_job_live_queued_and_logged(node, clock):
    job = new(node, clock)
    assert job.state == WAIT_REPL and node.get_job(job.id) is None     # not registered yet
    lifecycle.add(node, job, clock.now)
    assert node.get_job(job.id) is job and job.state == QUEUED
    assert queued_ids(node) == [job.id]
    assert node.take_records() == [job]


def test_a_pending_job_is_neither_queued_nor_logged_until_activated(node, clock):
    job = new(node, clock)
    lifecycle.add_pending(node, job)
    assert job.state == WAIT_REPL and node.get_job(job.id) is job
    assert queued_ids(node) == [] and node.take_records() == []
    lifecycle.activate(node, job, clock.now)
    assert job.state == QUEUED and queued_ids(node) == [job.id]
    assert node.take_records() == [job]


def test_a_delayed_job_is_queued_by_its_timer(node, clock):
    job = new(node, clock, delay=2)
    lifecycle.add(node, job, clock.now)
    assert job.state == ACTIVE and queued_ids(node) == []
    advance(node, clock, 1999)
    assert queued_ids(node) == []
    advance(node, clock, 1)
    assert job.state == QUEUED and queued_ids(node) == [job.id]


def test_a_delivered_job_not_acked_is_queued_again_after_its_retry(node, clock):
    job = new(node, clock, retry=2)
    lifecycle.add(node, job, clock.now)
    assert lifecycle.deliver(node, node.queues[b"q"], clock.now) is job
    assert job.state == ACTIVE and queued_ids(node) == []
    advance(node, clock, 2500)      # retry 2 s, with its jitter
    assert job.state == QUEUED and job.additional_deliveries == 1
    assert node.stats["requeued_jobs"] == 1


def test_an_at_most_once_job_is_delivered_once(node, clock):
    job = new(node, clock, retry=0)
    lifecycle.add(node, job, clock.now)
    lifecycle.deliver(node, node.queues[b"q"], clock.now)
    assert lifecycle.requeue(node, job, clock.now, nack=True) is False
    advance(node, clock, 30_000)
    assert job.state == ACTIVE and queued_ids(node) == []


def test_a_nack_counts_and_queues_it_again(node, clock):
    node.persist_history = True
    job = new(node, clock)
    lifecycle.add(node, job, clock.now)
    lifecycle.deliver(node, node.queues[b"q"], clock.now)
    node.take_records()
    assert lifecycle.requeue(node, job, clock.now, nack=True) is True
    assert job.state == QUEUED and job.nacks == 1 and job.additional_deliveries == 0
    assert (REC_NACK, job.id) in node.take_records()
    assert lifecycle.requeue(node, job, clock.now, nack=True) is False     # queued already


def test_a_held_job_waits_for_its_release(node, clock):
    job = new(node, clock, retry=1)
    lifecycle.hold(job)
    lifecycle.add(node, job, clock.now)
    assert job.state == HELD
    advance(node, clock, 10_000)            # no timer queues a held job
    assert job.state == HELD and queued_ids(node) == []
    node.take_records()
    assert lifecycle.requeue(node, job, clock.now, nack=False) is True     # ENQUEUE
    assert job.state == QUEUED and job.additional_deliveries == 0
    assert node.take_records() == [(REC_RELEASED, job.id)]


def test_an_acked_job_leaves_its_queue_and_stays_acked_until_deleted(node, clock):
    job = new(node, clock)
    lifecycle.add(node, job, clock.now)
    node.take_records()
    lifecycle.ack(node, job, clock.now, gc_in=100)
    assert job.state == ACKED and queued_ids(node) == []
    assert node.take_records() == [(REC_ACK, job.id)]
    advance(node, clock, 10_000)    # the ack GC is the cluster's: a lone node keeps it
    assert job.state == ACKED and node.get_job(job.id) is job
    lifecycle.delete(node, job)
    assert node.get_job(job.id) is None and node.job_count == 0
    assert node.take_records() == [(REC_DEL, job.id)]


def test_a_job_expires_at_its_ttl_wherever_it_is(node, clock):
    node.persist_history = True
    queued, delivered = new(node, clock, ttl=3), new(node, clock, ttl=3)
    lifecycle.add(node, queued, clock.now)
    lifecycle.add(node, delivered, clock.now)
    lifecycle.deliver(node, node.queues[b"q"], clock.now)
    node.take_records()
    advance(node, clock, 3000)
    assert node.job_count == 0 and queued_ids(node) == []
    assert sorted(node.take_records()) == sorted([(REC_EXPIRED, queued.id),
                                                  (REC_EXPIRED, delivered.id)])
    assert node.stats["expired_jobs"] == 2


def test_delete_forgets_the_job_and_its_accounting(node, clock):
    job = new(node, clock)
    lifecycle.add(node, job, clock.now)
    assert node.jobs_memory == job.memory_size()
    lifecycle.delete(node, job)
    assert node.get_job(job.id) is None and queued_ids(node) == []
    assert node.job_count == 0 and node.jobs_memory == 0
    lifecycle.delete(node, job)             # twice: nothing more
    assert node.job_count == 0


def test_a_copy_from_a_peer_is_active_held_by_both_and_queued_only_by_its_timer(node, clock):
    origin = Node(Config(), clock, random.Random(2), node_id=PEER, commands=COMMANDS)
    job = new(origin, clock, retry=3)
    job.nodes_delivered = origin.holders.of((PEER, node.myself_id))
    copy = lifecycle.adopt_replica(node, job_to_fields(job), clock.now)
    assert copy.state == ACTIVE and node.get_job(job.id) is copy
    assert copy.nodes_delivered == tuple(sorted((PEER, node.myself_id)))
    assert node.take_records() == [copy]
    advance(node, clock, 2500)
    assert queued_ids(node) == []
    advance(node, clock, 1000)              # its retry from now, with jitter
    assert queued_ids(node) == [job.id]
    # The same copy again: the one copy, told what it did not know.
    job.nacks = 4
    assert lifecycle.adopt_replica(node, job_to_fields(job), clock.now) is copy
    assert copy.nacks == 4 and node.job_count == 1


def test_flush_all_drops_every_job_and_queue(node, clock):
    for _ in range(3):
        lifecycle.add(node, new(node, clock), clock.now)
    lifecycle.flush_all(node)
    assert node.job_count == 0 and list(node.iter_jobs()) == [] and queued_ids(node) == []
