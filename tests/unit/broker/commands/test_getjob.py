"""broker/commands/getjob.py: GETJOB's replies (jobs, counters, the null
array), blocking and its timeout, on an in-process node."""

from __future__ import annotations

from broker.node import BLOCKED
from protocol.resp import NULL_ARRAY


def test_getjob_reply_shapes_and_blocking(inprocess):
    c = inprocess.new_client()
    assert inprocess.resp("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    assert inprocess.resp("GETJOB", "NOHANG", "FROM", "q", proto=3) == b"_\r\n"
    assert inprocess.call("GETJOB", "TIMEOUT", 100, "FROM", "q", client=c) is BLOCKED
    jid = inprocess.call("ADDJOB", "q", "body", 0)
    assert c.conn.replies == [[[b"q", jid.encode(), b"body"]]]
    inprocess.call("NACK", jid)
    got = inprocess.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", jid.encode(), b"body", b"nacks", 1, b"additional-deliveries", 0]]
    assert inprocess.call("GETJOB", "TIMEOUT", 100, "FROM", "q", client=c) is BLOCKED
    inprocess.advance(150)
    assert c.conn.replies[-1] is NULL_ARRAY          # timed out: a null array


def test_getjob_takes_count_jobs_oldest_first_from_the_first_queue_that_has_some(inprocess):
    ids = [inprocess.call("ADDJOB", "q2", "x%d" % i, 0).encode() for i in range(3)]
    got = inprocess.call("GETJOB", "COUNT", 2, "FROM", "q1", "q2")
    assert [j[1] for j in got] == ids[:2] and inprocess.call("QLEN", "q2") == 1
