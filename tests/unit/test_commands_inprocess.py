"""Argument parsing and reply shapes, driven on a whole node in this process
(the ``inprocess`` fixture: no socket, no process, virtual time). What crosses a
socket (the RESP reader, pipelining, limits, real clients) is tested over real
sockets in tests/integration/."""

from __future__ import annotations

import pytest

from broker.node import BLOCKED
from protocol.resp import NULL_ARRAY, Error, Status


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


def test_qstat_and_hello_shapes_under_resp2_and_resp3(inprocess):
    inprocess.call("ADDJOB", "q", "x", 0)
    qstat = inprocess.call("QSTAT", "q")
    assert qstat[0::2] == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                           b"import-rate", b"jobs-in", b"jobs-out", b"pause"]
    assert inprocess.resp("QSTAT", "q", proto=3).startswith(b"*20\r\n")   # stays flat
    hello = inprocess.call("HELLO")
    assert hello[0] == 1 and hello[1] == inprocess.node.myself_id.encode()
    assert hello[2][3] == b"1"
    assert inprocess.resp("HELLO", 3).startswith(b"%7\r\n")
    assert inprocess.resp("CONFIG", "GET", "port", proto=3) == b"%1\r\n$4\r\nport\r\n$4\r\n7711\r\n"


def test_info_lists_the_error_counters_and_the_aof_off(inprocess):
    info = inprocess.call("INFO", "stats", "persistence")     # verbatim text
    for field in ("internal_errors:0", "malformed_bus_messages:0", "aof_enabled:0",
                  "aof_state:off", "aof_fsync_policy:everysec"):
        assert field + "\r\n" in info


def test_a_bug_in_a_command_is_raised_in_tests_and_counted_in_production(inprocess, monkeypatch):
    from broker.commands import COMMANDS

    def broken(node, client, argv):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(COMMANDS[b"qlen"], "handler", broken)
    with pytest.raises(KeyError):
        inprocess.call("QLEN", "q")
    inprocess.node.strict = False           # the process: log, count, keep serving
    reply = inprocess.call("QLEN", "q")
    assert isinstance(reply, Error) and reply.startswith("ERR internal error: KeyError")
    assert "internal_errors:1\r\n" in inprocess.call("INFO", "stats")
    assert inprocess.call("PING") == "PONG"


def test_config_set_takes_one_route_to_the_cluster(inprocess):
    assert inprocess.call("CONFIG", "SET", "cluster-node-timeout", 1234) == "OK"
    assert inprocess.cluster.m.node_timeout == 1234
    inprocess.call("CONFIG", "SET", "cluster-announce-ip", "10.1.2.3")
    assert inprocess.cluster.m.myself.ip == "10.1.2.3"
    assert "10.1.2.3" in inprocess.saved_nodes_conf


def test_node_id_and_leaving_live_in_the_node_table(inprocess):
    m = inprocess.cluster.m
    assert inprocess.call("CLUSTER", "MYID") == m.node_id.encode()
    assert inprocess.call("CLUSTER", "LEAVING", "yes") == "OK"
    assert inprocess.node.cluster.leaving() and m.leaving
    assert inprocess.call("CLUSTER", "LEAVING") == "yes"
    old = m.node_id
    inprocess.call("CLUSTER", "RESET", "HARD")
    assert inprocess.node.myself_id == m.node_id != old
