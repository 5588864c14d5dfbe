"""Bad input against a live node (SPEC section 9, invariant 4): malformed RESP,
negative and huge lengths, wrong arities for every command, binary garbage,
half-sent commands and disconnects mid-command. The offender gets an error or
is disconnected; every other client keeps getting correct answers; a job
acknowledged to its producer is never lost; the limits proto-max-bulk-len,
client-query-buffer-limit and maxclients are enforced.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import WAIT_TIMEOUT, RawConn, encode_command, resp_frame_end, wait_until

SENTINEL_Q = "sentinel:queue:7f3a"


def frames(data: bytes) -> list[bytes]:
    """Split bytes into complete RESP replies; fail if anything is left over
    or is not RESP."""
    out, pos = [], 0
    while pos < len(data):
        end = resp_frame_end(data, pos)
        assert end is not None, f"incomplete reply at {pos}: {data[pos:pos + 80]!r}"
        out.append(data[pos:end])
        pos = end
    return out


def assert_node_healthy(node, checker, long_lived: bytes) -> None:
    """Another client gets correct answers, and acknowledged jobs survive."""
    assert node.is_alive(), node.log_tail()
    assert checker.call("PING") == b"+PONG\r\n"
    jid = checker.call("ADDJOB", SENTINEL_Q, "payload", "0")
    assert jid.startswith(b"+D-"), jid
    jid = jid[1:-2]
    assert checker.call("GETJOB", "NOHANG", "FROM", SENTINEL_Q) == (
        b"*1\r\n*3\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$7\r\npayload\r\n"
        % (len(SENTINEL_Q), SENTINEL_Q.encode(), jid))
    assert checker.call("ACKJOB", jid) == b":1\r\n"
    shown = checker.call("SHOW", long_lived)
    assert shown.startswith(b"*30\r\n") and b"$6\r\nqueued\r\n" in shown


@pytest.fixture
def guarded(snode):
    """(node, checker RawConn, id of a long-lived queued job) + a final health check."""
    checker = snode.raw()
    long_lived = checker.call("ADDJOB", "longlived:queue", "keep me", "0", "RETRY", "3600")[1:-2]
    yield snode, checker, long_lived
    assert_node_healthy(snode, checker, long_lived)


# ---------------------------------------------------------- fixed bad inputs
MALFORMED = [
    (b"*99999999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*-99999999999999999999\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*2\r\n$4\r\nECHO\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-1\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\nPING\r\n", b"-ERR Protocol error: expected '$', got 'P'\r\n"),
    (b"*2\r\n$4\r\nECHO\r\n:1\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
    (b"*1\r\n" + b"$" + b"9" * 70000, b"-ERR Protocol error: too big bulk count string\r\n"),
    (b"*" + b"1" * 70000, b"-ERR Protocol error: too big mbulk count string\r\n"),
    (b"A" * 70000, b"-ERR Protocol error: too big inline request\r\n"),
    (b'PING "open\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
]


@pytest.mark.parametrize("data,reply", MALFORMED, ids=[repr(d[:20]) for d, _ in MALFORMED])
def test_malformed_request_gets_error_and_close(guarded, data, reply):
    node, checker, long_lived = guarded
    r = node.raw()
    r.send(data)
    # The error comes at once (no waiting for a body of 99999999999 bytes), then EOF.
    assert r.read_until_closed() == reply
    assert_node_healthy(node, checker, long_lived)


def test_replies_before_the_error_are_delivered(guarded):
    node, _, _ = guarded
    r = node.raw()
    r.send(encode_command("PING") + encode_command("ECHO", "a") + b"*1\r\n$-3\r\n" + encode_command("PING"))
    assert r.read_until_closed() == (
        b"+PONG\r\n$1\r\na\r\n-ERR Protocol error: invalid bulk length\r\n")


@pytest.mark.parametrize("data", [b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"\r\n", b"\n", b"   \r\n"])
def test_empty_requests_are_ignored(guarded, data):
    node, _, _ = guarded
    r = node.raw()
    r.send(data + encode_command("PING"))
    assert r.read_reply() == b"+PONG\r\n"
    assert r.read_available(0.05) == b""


def test_wrong_arity_for_every_command(guarded):
    node, checker, long_lived = guarded
    table = node.client(protocol=2).command()
    assert len(table) >= 30
    r = node.raw()
    tried = 0
    for name, spec in table.items():
        arity = spec["arity"]
        counts = []
        if arity > 0:
            counts = [arity - 1, arity + 1]
        elif -arity > 1:
            counts = [-arity - 1]
        for n in counts:
            if n < 1:
                continue
            args = [name.upper()] + ["x"] * (n - 1)
            assert r.call(*args) == (
                b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()), args
            tried += 1
    assert tried >= 25
    assert r.call("PING") == b"+PONG\r\n"


@pytest.mark.parametrize("args", [
    ("ADDJOB", "q", "b", "0", "TTL", "99999999999999999999999"),
    ("ADDJOB", "q", "b", "0", "DELAY", "9223372036854775807"),
    ("ADDJOB", "q", "b", "9223372036854775808"),
    ("GETJOB", "TIMEOUT", "-9223372036854775808", "FROM", "q"),
    ("GETJOB", "COUNT", "99999999999999999999", "FROM", "q"),
    ("QPEEK", "q", "-9223372036854775808"),
    ("QPEEK", "q", "9223372036854775807"),
    ("QSCAN", "COUNT", "-1"),
    ("QSCAN", "MINLEN", "x"),
    ("JSCAN", "COUNT", "9999999999999999999999"),
    ("WORKING", b"D-\xff\xff\xff\xff\xff\xff\xff\xff-\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
                b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff-\xff\xff\xff\xff"),
    ("ACKJOB", b"D-00000000-\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
               b"\x00\x00\x00\x00\x00\x00\x00\x00-0000"),
    ("SHOW", b"D-00000000-" + b"\xe9" * 24 + b"-0001"),
    ("HELLO", "99999999999999999999999"),
    ("CLIENT", "SETNAME", b"\x00"),
    ("PAUSE", b"\xff\x00", "in", "out", "none", "state"),
    ("INFO", b"\xff"),
    ("COMMAND", "INFO", b"\xff\xfe"),
    (b"\xff\xfe\xfd",),
])
def test_odd_arguments_get_an_answer(guarded, args):
    node, _, _ = guarded
    r = node.raw()
    reply = r.call(*args)
    assert frames(reply) == [reply]
    assert not reply.startswith(b"-ERR internal error"), reply
    assert r.call("PING") == b"+PONG\r\n"


def test_job_ids_with_odd_bytes_but_right_shape(guarded):
    """Ids of the right shape but odd characters: unknown, not a crash."""
    node, _, _ = guarded
    r = node.raw()
    for ch in (b"\x00", b"\xff", b"-", b"~", b" "):
        jid = b"D-00000000-" + ch * 24 + b"-05a1"
        for cmd in ("SHOW", "WORKING", "ACKJOB", "FASTACK", "NACK", "ENQUEUE", "DEQUEUE", "DELJOB"):
            reply = r.call(cmd, jid)
            assert reply in (b"$-1\r\n", b":0\r\n",
                             b"-NOJOB Job not known in the context of this node.\r\n"), (cmd, reply)


# ---------------------------------------------------- half-sent, disconnects
def test_half_sent_command_then_disconnect(guarded):
    node, checker, long_lived = guarded
    full = encode_command("ADDJOB", "half", "body-of-the-job", "0")
    for cut in range(1, len(full)):
        r = RawConn(node.host, node.port)
        r.send(full[:cut])
        r.close()
    assert checker.call("QLEN", "half") == b":0\r\n"
    assert_node_healthy(node, checker, long_lived)


def test_byte_by_byte_command(guarded):
    node, _, _ = guarded
    r = node.raw()
    for b in encode_command("ECHO", "slowly") + b"PING\r\n":
        r.send(bytes([b]))
    assert r.read_replies(2) == [b"$6\r\nslowly\r\n", b"+PONG\r\n"]


def test_reset_with_pending_replies(guarded):
    """A client that pipelines a lot and resets the connection (RST) without
    reading: the node drops its replies and carries on."""
    node, checker, long_lived = guarded
    for _ in range(5):
        s = socket.create_connection((node.host, node.port))
        s.sendall(b"".join(encode_command("ADDJOB", "rst", "x" * 1000, "0") for _ in range(300)))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    assert_node_healthy(node, checker, long_lived)
    # What was received before the reset was processed (some prefix of it).
    n = int(checker.call("QLEN", "rst")[1:-2])
    assert 0 <= n <= 1500


def test_disconnect_while_blocked_then_job_is_not_lost(guarded):
    node, checker, long_lived = guarded
    before = total_connections(checker)
    for _ in range(5):
        s = socket.create_connection((node.host, node.port))
        s.sendall(encode_command("GETJOB", "FROM", "blk", "blk2"))
        s.close()
    # Once the node has seen the 5 connections come and go, nobody is blocked.
    # (A job added before the node noticed a close would go to the dead client
    # and come back only after RETRY, as in Disque.)
    wait_until(lambda: total_connections(checker) >= before + 5)
    wait_until(lambda: b"blocked_clients:0\r\n" in checker.call("INFO", "clients"))
    jid = checker.call("ADDJOB", "blk", "x", "0")[1:-2]
    assert checker.call("QLEN", "blk") == b":1\r\n"
    assert jid in checker.call("GETJOB", "NOHANG", "FROM", "blk")


def total_connections(conn) -> int:
    stats = conn.call("INFO", "stats")
    return int(stats.split(b"total_connections_received:")[1].split(b"\r\n")[0])


# --------------------------------------------------------------------- fuzz
SAFE_COMMANDS = [
    "ADDJOB", "GETJOB", "ACKJOB", "FASTACK", "NACK", "WORKING", "ENQUEUE", "DEQUEUE",
    "DELJOB", "SHOW", "QLEN", "QPEEK", "QSTAT", "QSCAN", "JSCAN", "PAUSE", "HELLO", "INFO",
    "PING", "ECHO", "TIME", "COMMAND", "AUTH", "QUIT", "NOSUCH", "addjob", "GetJob",
]
WORDS = [
    "FROM", "NOHANG", "TIMEOUT", "COUNT", "WITHCOUNTERS", "REPLICATE", "DELAY", "RETRY",
    "TTL", "MAXLEN", "ASYNC", "BUSYLOOP", "QUEUE", "STATE", "REPLY", "all", "id", "in", "out",
    "none", "state", "queued", "active", "acked", "MINLEN", "IMPORTRATE", "AUTH", "SETNAME",
    "fq1", "fq2", "0", "1", "-1", "2", "3", "10", "100", "65536", "-9223372036854775808",
    "9223372036854775807", "99999999999999999999", "1.5", "", " ", "0x10",
    "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", "D-123", "D-deadbeef-" + "/" * 24 + "-0000",
]

arg = st.one_of(st.sampled_from(WORDS), st.binary(max_size=12),
                st.integers(-(1 << 70), 1 << 70).map(lambda i: str(i)))
command = st.tuples(st.sampled_from(SAFE_COMMANDS), st.lists(arg, max_size=8)).map(
    lambda t: [t[0], *t[1]])


def _as_bytes(a) -> bytes:
    return a.encode() if isinstance(a, str) else a


def encode_loose(argv: list) -> bytes:
    return encode_command(*[_as_bytes(a) for a in argv])


def inline(argv: list) -> bytes:
    return b" ".join(_as_bytes(a).replace(b"\n", b"").replace(b"\r", b"") or b'""'
                     for a in argv) + b"\r\n"


@st.composite
def mutated(draw) -> bytes:
    """Valid commands, then damaged: lengths replaced, bytes cut, inserted or flipped."""
    cmds = draw(st.lists(command, min_size=1, max_size=4))
    data = bytearray(b"".join(
        (inline(c) if draw(st.booleans()) and draw(st.booleans()) else encode_loose(c))
        for c in cmds))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["len", "cut", "insert", "flip", "crlf"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "len":
            heads = [i for i, b in enumerate(data) if b in b"*$"]
            if heads:
                h = draw(st.sampled_from(heads))
                end = data.find(b"\r\n", h)
                if end > 0:
                    data[h + 1:end] = draw(st.sampled_from(
                        [b"-1", b"-2", b"0", b"99999999999", b"2147483648", b"abc", b"",
                         b"1048577", b"18446744073709551616", b"-0", b"+1", b" 1"]))
        elif kind == "cut":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        else:
            data[pos:pos] = draw(st.sampled_from([b"\r\n", b"\r", b"\n", b"\x00"]))
    return bytes(data)


fuzz_input = st.one_of(
    st.binary(max_size=200),
    mutated(),
    st.lists(command, min_size=1, max_size=5).map(lambda cs: b"".join(map(encode_loose, cs))),
    st.lists(command, min_size=1, max_size=3).map(lambda cs: b"".join(map(inline, cs))),
)


def test_fuzz_live_node(shared_node):
    node = shared_node
    if not node.is_alive():
        node.start()
    checker = RawConn(node.host, node.port)
    long_lived = checker.call("ADDJOB", "longlived:fuzz", "keep me", "0", "RETRY", "3600")[1:-2]
    assert long_lived.startswith(b"D-")

    @settings(max_examples=int(os.environ.get("DISQUETTE_FUZZ_EXAMPLES", "200")),
              deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=fuzz_input, chunks=st.integers(1, 4),
           ending=st.sampled_from(["half-close", "close", "reset"]))
    def one(data, chunks, ending):
        s = socket.create_connection((node.host, node.port), timeout=WAIT_TIMEOUT)
        try:
            step = max(1, len(data) // chunks)
            try:
                for i in range(0, len(data), step):
                    s.sendall(data[i:i + step])
                if ending == "half-close":
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                # The node already closed on us (QUIT, protocol error): fine.
                ending = "half-close"
            if ending == "half-close":
                # EOF: the node answers what is complete, then closes.
                received = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    received += chunk
                # Whatever came back is well-formed RESP, no internal error.
                for f in frames(received):
                    assert not f.startswith(b"-ERR internal error"), (data, f)
            elif ending == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            s.close()
        assert_node_healthy(node, checker, long_lived)

    try:
        one()
    finally:
        checker.close()
    assert "Traceback" not in node.log(), node.log_tail(60)


# -------------------------------------------------------------------- limits
@pytest.fixture(scope="module")
def limited(shared_factory):
    return shared_factory(proto_max_bulk_len="1mb", client_query_buffer_limit="2mb",
                          maxclients=8)


def test_proto_max_bulk_len(limited):
    n = limited
    r = n.raw()
    body = b"x" * (1 << 20)
    assert r.call("ECHO", body) == b"$1048576\r\n" + body + b"\r\n"
    reply = r.call("ADDJOB", "lim", body, "0")
    assert reply.startswith(b"+D-")
    r2 = n.raw()
    # Refused at the header, before the body is sent.
    r2.send(b"*4\r\n$6\r\nADDJOB\r\n$3\r\nlim\r\n$1048577\r\n")
    assert r2.read_until_closed() == b"-ERR Protocol error: invalid bulk length\r\n"
    assert r.call("QLEN", "lim") == b":1\r\n"
    # A run-time change applies to new connections.
    try:
        assert r.call("CONFIG", "SET", "proto-max-bulk-len", "2mb") == b"+OK\r\n"
        r3 = n.raw()
        big = b"y" * ((1 << 20) + 10)
        assert r3.call("ECHO", big) == b"$%d\r\n%s\r\n" % (len(big), big)
    finally:
        r.call("CONFIG", "SET", "proto-max-bulk-len", "1mb")


def test_client_query_buffer_limit(limited):
    n = limited
    r = n.raw()
    # Just under the limit: served.
    big = b"z" * 1_000_000
    assert r.call("ECHO", big) == b"$1000000\r\n" + big + b"\r\n"
    # A single command bigger than the limit (each argument within
    # proto-max-bulk-len): disconnected before it is complete.
    r.send(b"*4\r\n$4\r\nECHO\r\n" + (b"$1000000\r\n" + big + b"\r\n") * 2)
    r.send(b"$1000000\r\n" + big[:100_000])
    assert r.read_until_closed() == b"-ERR Protocol error: query buffer limit exceeded\r\n"
    # Pipelining more than the limit in total is fine: commands are consumed as they come.
    ok = n.raw()
    ok.send(b"".join(encode_command("ECHO", "p" * 1000) for _ in range(3000)))
    replies = ok.read_replies(3000)
    assert all(x == b"$1000\r\n" + b"p" * 1000 + b"\r\n" for x in replies)
    assert n.raw().call("PING") == b"+PONG\r\n"


def test_query_buffer_limit_while_blocked(limited):
    """A blocked client that keeps sending: its input piles up and hits the limit."""
    n = limited
    w = n.raw()
    w.send(encode_command("GETJOB", "FROM", "nothing-here"))     # blocked for good
    wait_until(lambda: b"blocked_clients:1\r\n" in n.raw().call("INFO", "clients"))
    try:
        for _ in range(60):
            w.send(encode_command("ECHO", "b" * 60_000))
    except OSError:
        pass
    assert w.is_closed()
    wait_until(lambda: b"blocked_clients:0\r\n" in n.raw().call("INFO", "clients"))


def test_maxclients(limited):
    n = limited
    n._close_clients()
    conns = []
    try:
        reply = None
        while len(conns) < 20:
            c = RawConn(n.host, n.port)
            conns.append(c)
            reply = c.call("PING")
            if reply != b"+PONG\r\n":
                break
        assert reply == b"-ERR max number of clients reached\r\n"
        assert conns[-1].is_closed()
        conns.pop().close()
        # Every slot is taken by us (a closing connection of an earlier test
        # may have held one a moment longer), and never more than maxclients.
        assert 7 <= len(conns) <= 8
        info = conns[0].call("INFO", "clients")
        connected = int(info.split(b"connected_clients:")[1].split(b"\r\n")[0])
        assert len(conns) <= connected <= 8
        stats = conns[0].call("INFO", "stats")
        assert int(stats.split(b"rejected_connections:")[1].split(b"\r\n")[0]) >= 1
        # One leaves: a new client gets in.
        conns.pop(1).close()

        def can_connect():
            c = RawConn(n.host, n.port)
            try:
                return c.call("PING") == b"+PONG\r\n"
            finally:
                c.close()
        wait_until(can_connect, ignore=(TimeoutError, OSError))
    finally:
        for c in conns:
            c.close()
