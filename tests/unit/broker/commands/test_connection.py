"""broker/commands/connection.py: HELLO, PING, ECHO on an in-process node."""

from __future__ import annotations


def test_hello_shape_under_resp2_and_resp3(inprocess):
    hello = inprocess.call("HELLO")
    assert hello[0] == 1 and hello[1] == inprocess.node.myself_id.encode()
    assert hello[2][3] == b"1"
    assert inprocess.resp("HELLO", 3).startswith(b"%7\r\n")


def test_ping_and_echo(inprocess):
    assert inprocess.resp("PING") == b"+PONG\r\n"
    assert inprocess.call("ECHO", "hi") == b"hi"
