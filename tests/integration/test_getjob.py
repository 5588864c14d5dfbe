"""GETJOB on a real node: NOHANG, TIMEOUT, COUNT round robin, WITHCOUNTERS,
blocking woken by ADDJOB / NACK / ENQUEUE from another client, PAUSE effects,
and the exact null forms of RESP2 and RESP3."""

from __future__ import annotations

import time

import pytest

from tests.harness import NODE_WAIT_MS, encode_command, wait_until
from tests.integration.conftest import addjob, show


def blocked_on(node, queue) -> int:
    c = node.client()
    stat = c.execute_command("QSTAT", queue)
    return 0 if stat is None else stat[stat.index(b"blocked") + 1]


def start_blocking(node, *args, protocol=2):
    """Send a GETJOB that is expected to block on a raw connection; return it
    once the node counts the client as blocked on the last queue named."""
    w = node.raw()
    if protocol == 3:
        assert w.call("HELLO", "3").startswith(b"%")
    queue = args[-1]
    before = blocked_on(node, queue)
    w.send(encode_command("GETJOB", *args))
    wait_until(lambda: blocked_on(node, queue) > before,
               message=f"GETJOB {args} did not block")
    return w


def job_bytes(queue: bytes, jid: bytes, body: bytes) -> bytes:
    return b"*3\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n" % (len(queue), queue, jid, len(body), body)


# --------------------------------------------------------------- null replies
@pytest.mark.parametrize("proto,null", [(2, b"*-1\r\n"), (3, b"_\r\n")])
def test_nohang_empty_is_null_array(snode, proto, null):
    r = snode.raw()
    if proto == 3:
        r.call("HELLO", "3")
    assert r.call("GETJOB", "NOHANG", "FROM", "nothing") == null
    assert r.call("GETJOB", "NOHANG", "COUNT", "10", "WITHCOUNTERS", "FROM", "a", "b") == null
    c = snode.client(protocol=proto)
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "nothing") is None


@pytest.mark.parametrize("proto,null", [(2, b"*-1\r\n"), (3, b"_\r\n")])
def test_timeout_returns_null_after_the_timeout(snode, proto, null):
    r = snode.raw()
    if proto == 3:
        r.call("HELLO", "3")
    t0 = time.monotonic()
    assert r.call("GETJOB", "TIMEOUT", "200", "FROM", "nothing") == null
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.18, elapsed     # no upper bound: a loaded machine is slow
    # The connection is usable afterwards.
    assert r.call("PING") == b"+PONG\r\n"


def test_reply_shape_byte_exact(snode):
    r = snode.raw()
    jid = r.call("ADDJOB", "q", "body", "0")[1:-2]
    assert r.call("GETJOB", "FROM", "q") == b"*1\r\n" + job_bytes(b"q", jid, b"body")
    r.call("NACK", jid)
    assert r.call("GETJOB", "WITHCOUNTERS", "FROM", "q") == (
        b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n" + jid + b"\r\n$4\r\nbody\r\n"
        b"$5\r\nnacks\r\n:1\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


# -------------------------------------------------------------- argument errors
@pytest.mark.parametrize("args,reply", [
    ((), b"-ERR wrong number of arguments for 'getjob' command\r\n"),
    (("FROM",), b"-ERR syntax error\r\n"),       # as Disque (arity -2)
    (("NOHANG", "FROM"), b"-ERR syntax error\r\n"),
    (("NOHANG", "q"), b"-ERR syntax error\r\n"),
    (("BOGUS", "FROM", "q"), b"-ERR syntax error\r\n"),
    (("COUNT", "0", "FROM", "q"), b"-ERR COUNT must be a number greater than zero\r\n"),
    (("COUNT", "-1", "FROM", "q"), b"-ERR COUNT must be a number greater than zero\r\n"),
    (("COUNT", "x", "FROM", "q"), b"-ERR COUNT must be a number greater than zero\r\n"),
    (("TIMEOUT", "-1", "FROM", "q"), b"-ERR timeout is negative\r\n"),
    (("TIMEOUT", "x", "FROM", "q"), b"-ERR timeout is not an integer or out of range\r\n"),
    (("TIMEOUT",), b"-ERR syntax error\r\n"),
])
def test_getjob_argument_errors(snode, args, reply):
    assert snode.raw().call("GETJOB", *args) == reply


def test_options_after_from_are_queue_names(snode):
    c = snode.client()
    jid = addjob(c, "COUNT", "b")
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "COUNT", "5") == [[b"COUNT", jid, b"b"]]


# ------------------------------------------------------------------ COUNT
def test_count_round_robin_across_queues(snode):
    c = snode.client()
    a = [addjob(c, "qa", f"a{i}") for i in range(3)]
    b = [addjob(c, "qb", "b0")]
    d = [addjob(c, "qc", f"c{i}") for i in range(2)]
    got = c.execute_command("GETJOB", "COUNT", 5, "FROM", "qa", "qb", "qc")
    assert [j[1] for j in got] == [a[0], b[0], d[0], a[1], d[1]]
    assert [j[0] for j in got] == [b"qa", b"qb", b"qc", b"qa", b"qc"]
    got = c.execute_command("GETJOB", "COUNT", 5, "FROM", "qa", "qb", "qc")
    assert [j[1] for j in got] == [a[2]]         # fewer than COUNT: what there is, no blocking


