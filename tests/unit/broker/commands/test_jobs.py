"""broker/commands/jobs.py: ADDJOB, SHOW, DELJOB through the node's command
dispatch, on a whole node in this process (the ``inprocess`` fixture: no
socket, no process, virtual time)."""

from __future__ import annotations

from protocol.resp import Status


def test_addjob_answers_a_status_id_and_show_has_the_15_fields(inprocess):
    jid = inprocess.call("ADDJOB", "q", "body", 0, "RETRY", 5, "TTL", 100)
    assert isinstance(jid, Status) and len(jid) == 40
    assert inprocess.resp("ADDJOB", "q", "x", 0).startswith(b"+D-")
    show = inprocess.call("SHOW", jid)
    assert show[0::2] == [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay",
                          b"retry", b"nacks", b"additional-deliveries", b"nodes-delivered",
                          b"nodes-confirmed", b"next-requeue-within", b"next-awake-within",
                          b"body"]
    fields = dict(zip(show[0::2], show[1::2]))
    assert fields[b"state"] == b"queued" and fields[b"retry"] == 5 and fields[b"ttl"] == 100
    assert inprocess.resp("SHOW", "D-00000000-000000000000000000000000-0001") == b"$-1\r\n"
    assert inprocess.resp("SHOW", "D-00000000-000000000000000000000000-0001",
                          proto=3) == b"_\r\n"


def test_deljob_deletes_the_known_jobs_and_counts_them(inprocess):
    a, b = inprocess.call("ADDJOB", "q", "a", 0), inprocess.call("ADDJOB", "q", "b", 0)
    assert inprocess.call("DELJOB", a, b, "D-00000000-000000000000000000000000-0001") == 2
    assert inprocess.call("QLEN", "q") == 0 and inprocess.call("SHOW", a) is None
