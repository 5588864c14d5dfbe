"""The HTTP shell's command path (server/http/session.py) on a whole node in
this process (the ``inprocess`` fixture), without sockets: replies resolve
the request's futures, blocked commands get their own core client, closing a
request unblocks its GETJOB."""

from __future__ import annotations

import asyncio

from protocol.resp import NULL_ARRAY, Error
from server.http.session import ConnectionGone, Session


def session(inprocess) -> Session:
    return Session(inprocess.node, inprocess.driver, asyncio.get_running_loop(), "test", "")


async def test_a_request_runs_the_same_commands(inprocess):
    s = session(inprocess)
    jid = await s.call("ADDJOB", "q", "body", 0)
    assert isinstance(jid, str) and jid.startswith("D-")
    assert await s.call("QLEN", "q") == 1
    assert await s.call("ADDJOB", "q", "x", 0, "RETRY", -1) == Error(
        "ERR RETRY time must be a non negative number")
    assert len(s.conns) == 1        # nothing blocked: one core client
    s.close()
    assert inprocess.node.clients == {}


async def test_blocked_getjob_woken_and_unblocked_on_close(inprocess):
    waiting = session(inprocess)
    fut = waiting.submit([b"GETJOB", b"FROM", b"q"])
    waiting.flush()
    assert not fut.done() and inprocess.node.blocked_count == 1
    # While it waits, the same request can still run commands (a fresh client).
    assert await waiting.call("QLEN", "q") == 0
    assert len(waiting.conns) == 2
    producer = session(inprocess)
    jid = await producer.call("ADDJOB", "q", "wake", 0)
    reply = await fut
    assert reply[0][1].decode() == jid and reply[0][2] == b"wake"
    # A request that goes away: its GETJOB is unblocked, nothing delivered.
    gone = session(inprocess)
    fut = gone.submit([b"GETJOB", b"TIMEOUT", b"0", b"FROM", b"other"])
    gone.flush()
    assert inprocess.node.blocked_count == 1
    gone.close()
    assert inprocess.node.blocked_count == 0
    assert isinstance(fut.exception(), ConnectionGone)
    await producer.call("ADDJOB", "other", "kept", 0)
    assert await producer.call("QLEN", "other") == 1
    for s in (waiting, producer):
        s.close()


async def test_getjob_timeout_in_virtual_time(inprocess):
    s = session(inprocess)
    fut = s.submit([b"GETJOB", b"TIMEOUT", b"100", b"FROM", b"q"])
    s.flush()
    inprocess.advance(150)
    assert await fut is NULL_ARRAY
    s.close()
