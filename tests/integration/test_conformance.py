"""Replies a Disque 1.0-rc1 node gives, byte for byte (issue 16).

The expected bytes below were taken from a reference disque-server sent the same
commands; the tests check our node against them over a real socket. Job and node
ids differ between runs, so a few checks compare everything but them.
"""

from __future__ import annotations

import re
import threading

import pytest

from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, join, wait_until
from tests.integration.cluster_kit import cmd
from tests.integration.test_clients import PARSERS, make_client

UNKNOWN = "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
SYNTAX = b"-ERR syntax error\r\n"
NOT_INT = b"-ERR value is not an integer or out of range\r\n"
BAD_CURSOR = b"-ERR invalid cursor or option name\r\n"
TTL = b"-ERR TTL must be a number > 0\r\n"
RETRY = b"-ERR RETRY time must be a non negative number\r\n"
DELAY = b"-ERR DELAY time must be a non negative number\r\n"
MAXLEN = b"-ERR MAXLEN must be a positive number\r\n"
REPLICATE = b"-ERR REPLICATE must be between 1 and 65535\r\n"


def qstat(n, queue: str) -> dict:
    reply = cmd(n, "QSTAT", queue)
    return dict(zip(reply[::2], reply[1::2])) if reply else {}


def job_id(reply: bytes) -> bytes:
    m = re.fullmatch(rb"\+(D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4})\r\n", reply)
    assert m, reply
    return m.group(1)


