"""broker/commands/queues.py: QLEN, QPEEK, QSTAT, PAUSE on an in-process node."""

from __future__ import annotations

from protocol.resp import NULL_ARRAY


def test_qstat_shape_under_resp2_and_resp3(inprocess):
    inprocess.call("ADDJOB", "q", "x", 0)
    qstat = inprocess.call("QSTAT", "q")
    assert qstat[0::2] == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                           b"import-rate", b"jobs-in", b"jobs-out", b"pause"]
    assert inprocess.resp("QSTAT", "q", proto=3).startswith(b"*20\r\n")   # stays flat


def test_qpeek_shows_without_taking_and_pause_stops_getjob(inprocess):
    first = inprocess.call("ADDJOB", "q", "a", 0).encode()
    inprocess.call("ADDJOB", "q", "b", 0)
    assert [j[1] for j in inprocess.call("QPEEK", "q", 1)] == [first]
    assert inprocess.call("QLEN", "q") == 2
    assert inprocess.call("PAUSE", "q", "out") == "out"
    assert inprocess.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    assert inprocess.call("QLEN", "q") == 2