def test_count_one_takes_from_the_first_non_empty_queue(snode):
    c = snode.client()
    x = addjob(c, "q2", "x")
    y = addjob(c, "q3", "y")
    assert c.execute_command("GETJOB", "FROM", "q1", "q3", "q2")[0][1] == y
    assert c.execute_command("GETJOB", "FROM", "q1", "q3", "q2")[0][1] == x


def test_same_queue_named_twice(snode):
    c = snode.client()
    ids = [addjob(c, "q", str(i)) for i in range(3)]
    got = c.execute_command("GETJOB", "COUNT", 10, "FROM", "q", "q")
    assert sorted(j[1] for j in got) == sorted(ids) and len(got) == 3


def test_withcounters_counts_nacks_and_redeliveries(snode):
    c = snode.client()
    jid = addjob(c, "q", "b")
    assert c.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "q") == [
        [b"q", jid, b"b", b"nacks", 0, b"additional-deliveries", 0]]
    c.execute_command("NACK", jid)
    c.execute_command("GETJOB", "FROM", "q")
    c.execute_command("NACK", jid)
    c.execute_command("GETJOB", "FROM", "q")
    c.execute_command("ENQUEUE", jid)
    got = c.execute_command("GETJOB", "COUNT", 3, "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", jid, b"b", b"nacks", 2, b"additional-deliveries", 1]]


# --------------------------------------------------------------- blocking
@pytest.mark.parametrize("proto", [2, 3])
def test_blocked_getjob_woken_by_addjob_from_another_client(snode, proto):
    w = start_blocking(snode, "TIMEOUT", str(NODE_WAIT_MS), "FROM", "q", protocol=proto)
    jid = addjob(snode.client(), "q", "wake")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"wake")
    assert show(snode.client(), jid)["state"] == b"active"
    assert w.call("PING") == b"+PONG\r\n"


def test_blocked_getjob_forever_woken_by_addjob(snode):
    w = start_blocking(snode, "FROM", "q")          # no TIMEOUT: TIMEOUT 0, forever
    # A shorter blocked GETJOB times out meanwhile; the first one is still blocked.
    assert snode.raw().call("GETJOB", "TIMEOUT", "100", "FROM", "q") == b"*-1\r\n"
    assert blocked_on(snode, "q") == 1
    jid = addjob(snode.client(), "q", "late")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"late")


def test_blocked_getjob_woken_by_nack(snode):
    c = snode.client()
    jid = addjob(c, "q", "b")
    c.execute_command("GETJOB", "FROM", "q")
    w = start_blocking(snode, "WITHCOUNTERS", "FROM", "q")
    assert c.execute_command("NACK", jid) == 1
    assert w.read_reply() == (
        b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n" + jid + b"\r\n$1\r\nb\r\n"
        b"$5\r\nnacks\r\n:1\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


def test_blocked_getjob_woken_by_enqueue(snode):
    c = snode.client()
    jid = addjob(c, "q", "b")
    c.execute_command("DEQUEUE", jid)
    w = start_blocking(snode, "WITHCOUNTERS", "FROM", "other", "q")
    assert c.execute_command("ENQUEUE", jid) == 1
    assert w.read_reply() == (
        b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n" + jid + b"\r\n$1\r\nb\r\n"
        b"$5\r\nnacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:1\r\n")


def test_blocked_on_several_queues(snode):
    w = start_blocking(snode, "TIMEOUT", str(NODE_WAIT_MS), "FROM", "q1", "q2", "q3")
    assert blocked_on(snode, "q1") == 1 and blocked_on(snode, "q2") == 1
    jid = addjob(snode.client(), "q2", "b")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q2", jid, b"b")
    # No longer blocked on any of them.
    assert [blocked_on(snode, q) for q in ("q1", "q2", "q3")] == [0, 0, 0]
    assert b"blocked_clients:0\r\n" in snode.raw().call("INFO", "clients")


def test_blocked_with_count_gets_one_job(snode):
    w = start_blocking(snode, "COUNT", "5", "FROM", "q")
    jid = addjob(snode.client(), "q", "b")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"b")


def test_blocked_clients_served_in_blocking_order(snode):
    first = start_blocking(snode, "FROM", "q")
    second = start_blocking(snode, "FROM", "q")
    c = snode.client()
    p = c.pipeline(transaction=False)
    p.execute_command("ADDJOB", "q", "one", 0)
    p.execute_command("ADDJOB", "q", "two", 0)
    one, two = p.execute()
    assert first.read_reply() == b"*1\r\n" + job_bytes(b"q", one, b"one")
    assert second.read_reply() == b"*1\r\n" + job_bytes(b"q", two, b"two")
    assert c.execute_command("QLEN", "q") == 0


