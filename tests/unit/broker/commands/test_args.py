"""broker/commands/args.py and the commands' own checks: a wrong request is
the client's error, with Disque's words, as RESP too; nothing is changed."""

from __future__ import annotations

import pytest

from protocol.resp import Error


@pytest.mark.parametrize("args, error", [
    (("ADDJOB", "q", "x", "abc"), "ERR timeout is not an integer or out of range"),
    (("ADDJOB", "q", "x", "-1"), "ERR timeout is negative"),
    (("ADDJOB", "q", "x", 0, "REPLICATE", 0), "ERR REPLICATE must be between 1 and 65535"),
    (("ADDJOB", "q", "x", 0, "RETRY", 0, "REPLICATE", 2),
     "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"),
    (("ADDJOB", "q", "x", 0, "BOGUS"), "ERR syntax error"),
    (("ADDJOB", "q", "x", 0, "REPLICATE", 2),
     "NOREPL Not enough reachable nodes for the requested replication level"),
    (("GETJOB", "FROM"), "ERR syntax error"),
    (("GETJOB", "COUNT", 0, "FROM", "q"), "ERR COUNT must be a number greater than zero"),
    (("ACKJOB", "nope"), "BADID Invalid Job ID format."),
    (("WORKING", "D-00000000-000000000000000000000000-0001"),
     "NOJOB Job not known in the context of this node."),
    (("JSCAN", "STATE", "nope"), "ERR Invalid job state name"),
    (("NOSUCH", "x"), "ERR unknown command 'NOSUCH'"),
    (("QLEN",), "ERR wrong number of arguments for 'qlen' command"),
])
def test_errors_are_the_clients_with_their_words(inprocess, args, error):
    reply = inprocess.call(*args)
    assert isinstance(reply, Error) and reply == error
    assert inprocess.resp(*args) == b"-" + error.encode() + b"\r\n"
