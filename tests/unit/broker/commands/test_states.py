"""broker/commands/states.py: ACKJOB, FASTACK, NACK, WORKING, ENQUEUE, DEQUEUE
move a job between states, as SHOW and the queue then tell, on an in-process
node."""

from __future__ import annotations


def state(inprocess, jid) -> bytes:
    show = inprocess.call("SHOW", jid)
    return dict(zip(show[0::2], show[1::2]))[b"state"]


def test_dequeue_and_enqueue_move_a_job_out_of_and_back_into_its_queue(inprocess):
    jid = inprocess.call("ADDJOB", "q", "x", 0)
    assert inprocess.call("DEQUEUE", jid) == 1 and state(inprocess, jid) == b"active"
    assert inprocess.call("QLEN", "q") == 0
    assert inprocess.call("ENQUEUE", jid) == 1 and state(inprocess, jid) == b"queued"
    assert inprocess.call("ENQUEUE", jid) == 0          # queued already


def test_nack_queues_it_again_counting_the_nack(inprocess):
    jid = inprocess.call("ADDJOB", "q", "x", 0)
    inprocess.call("GETJOB", "FROM", "q")
    assert inprocess.call("NACK", jid) == 1
    got = inprocess.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got[0][1] == jid.encode() and got[0][4] == 1


def test_working_postpones_the_requeue_and_answers_the_seconds(inprocess):
    jid = inprocess.call("ADDJOB", "q", "x", 0, "RETRY", 10, "TTL", 100)
    inprocess.call("GETJOB", "FROM", "q")
    assert inprocess.call("WORKING", jid) == 10
    inprocess.advance(9_000)
    assert inprocess.call("QLEN", "q") == 0


def test_ackjob_and_fastack_on_a_lone_node_delete_at_once(inprocess):
    a, b = inprocess.call("ADDJOB", "q", "a", 0), inprocess.call("ADDJOB", "q", "b", 0)
    assert inprocess.call("ACKJOB", a) == 1 and inprocess.call("SHOW", a) is None
    assert inprocess.call("FASTACK", b) == 1 and inprocess.call("SHOW", b) is None
    assert inprocess.call("ACKJOB", a) == 0             # known no more