# ------------------------------------------------------------- one command, one reply
# Each row on a fresh (flushed) node: (command, Disque's reply).
SINGLE_NODE_REPLIES = [
    # Zero or more ids: none is 0.
    (("ACKJOB",), b":0\r\n"),
    (("FASTACK",), b":0\r\n"),
    (("NACK",), b":0\r\n"),
    (("ENQUEUE",), b":0\r\n"),
    (("DEQUEUE",), b":0\r\n"),
    (("DELJOB",), b":0\r\n"),
    (("ACKJOB", UNKNOWN, "bad"), b"-BADID Invalid Job ID format.\r\n"),
    # ADDJOB options: one text per option, for a bad number and an out of range one.
    (("ADDJOB", "q", "x", "0", "TTL", "-1"), TTL),
    (("ADDJOB", "q", "x", "0", "TTL", "0"), TTL),
    (("ADDJOB", "q", "x", "0", "TTL", "abc"), TTL),
    (("ADDJOB", "q", "x", "0", "TTL", " 5"), TTL),
    (("ADDJOB", "q", "x", "0", "TTL", "99999999999999999999"), TTL),
    (("ADDJOB", "q", "x", "0", "RETRY", "-3"), RETRY),
    (("ADDJOB", "q", "x", "0", "RETRY", "abc"), RETRY),
    (("ADDJOB", "q", "x", "0", "DELAY", "-1"), DELAY),
    (("ADDJOB", "q", "x", "0", "DELAY", "x"), DELAY),
    (("ADDJOB", "q", "x", "0", "MAXLEN", "0"), MAXLEN),
    (("ADDJOB", "q", "x", "0", "MAXLEN", "z"), MAXLEN),
    (("ADDJOB", "q", "x", "0", "REPLICATE", "abc"), REPLICATE),
    (("ADDJOB", "q", "x", "0", "REPLICATE", "0"), REPLICATE),
    (("ADDJOB", "q", "x", "0", "DELAY", "100", "TTL", "50"),
     b"-ERR The specified DELAY is greater than TTL. Job refused since would never be "
     b"delivered\r\n"),
    (("ADDJOB", "q", "x", "0", "DELAY", "50", "TTL", "50"),
     b"-ERR The specified DELAY is greater than TTL. Job refused since would never be "
     b"delivered\r\n"),
    (("ADDJOB", "q", "x", "0", "REPLICATE", "2", "RETRY", "0"),   # (sic: two spaces)
     b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once "
     b"delivery)\r\n"),
    (("ADDJOB", "q", "x", "0", "REPLICATE", "2"),
     b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"),
    (("ADDJOB", "q", "x", "0", "TTL"), SYNTAX),
    (("ADDJOB", "q", "x", "-1"), b"-ERR timeout is negative\r\n"),
    (("ADDJOB", "q", "x", "abc"), b"-ERR timeout is not an integer or out of range\r\n"),
    # Queues.
    (("QSTAT", "nope"), b"*-1\r\n"),
    (("SHOW", UNKNOWN), b"$-1\r\n"),
    (("QPEEK", "q", "abc"), NOT_INT),
    (("PAUSE", "q", "sideways"), SYNTAX),
    (("PAUSE", "q", "none"), b"+none\r\n"),
    # QSCAN / JSCAN arguments.
    (("QSCAN", "foo"), BAD_CURSOR),
    (("QSCAN", "COUNT"), BAD_CURSOR),
    (("QSCAN", "0", "0"), SYNTAX),
    (("QSCAN", "COUNT", "abc"), NOT_INT),
    (("QSCAN", "MINLEN", "abc"), NOT_INT),
    (("QSCAN", "IMPORTRATE", "abc"), NOT_INT),
    (("QSCAN", "0", "COUNT", "0"), None),        # accepted: a cursor and no queue
    (("QSCAN", "-1"), b"*2\r\n$1\r\n0\r\n*0\r\n"),
    (("JSCAN", "foo"), BAD_CURSOR),
    (("JSCAN", "QUEUE"), BAD_CURSOR),
    (("JSCAN", "STATE", "foo"), b"-ERR Invalid job state name\r\n"),
    (("JSCAN", "REPLY", "foo"), b"-ERR Invalid REPLY type, try ID or ALL\r\n"),
    (("JSCAN", "COUNT", "-1"), b"*2\r\n$1\r\n0\r\n*0\r\n"),
    # WORKING / SHOW arguments.
    (("WORKING", UNKNOWN), b"-NOJOB Job not known in the context of this node.\r\n"),
    (("WORKING", "foo"), b"-BADID Invalid Job ID format.\r\n"),
    (("SHOW", "foo"), b"-BADID Invalid Job ID format.\r\n"),
    (("WORKING",), b"-ERR wrong number of arguments for 'working' command\r\n"),
    # Server commands.
    (("CONFIG", "foo"), b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n"),
    (("CONFIG", "GET"), b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    (("CONFIG", "SET", "x"), b"-ERR Wrong number of arguments for CONFIG SET\r\n"),
    (("CONFIG", "RESETSTAT", "x"), b"-ERR Wrong number of arguments for CONFIG RESETSTAT\r\n"),
    (("CONFIG", "SET", "foo", "bar"), b"-ERR Unsupported CONFIG parameter: foo\r\n"),
    (("CLUSTER", "foo"), b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"),
    (("CLUSTER", "MEET"), b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"),
    (("CLUSTER", "MEET", "127.0.0.1", "abc"), b"-ERR Invalid TCP port specified: abc\r\n"),
    (("CLUSTER", "MEET", "1.2.3.x", "7000"),
     b"-ERR Invalid node address specified: 1.2.3.x:7000\r\n"),
    (("CLUSTER", "MEET", "127.0.0.1", "60000"),
     b"-ERR Invalid node address specified: 127.0.0.1:60000\r\n"),
    (("CLUSTER", "FORGET", "abc"), b"-ERR Invalid node identifier\r\n"),
    (("CLUSTER", "FORGET", "0" * 40), b"-ERR Unknown node " + b"0" * 40 + b"\r\n"),
    (("CLUSTER", "LEAVING", "foo"),
     b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n"),
    (("CLUSTER", "RESET", "foo"), SYNTAX),
    (("CLIENT", "foo"),
     b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME "
     b"connection-name)\r\n"),
    (("CLIENT", "KILL"), SYNTAX),
    (("CLIENT", "KILL", "TYPE", "foo"), b"-ERR Unknown client type 'foo'\r\n"),
    (("CLIENT", "KILL", "1.2.3.4:5"), b"-ERR No such client\r\n"),
    (("SLOWLOG", "foo"),
     b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"),
    (("SLOWLOG", "LEN", "x"),
     b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"),
    (("DEBUG", "foo"), b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'foo'\r\n"),
    (("DEBUG", "SLEEP", "abc"), b"+OK\r\n"),
    (("DEBUG", "ERROR", "some text"), b"-some text\r\n"),
    (("AUTH", "x"), b"-ERR Client sent AUTH, but no password is set\r\n"),
    (("LOADJOB", "x"), b"-ERR LOADJOB is a special command only processed from AOF\r\n"),
    (("FOO", "bar"), b"-ERR unknown command 'FOO'\r\n"),
]


@pytest.mark.parametrize("args,reply", SINGLE_NODE_REPLIES,
                         ids=[" ".join(a)[:50] for a, _ in SINGLE_NODE_REPLIES])
def test_single_node_reply(snode, args, reply):
    got = snode.raw().call(*args)
    if reply is None:
        assert not got.startswith(b"-"), got
    else:
        assert got == reply


@pytest.mark.parametrize("value", ["+5", "05", "-0"])
def test_addjob_reads_numbers_as_disque(snode, value):
    """strtoll: a sign and leading zeros are fine (only TTL 0 is refused)."""
    r = snode.raw()
    reply = r.call("ADDJOB", "q", "x", "01", "RETRY", value, "REPLICATE", "1")
    job_id(reply)


def test_huge_times_are_accepted_and_bounded(snode):
    """Disque takes any positive int64 TTL, DELAY or RETRY (and keeps them in
    32-bit fields); we accept the same values and bound them to 2^32 - 1 s, so
    that no time computed from them overflows an int64 in the compiled core."""
    big = str((1 << 63) - 1)
    jid = cmd(snode, "ADDJOB", "q", "x", big, "TTL", big, "RETRY", big, "DELAY", "5")
    show = cmd(snode, "SHOW", jid)
    fields = dict(zip(show[::2], show[1::2]))
    assert fields[b"retry"] == (1 << 32) - 1
    assert 0 < fields[b"ttl"] <= (1 << 32) - 1
    assert fields[b"delay"] == 5
    jid2 = cmd(snode, "ADDJOB", "q2", "y", "0", "TTL", big, "DELAY", str((1 << 62)))
    fields = dict(zip(*[iter(cmd(snode, "SHOW", jid2))] * 2))
    assert fields[b"delay"] < fields[b"ttl"] <= (1 << 32) - 1
    # A GETJOB timeout of int64's maximum waits (and is woken) like any other.
    jid3 = cmd(snode, "ADDJOB", "q3", "z", "0")
    assert cmd(snode, "GETJOB", "TIMEOUT", big, "FROM", "q3")[0][1] == jid3


def test_addjob_checks_maxlen_before_pause(snode):
    r = snode.raw()
    job_id(r.call("ADDJOB", "q", "x", "0"))
    assert r.call("PAUSE", "q", "in") == b"+in\r\n"
    assert r.call("ADDJOB", "q", "x", "0", "MAXLEN", "1") == (
        b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n")
    assert r.call("ADDJOB", "q", "x", "0") == b"-PAUSED Queue paused in input, try later\r\n"


def test_leaving_node_answers(snode):
    r = snode.raw()
    try:
        assert r.call("CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
        assert r.call("ADDJOB", "q", "x", "0") == (
            b"-NOREPL Not enough reachable nodes for the requested replication level, since "
            b"I'm unable to hold a copy of the message for the following reason: I'm leaving "
            b"the cluster\r\n")
        assert r.call("GETJOB", "FROM", "q") == (
            b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n")
        assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    finally:
        assert r.call("CLUSTER", "LEAVING", "no") == b"+OK\r\n"


def test_zero_ids_with_clients(snode):
    """redis-py and redis-cli send the bare command and get 0."""
    c = snode.client()
    for name in ("ACKJOB", "FASTACK", "NACK", "ENQUEUE", "DEQUEUE", "DELJOB"):
        assert c.execute_command(name) == 0, name
        assert snode.cli(name) == "0\n", name


# ------------------------------------------------------------------------- GETJOB
def test_getjob_creates_the_queues_it_looked_in(snode):
    r = snode.raw()
    assert r.call("GETJOB", "NOHANG", "FROM", "qy") == b"*-1\r\n"
    assert r.call("QSTAT", "qy") == (
        b"*20\r\n$4\r\nname\r\n$2\r\nqy\r\n$3\r\nlen\r\n:0\r\n$3\r\nage\r\n:0\r\n$4\r\nidle\r\n:0\r\n"
        b"$7\r\nblocked\r\n:0\r\n$11\r\nimport-from\r\n*0\r\n$11\r\nimport-rate\r\n:0\r\n"
        b"$7\r\njobs-in\r\n:0\r\n$8\r\njobs-out\r\n:0\r\n$5\r\npause\r\n$4\r\nnone\r\n")
    # With one job to give: the queues before it were looked in, the ones after not.
    job_id(r.call("ADDJOB", "full", "x", "0"))
    assert r.call("GETJOB", "NOHANG", "FROM", "e1", "full", "e2").startswith(b"*1\r\n*3\r\n")
    assert r.call("QSTAT", "e1").startswith(b"*20\r\n")
    assert r.call("QSTAT", "e2") == b"*-1\r\n"
    # COUNT > 1 looks in every queue.
    assert r.call("GETJOB", "NOHANG", "COUNT", "2", "FROM", "e3", "e4") == b"*-1\r\n"
    assert r.call("QSTAT", "e3").startswith(b"*20\r\n")
    assert r.call("QSTAT", "e4").startswith(b"*20\r\n")


# ------------------------------------------------------------------------- QSCAN
def test_qscan_length_filters_as_disque(snode):
    c = snode.client()
    for queue, n in (("one", 1), ("two", 2)):
        for _ in range(n):
            c.execute_command("ADDJOB", queue, "x", 0)
    assert c.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", 0) == [b"0", []]
    assert sorted(c.execute_command("QSCAN", "BUSYLOOP", "MINLEN", -1)[1]) == [b"one", b"two"]
    assert sorted(c.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", -1)[1]) == [b"one", b"two"]
    assert c.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", 1) == [b"0", [b"one"]]
    # An empty queue (GETJOB made it) has length 0 <= MAXLEN 0.
    c.execute_command("GETJOB", "NOHANG", "FROM", "empty")
    assert c.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", 0) == [b"0", [b"empty"]]


# -------------------------------------------------------------------------- SHOW
def test_show_lists_no_confirmations_once_replicated(snode):
    r = snode.raw()
    me = cmd(snode, "CLUSTER", "MYID")
    jid = job_id(r.call("ADDJOB", "q", "x", "0", "REPLICATE", "1"))
    shown = r.call("SHOW", jid)
    assert b"$15\r\nnodes-delivered\r\n*1\r\n$40\r\n" + me + b"\r\n" in shown
    assert b"$15\r\nnodes-confirmed\r\n*0\r\n$19\r\nnext-requeue-within\r\n" in shown


# ------------------------------------------------------------ additional deliveries
def counters_reply(jid: bytes, deliveries: int) -> bytes:
    return (b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n" + jid + b"\r\n$1\r\nx\r\n$5\r\nnacks\r\n:0\r\n"
            b"$21\r\nadditional-deliveries\r\n:%d\r\n" % deliveries)


def test_enqueue_of_a_job_never_queued_is_no_additional_delivery(snode):
    r = snode.raw()
    jid = job_id(r.call("ADDJOB", "q", "x", "0", "DELAY", "100"))
    assert r.call("ENQUEUE", jid) == b":1\r\n"
    assert r.call("GETJOB", "WITHCOUNTERS", "FROM", "q") == counters_reply(jid, 0)
    # Queued once already: the next ENQUEUE counts.
    assert r.call("ENQUEUE", jid) == b":1\r\n"
    assert r.call("GETJOB", "WITHCOUNTERS", "FROM", "q") == counters_reply(jid, 1)
    # Queued (by ADDJOB), taken out, put back: that counts too.
    jid2 = job_id(r.call("ADDJOB", "q", "x", "0"))
    assert r.call("DEQUEUE", jid2) == b":1\r\n"
    assert r.call("ENQUEUE", jid2) == b":1\r\n"
    assert r.call("GETJOB", "WITHCOUNTERS", "FROM", "q") == counters_reply(jid2, 1)


def test_at_most_once_job_is_queued_once(snode):
    r = snode.raw()
    jid = job_id(r.call("ADDJOB", "q", "x", "0", "RETRY", "0"))
    assert r.call("DEQUEUE", jid) == b":1\r\n"
    assert r.call("ENQUEUE", jid) == b":0\r\n"
    assert r.call("NACK", jid) == b":0\r\n"
    assert b"$5\r\nstate\r\n$6\r\nactive\r\n" in r.call("SHOW", jid)


# ------------------------------------------------------------------ CONFIG SET
def test_config_set_error_starts_with_disques_text(snode):
    got = snode.raw().call("CONFIG", "SET", "MAXMEMORY", "abc")
    # Disque: -ERR Invalid argument 'abc' for CONFIG SET 'MAXMEMORY'; we add the reason.
    assert got.startswith(b"-ERR Invalid argument 'abc' for CONFIG SET 'MAXMEMORY'"), got


# ------------------------------------------------------------------------- INFO
def test_info_is_verbatim_text_under_resp3(snode):
    r = snode.raw()
    resp2 = r.call("INFO", "server")
    assert resp2.startswith(b"$") and b"\r\n# Server\r\n" in resp2
    r.call("HELLO", "3")
    resp3 = r.call("INFO", "server")
    text = resp2.split(b"\r\n", 1)[1][:-2]
    head = b"=%d\r\ntxt:" % (len(text) + 4)
    assert resp3.startswith(head) and resp3.endswith(b"\r\n")
    assert b"disque_version:1.0-rc1\r\n" in resp3
    assert r.call("INFO", "nosuch") == b"=4\r\ntxt:\r\n"


@pytest.mark.parametrize("proto,parser", PARSERS)
def test_info_parses_with_redis_py(snode, proto, parser):
    c = make_client(snode, proto, parser)
    info = c.info()
    assert info["disque_version"] == "1.0-rc1" and info["registered_jobs"] == 0
    assert set(c.info("queues")) == {"registered_queues"}
    # The "txt:" format prefix is the parser's, not part of the text.
    assert not any(k.startswith("txt") for k in info), info


def test_info_with_redis_cli_resp3(snode):
    out = snode.cli("-3", "INFO", "server")
    assert out.startswith("# Server\r\n") and "disque_version:1.0-rc1" in out
    out = snode.cli("-3", "--no-raw", "INFO", "jobs")
    assert "registered_jobs:0" in out and "txt:" not in out


# ----------------------------------------------------------- QSCAN IMPORTRATE
def test_qscan_importrate_lists_queues_that_imported(node_factory):
    """Issue 16 section 2: jobs that federation brought here count as imports."""
    a, b = node_factory(), node_factory()
    join([a, b])
    ra, rb = a.raw(), b.raw()
    queues = [f"queue_000{n}" for n in range(1, 5)]
    for q in queues:
        for _ in range(4):
            job_id(ra.call("ADDJOB", q, "job", "0"))
    for q in queues:
        for _ in range(4):
            got = rb.call("GETJOB", "TIMEOUT", "10000", "FROM", q)
            assert got.startswith(b"*1\r\n*3\r\n$10\r\n" + q.encode()), (q, got)
    # Disque counts an import rate for 5 s after a queue's import window began.
    scan = cmd(b, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)
    assert scan[0] == b"0" and sorted(scan[1]) == [q.encode() for q in queues]
    a_id = cmd(a, "CLUSTER", "MYID")
    for q in queues:
        fields = qstat(b, q)
        assert fields[b"import-rate"] >= 1 and fields[b"import-from"] == [a_id], fields
        assert fields[b"jobs-in"] == 4 and fields[b"len"] == 0
    # The producer imported nothing.
    assert cmd(a, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1) == [b"0", []]

    # A job pushed to a node that asked first (consumer blocked before the producer
    # added it) is an import too.
    done = threading.Event()
    got = []

    def consume():
        got.append(b.raw().call("GETJOB", "TIMEOUT", str(NODE_WAIT_MS), "FROM", "pushed"))
        done.set()

    t = threading.Thread(target=consume)
    t.start()
    wait_until(lambda: qstat(b, "pushed").get(b"blocked") == 1)
    job_id(ra.call("ADDJOB", "pushed", "job", "0"))
    assert done.wait(WAIT_TIMEOUT)
    t.join()
    assert got[0].startswith(b"*1\r\n*3\r\n$6\r\npushed\r\n"), got
    assert b"pushed" in cmd(b, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1]
