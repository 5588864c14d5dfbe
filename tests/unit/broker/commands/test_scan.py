"""broker/commands/scan.py: JSCAN and QSCAN walk every job and queue present
for the whole iteration, with their filters, on an in-process node."""

from __future__ import annotations


def scan_all(inprocess, *args):
    cursor, seen = b"0", []
    while True:
        cursor, items = inprocess.call(*args[:1], cursor, *args[1:])
        seen += items
        if cursor == b"0":
            return seen


def test_jscan_returns_every_job_once_and_filters_by_queue_and_state(inprocess):
    ids = {inprocess.call("ADDJOB", "q%d" % (i % 2), "x", 0) for i in range(50)}
    assert sorted(scan_all(inprocess, "JSCAN", "COUNT", 7)) == sorted(ids)
    in_q0 = scan_all(inprocess, "JSCAN", "QUEUE", "q0")
    assert len(in_q0) == 25 and set(in_q0) <= ids
    inprocess.call("GETJOB", "FROM", "q1")
    assert len(scan_all(inprocess, "JSCAN", "STATE", "active")) == 1


def test_qscan_lists_the_queues_by_length(inprocess):
    for i in range(3):
        inprocess.call("ADDJOB", "long", "x", 0)
    inprocess.call("ADDJOB", "short", "x", 0)
    assert sorted(scan_all(inprocess, "QSCAN")) == [b"long", b"short"]
    assert scan_all(inprocess, "QSCAN", "MINLEN", 2) == [b"long"]
