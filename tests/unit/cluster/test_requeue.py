"""cluster/requeue.py: Requeue keeps the holders of a job from queueing it
twice (WILLQUEUE, QUEUED, WORKING) and owns heard_queued (a QUEUED or
WILLQUEUE for a job not held here yet). On three in-process nodes."""

from __future__ import annotations

from broker.job import ACTIVE, QUEUED
from cluster.replication import wire_fields
from cluster.requeue import REQUEUE_STAGGER_MS
from cluster.tombstones import TOMBSTONE_MS
from protocol import bus as B
from tests.unit.inprocess_cluster import Nodes


def replicated(nodes: Nodes, *options) -> bytes:
    client = nodes[0].new_client()
    nodes[0].run(client, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3",
                          *(str(o).encode() for o in options)])
    nodes.deliver()
    (reply,) = client.conn.replies
    return reply.encode()


def states(nodes: Nodes, jid: bytes) -> list[int]:
    return [n.node.get_job(jid).state for n in nodes.nodes]


def test_a_job_not_acked_in_time_is_queued_again_by_one_holder():
    nodes = Nodes(3)
    jid = replicated(nodes, "RETRY", 2)
    assert states(nodes, jid) == [QUEUED, ACTIVE, ACTIVE]
    assert nodes[0].call("GETJOB", "NOHANG", "FROM", "q")[0][1] == jid
    nodes.carried.clear()
    nodes.advance(6000)             # retry, jitter and the holders' stagger
    assert B.WILLQUEUE in {t for _, _, t in nodes.carried}
    assert B.QUEUED in {t for _, _, t in nodes.carried}
    assert states(nodes, jid).count(QUEUED) == 1


def test_willqueue_is_answered_queued_by_a_holder_that_has_it_queued():
    nodes = Nodes(3)
    jid = replicated(nodes)
    job_b = nodes[1].node.get_job(jid)
    nodes.clock.now += 1000
    before = job_b.requeue_time
    nodes.carried.clear()
    nodes[1].cluster.requeue.on_willqueue(nodes.id(0), jid, nodes.clock.now)
    nodes[1].driver.after_input()
    assert job_b.state == ACTIVE    # not queued on b: no answer
    nodes.deliver()
    assert nodes.carried == []
    nodes[0].cluster.requeue.on_willqueue(nodes.id(1), jid, nodes.clock.now)
    nodes[0].driver.after_input()
    nodes.deliver()
    assert (nodes.id(0), nodes.id(1), B.QUEUED) in nodes.carried
    assert job_b.state == ACTIVE and job_b.requeue_time > before     # postponed


def test_the_stagger_puts_holders_with_smaller_ids_first():
    nodes = Nodes(3)
    jid = replicated(nodes)
    ids = sorted(nodes.id(i) for i in range(3))
    for i in range(3):
        job = nodes[i].node.get_job(jid)
        ahead = ids.index(nodes.id(i))
        assert nodes[i].cluster.requeue.send_willqueue(job) == ahead * REQUEUE_STAGGER_MS


def test_a_queued_for_a_job_not_held_yet_releases_its_held_copy_on_arrival():
    nodes = Nodes(3)
    a = nodes[0]
    jid = a.call("ADDJOB", "q", "body", 0, "REPLICATE", 2, "HOLD", "ASYNC").encode()
    nodes.deliver()
    late = next(n for n in nodes.nodes if n.node.get_job(jid) is None)
    # The job is released elsewhere; the QUEUED saying so comes before a
    # REPLJOB for it (another link).
    requeue = late.cluster.requeue
    requeue.on_queued(nodes.id(0), [jid, 0, 0], nodes.clock.now)
    assert requeue.heard_queued == {jid: nodes.clock.now + TOMBSTONE_MS}
    fields = wire_fields(a.node.get_job(jid), nodes.clock.now)
    late.cluster.replication.on_repljob(nodes.id(0), fields, nodes.clock.now)
    assert late.node.get_job(jid).state == ACTIVE       # released at once, not held
    nodes.advance(TOMBSTONE_MS + 10)
    assert jid not in requeue.heard_queued              # forgotten once expired


def test_working_postpones_the_other_holders_requeue():
    nodes = Nodes(3)
    jid = replicated(nodes, "RETRY", 10)
    before = [n.node.get_job(jid).requeue_time for n in nodes.nodes[1:]]
    nodes.clock.now += 1000
    assert nodes[0].call("WORKING", jid) == 10
    nodes.deliver()
    after = [n.node.get_job(jid).requeue_time for n in nodes.nodes[1:]]
    assert all(b > a for a, b in zip(before, after))