def test_pipelined_commands_after_a_blocked_getjob_wait_for_it(snode):
    w = snode.raw()
    w.send(encode_command("GETJOB", "TIMEOUT", str(NODE_WAIT_MS), "FROM", "q")
           + encode_command("PING"))
    wait_until(lambda: blocked_on(snode, "q") == 1)
    assert w.read_available(0.1) == b""      # PING is held back behind the blocked GETJOB
    jid = addjob(snode.client(), "q", "b")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"b")
    assert w.read_reply() == b"+PONG\r\n"


def test_client_disconnecting_while_blocked_loses_no_job(snode):
    w = start_blocking(snode, "FROM", "q")
    w.close()
    wait_until(lambda: blocked_on(snode, "q") == 0)
    c = snode.client()
    jid = addjob(c, "q", "b")
    assert c.execute_command("QLEN", "q") == 1
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == jid


def test_blocked_getjob_woken_by_delay_expiry(snode):
    c = snode.client()
    jid = addjob(c, "q", "later", "DELAY", 1)
    w = start_blocking(snode, "TIMEOUT", str(NODE_WAIT_MS), "FROM", "q")
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"later")


# ------------------------------------------------------------------ PAUSE
def test_pause_out_holds_jobs_and_unpause_wakes_blocked_clients(snode):
    c = snode.client()
    r = snode.raw()
    jid = addjob(c, "q", "b")
    assert r.call("PAUSE", "q", "out") == b"+out\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    # Another queue in the same GETJOB is still served.
    other = addjob(c, "open", "o")
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q", "open")[0][1] == other
    # ADDJOB still accepted while paused out.
    jid2 = addjob(c, "q", "b2")
    assert c.execute_command("QLEN", "q") == 2
    w = start_blocking(snode, "TIMEOUT", str(NODE_WAIT_MS), "FROM", "q")
    assert w.read_available(0.05) == b""
    assert r.call("PAUSE", "q", "none") == b"+none\r\n"
    assert w.read_reply() == b"*1\r\n" + job_bytes(b"q", jid, b"b")
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == jid2


def test_pause_in_refuses_addjob_and_postpones_requeue(snode):
    c = snode.client()
    r = snode.raw()
    paused = addjob(c, "qp", "p", "RETRY", 1)
    witness = addjob(c, "qn", "n", "RETRY", 1)
    c.execute_command("GETJOB", "FROM", "qp")
    c.execute_command("GETJOB", "FROM", "qn")
    deadline = time.monotonic() + show(c, paused)["next-requeue-within"] / 1000
    assert r.call("PAUSE", "qp", "in") == b"+in\r\n"
    assert r.call("ADDJOB", "qp", "x", "0") == b"-PAUSED Queue paused in input, try later\r\n"
    # GETJOB still works on a queue paused in input (nothing queued here though).
    assert r.call("GETJOB", "NOHANG", "FROM", "qp") == b"*-1\r\n"
    # The witness is requeued; the paused one's timer fires and is postponed.
    wait_until(lambda: c.execute_command("QLEN", "qn") == 1)
    wait_until(lambda: time.monotonic() > deadline + 0.05
               and show(c, paused)["next-requeue-within"] > 0)
    s = show(c, paused)
    assert s["state"] == b"active" and c.execute_command("QLEN", "qp") == 0
    assert show(c, witness)["state"] == b"queued"
    # Unpaused: the job is requeued at its next retry.
    assert r.call("PAUSE", "qp", "none") == b"+none\r\n"
    got = c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "qp")
    assert got[0][1] == paused


def test_nack_on_paused_in_queue_is_allowed(snode):
    """PAUSE in stops new jobs and timer requeues; NACK is an explicit client request."""
    c = snode.client()
    jid = addjob(c, "q", "b")
    c.execute_command("GETJOB", "FROM", "q")
    c.execute_command("PAUSE", "q", "in")
    assert c.execute_command("NACK", jid) == 1
    assert c.execute_command("QLEN", "q") == 1


def test_leaving_node_refuses_to_block(snode):
    r = snode.raw()
    jid = r.call("ADDJOB", "q", "b", "0")[1:-2]
    try:
        assert r.call("CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
        assert r.call("CLUSTER", "LEAVING") == b"+yes\r\n"
        # Queued jobs are still handed out; NOHANG still answers null.
        assert jid in r.call("GETJOB", "FROM", "q")
        assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
        # A GETJOB that would block gets -LEAVING instead.
        assert r.call("GETJOB", "FROM", "q") == (
            b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n")
        assert r.call("GETJOB", "TIMEOUT", "100", "FROM", "q").startswith(b"-LEAVING ")
        # HELLO shows the leaving node with priority 100.
        assert r.call("HELLO").endswith(b"$3\r\n100\r\n")
    finally:
        assert r.call("CLUSTER", "LEAVING", "no") == b"+OK\r\n"
    assert r.call("HELLO").endswith(b"$1\r\n1\r\n")

