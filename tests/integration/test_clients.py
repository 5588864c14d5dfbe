"""Real clients against a real node: redis-py 8 (RESP3 by default, and
protocol=2, with its hiredis and pure-Python parsers), redis-cli (RESP2 and
``-3``), pydisque (in its own venv on redis-py 4.6, and on redis-py 8 in the
main venv), and inline commands the way telnet sends them. Reply TYPES and
shapes are checked, not only values."""

from __future__ import annotations

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser

from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT
from tests.integration.conftest import JOB_ID_RE

UNKNOWN = "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"

PARSERS = [
    pytest.param(3, _RESP3Parser, id="resp3-python"),
    pytest.param(3, _HiredisParser, id="resp3-hiredis"),
    pytest.param(2, _RESP2Parser, id="resp2-python"),
    pytest.param(2, _HiredisParser, id="resp2-hiredis"),
]


def make_client(node, proto, parser):
    pool = redis.ConnectionPool(host=node.host, port=node.port, protocol=proto,
                                parser_class=parser, socket_timeout=WAIT_TIMEOUT)
    c = redis.Redis(connection_pool=pool)
    node._clients.append(c)
    return c


# ------------------------------------------------------------------- redis-py
def test_redis_py_default_is_resp3(snode):
    c = redis.Redis(host=snode.host, port=snode.port)
    try:
        info = c.execute_command("CLIENT", "INFO")
        assert b" resp=3" in info and b" lib-name=redis-py " in info
    finally:
        c.close()


@pytest.mark.parametrize("proto,parser", PARSERS)
def test_redis_py_reply_types(snode, proto, parser):
    c = make_client(snode, proto, parser)
    jid = c.execute_command("ADDJOB", "q", "hello", 0)
    assert isinstance(jid, bytes) and JOB_ID_RE.match(jid)
    # GETJOB: list of [queue, id, body] lists.
    got = c.execute_command("GETJOB", "FROM", "q")
    assert got == [[b"q", jid, b"hello"]] and type(got) is list and type(got[0]) is list
    # NOHANG on an empty queue and SHOW of an unknown job: None (RESP3 null / RESP2 nil).
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    assert c.execute_command("GETJOB", "TIMEOUT", 10, "FROM", "q") is None
    assert c.execute_command("SHOW", UNKNOWN) is None
    assert c.execute_command("QSTAT", "nope") is None
    # Integers.
    for cmd in (("QLEN", "q"), ("ACKJOB", UNKNOWN), ("NACK", jid), ("DEQUEUE", jid),
                ("ENQUEUE", jid), ("WORKING", jid), ("FASTACK", UNKNOWN), ("DELJOB", UNKNOWN)):
        assert type(c.execute_command(*cmd)) is int, cmd
    assert c.execute_command("ENQUEUE", jid) == 1     # WORKING dequeued it
    # SHOW and QSTAT stay flat lists under RESP3 (Disque clients index them).
    s = c.execute_command("SHOW", jid)
    assert type(s) is list and len(s) == 30 and s[0] == b"id" and s[1] == jid
    assert type(s[s.index(b"nodes-delivered") + 1]) is list
    assert type(s[s.index(b"ttl") + 1]) is int
    st = c.execute_command("QSTAT", "q")
    assert type(st) is list and len(st) == 20 and st[:2] == [b"name", b"q"]
    # WITHCOUNTERS: 7 elements with integer counters.
    got = c.execute_command("GETJOB", "TIMEOUT", 5000, "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", jid, b"hello", b"nacks", 1, b"additional-deliveries", 2]]
    # QPEEK, QSCAN, JSCAN.
    c.execute_command("ADDJOB", "q", "two", 0)
    assert type(c.execute_command("QPEEK", "q", 1)) is list
    cursor, names = c.execute_command("QSCAN", "BUSYLOOP")
    assert cursor == b"0" and b"q" in names
    cursor, ids = c.execute_command("JSCAN", "BUSYLOOP", "QUEUE", "q")
    assert cursor == b"0" and jid in ids
    _, entries = c.execute_command("JSCAN", "BUSYLOOP", "REPLY", "all")
    assert all(type(e) is list and len(e) == 30 for e in entries)
    # Status replies.
    assert c.execute_command("PAUSE", "q", "out") in (b"out", "out")
    assert c.execute_command("PAUSE", "q", "none") in (b"none", "none")
    assert c.ping() is True
    # HELLO: Disque topology, a list.
    hello = c.execute_command("HELLO")
    assert hello[0] == 1 and len(hello[1]) == 40 and type(hello[2]) is list
    # Errors are ResponseError with the message after the prefix.
    with pytest.raises(redis.ResponseError, match="BADID"):
        c.execute_command("SHOW", "x")
    with pytest.raises(redis.ResponseError, match="NOREPL"):
        c.execute_command("ADDJOB", "q", "b", 0, "REPLICATE", 3)
    with pytest.raises(redis.ResponseError, match="unknown command"):
        c.execute_command("NOSUCH")
    assert c.execute_command("ACKJOB", jid) == 1


@pytest.mark.parametrize("proto,parser", PARSERS)
def test_redis_py_hello_map_and_builtin_commands(snode, proto, parser):
    c = make_client(snode, proto, parser)
    h = c.execute_command("HELLO", proto)
    if proto == 3:
        assert type(h) is dict and h[b"proto"] == 3 and h[b"server"] == b"disque"
    else:
        assert type(h) is list and len(h) == 14 and h[h.index(b"proto") + 1] == 2
    assert c.config_get("maxclients") == {"maxclients": "10000"}
    info = c.info()
    assert isinstance(info, dict) and info["registered_jobs"] == 0
    t = c.time()
    assert isinstance(t, tuple) and len(t) == 2
    assert c.client_setname("py") is True
    assert c.client_getname() in (b"py", "py")    # redis-py decodes it under RESP2
    assert isinstance(c.client_id(), int)
    assert any(cl["name"] == "py" for cl in c.client_list())
    assert c.echo(b"\x00\xff") == b"\x00\xff"


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_pipeline_and_binary(snode, proto):
    c = snode.client(protocol=proto)
    p = c.pipeline(transaction=False)
    bodies = [bytes([i]) * i for i in range(256)]
    for b in bodies:
        p.execute_command("ADDJOB", "bin", b, 0)
    ids = p.execute()
    got = c.execute_command("GETJOB", "COUNT", 1000, "FROM", "bin")
    assert [j[1] for j in got] == ids and [j[2] for j in got] == bodies


async def test_redis_py_asyncio_blocking_getjob(snode):
    import asyncio
    a = snode.aclient()
    b = snode.aclient(protocol=2)
    try:
        waiter = asyncio.create_task(
            a.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "aq"))

        async def blocked() -> None:
            while True:
                stat = await b.execute_command("QSTAT", "aq")
                if stat and stat[stat.index(b"blocked") + 1] == 1:
                    return
                await asyncio.sleep(0.01)
        await asyncio.wait_for(blocked(), WAIT_TIMEOUT)
        jid = await b.execute_command("ADDJOB", "aq", "async", 0)
        assert await asyncio.wait_for(waiter, WAIT_TIMEOUT) == [[b"aq", jid, b"async"]]
    finally:
        await a.aclose()
        await b.aclose()


# ------------------------------------------------------------------ redis-cli
def test_redis_cli(snode):
    jid = snode.cli("ADDJOB", "q", "hello world", "0").strip()
    assert JOB_ID_RE.match(jid.encode())
    # --no-raw shows the reply types the way a terminal user sees them.
    assert snode.cli("--no-raw", "QLEN", "q") == "(integer) 1\n"
    assert snode.cli("--no-raw", "ADDJOB", "q", "x", "0").startswith("D-")   # status: no quotes
    assert snode.cli("--no-raw", "GETJOB", "FROM", "q") == (
        f'1) 1) "q"\n   2) "{jid}"\n   3) "hello world"\n')
    assert snode.cli("--no-raw", "GETJOB", "NOHANG", "FROM", "empty") == "(nil)\n"
    assert snode.cli("--no-raw", "SHOW", UNKNOWN) == "(nil)\n"
    assert snode.cli("--no-raw", "PAUSE", "q", "in") == "in\n"
    assert snode.cli("--no-raw", "ADDJOB", "q", "x", "0") == (
        "(error) PAUSED Queue paused in input, try later\n")
    # (GETJOB created the queue "empty", as Disque does: MINLEN 1 leaves it out.)
    assert snode.cli("--no-raw", "QSCAN", "BUSYLOOP", "MINLEN", "1") == '1) "0"\n2) 1) "q"\n'
    show = snode.cli("--no-raw", "SHOW", jid)
    assert show.startswith(' 1) "id"\n 2) "' + jid + '"\n')
    assert '21) "nodes-delivered"\n22) 1) "' in show
    # Raw output (not a terminal).
    assert snode.cli("GETJOB", "NOHANG", "FROM", "empty") == "\n"
    assert snode.cli("PING") == "PONG\n"
    # Binary body through redis-cli's escapes.
    snode.cli("PAUSE", "q", "none")
    bid = snode.cli("ADDJOB", "bin", "a\x01b", "0").strip()
    assert snode.client().execute_command("SHOW", bid)[-1] == b"a\x01b"


def test_redis_cli_resp3(snode):
    jid = snode.cli("-3", "ADDJOB", "q", "b", "0").strip()
    assert JOB_ID_RE.match(jid.encode())
    assert snode.cli("-3", "--no-raw", "GETJOB", "NOHANG", "FROM", "empty") == "(nil)\n"
    assert snode.cli("-3", "--no-raw", "SHOW", UNKNOWN) == "(nil)\n"
    assert snode.cli("-3", "--no-raw", "QSTAT", "nope") == "(nil)\n"
    stat = snode.cli("-3", "--no-raw", "QSTAT", "q")
    assert stat.startswith(' 1) "name"\n 2) "q"\n 3) "len"\n 4) (integer) 1\n')   # flat array
    assert '12) (empty array)\n' in stat
    assert snode.cli("-3", "--no-raw", "CONFIG", "GET", "maxclients") == (
        '1# "maxclients" => "10000"\n')
    hello = snode.cli("-3", "--no-raw", "HELLO", "3")
    assert hello.startswith('1# "server" => "disque"\n') and '3# "proto" => (integer) 3\n' in hello
    assert snode.cli("-3", "--no-raw", "GETJOB", "FROM", "q") == (
        f'1) 1) "q"\n   2) "{jid}"\n   3) "b"\n')


def test_redis_cli_from_stdin(snode):
    out = snode.cli(input='PING\nADDJOB q "a b" 0\nQLEN q\nGETJOB NOHANG FROM nothing\n')
    lines = out.split("\n")
    assert lines[0] == "PONG" and lines[1].startswith("D-") and lines[2] == "1"


# ------------------------------------------------------------------- pydisque
PYDISQUE_WORKFLOW = """
from pydisque.client import Client
c = Client([ADDR])
c.connect()
hello = c.hello()
assert hello[0] == 1 and len(hello[1]) == 40, hello
jid = c.add_job("pdq", "payload", timeout=0, retry=5, ttl=600)
assert jid.startswith(b"D-") and len(jid) == 40, jid
assert c.qlen("pdq") == 1
assert c.qpeek("pdq", 1) == [[b"pdq", jid, b"payload"]]
show = c.show(jid, return_dict=True)
assert show[b"state"] == b"queued" and show[b"retry"] == 5 and show[b"body"] == b"payload", show
stat = c.qstat("pdq", return_dict=True)
assert stat[b"len"] == 1 and stat[b"name"] == b"pdq", stat
jobs = c.get_job(["pdq"], timeout=100)
assert [(q, i, b) for q, i, b in jobs] == [(b"pdq", jid, b"payload")], jobs
assert c.working(jid) == 5
c.nack_job(jid)
jobs = c.get_job(["pdq"], withcounters=True)
assert jobs == [(b"pdq", jid, b"payload", 1, 0)], jobs
assert c.enqueue(jid) == 1
assert c.dequeue(jid) == 1
assert c.get_job(["pdq"], nohang=True) == []
assert c.enqueue(jid) == 1
c.ack_job(jid)
assert c.show(jid) is None
j2 = c.add_job("pdq", "two", timeout=0, delay=100, maxlen=5, asynchronous=True)
assert c.show(j2, return_dict=True)[b"state"] == b"active"
assert c.del_job(j2) == 1
j3 = c.add_job("pdq", "three")
c.fast_ack(j3)
assert c.qlen("pdq") == 0
assert c.pause("pdq", kw_in=True) == b"in"
assert c.pause("pdq", kw_state=True) == b"in"
assert c.pause("pdq", kw_none=True) == b"none"
cursor, queues = c.qscan(busyloop=True)
assert cursor == b"0" and b"pdq" in queues, queues
for i in range(3):
    c.add_job("pdq", "j%d" % i)
cursor, ids = c.jscan(busyloop=True, queue="pdq", state=["queued"])
assert cursor == b"0" and len(ids) == 3, ids
cursor, full = c.jscan(busyloop=True, reply="all")
assert len(full) == 3 and all(len(e) == 30 for e in full)
jobs = c.get_job(["pdq", "other"], count=10)
assert len(jobs) == 3
assert "registered_jobs" in str(c.info())
import redis
print("ok", redis.__version__)
"""


def test_pydisque_on_redis4_in_its_own_venv(snode, pydisque_run):
    out = pydisque_run(PYDISQUE_WORKFLOW, snode.port)
    assert out.startswith("ok 4."), out


def test_pydisque_on_redis8_in_the_main_venv(snode):
    ns = {"ADDR": snode.addr, "HOST": snode.host, "PORT": snode.port}
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(PYDISQUE_WORKFLOW, ns)
    assert buf.getvalue().startswith("ok 8."), buf.getvalue()
    # It really spoke RESP3 (redis-py 8's default HELLO 3).
    conn = ns["c"].get_connection()
    assert b" resp=3" in conn.execute_command("CLIENT", "INFO")
    conn.close()


# ------------------------------------------------------------ inline commands
def test_inline_commands(snode):
    r = snode.raw()
    assert r.request(b"PING\r\n") == b"+PONG\r\n"
    assert r.request(b"ping\n") == b"+PONG\r\n"                 # bare LF, as telnet may send
    reply = r.request(b'ADDJOB q "hello world" 0\r\n')
    assert reply.startswith(b"+D-")
    jid = reply[1:-2]
    assert r.request(b"GETJOB FROM q\r\n") == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + jid + b"\r\n$11\r\nhello world\r\n")
    # Quotes and escapes as in redis-cli / sdssplitargs.
    reply = r.request(b"ADDJOB q \"a\\x00b\\n\" 0\r\n")
    assert r.call("SHOW", reply[1:-2]).endswith(b"$4\r\nbody\r\n$4\r\na\x00b\n\r\n")
    assert r.request(b"ECHO 'single quoted'\r\n") == b"$13\r\nsingle quoted\r\n"
    # Empty lines are ignored; several inline commands in one packet are all answered.
    r.send(b"\r\n\r\nPING\r\nQLEN q\r\n   \r\nECHO x\r\n")
    assert r.read_replies(3) == [b"+PONG\r\n", b":1\r\n", b"$1\r\nx\r\n"]
    # Inline and multibulk mixed in one packet.
    r.send(b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nok\r\nQLEN q\r\n")
    assert r.read_replies(3) == [b"+PONG\r\n", b"$2\r\nok\r\n", b":1\r\n"]
    assert r.request(b"NOSUCH a b\r\n").startswith(b"-ERR unknown command 'NOSUCH'")
    assert r.request(b"ADDJOB q\r\n") == b"-ERR wrong number of arguments for 'addjob' command\r\n"
    assert r.call("PING") == b"+PONG\r\n"


def test_inline_unbalanced_quotes_closes_the_connection(snode):
    r = snode.raw()
    r.send(b'ECHO "unterminated\r\n')
    data = r.read_until_closed(5)
    assert data == b"-ERR Protocol error: unbalanced quotes in request\r\n"
    assert snode.raw().call("PING") == b"+PONG\r\n"


def test_inline_command_split_over_packets(snode):
    r = snode.raw()
    r.send(b"ECH")
    assert r.read_available(0.05) == b""
    r.send(b"O spl")
    r.send(b"it\r\n")
    assert r.read_reply() == b"$5\r\nsplit\r\n"


def test_pipelined_multibulk(snode):
    r = snode.raw()
    from tests.harness import encode_command
    batch = b"".join(encode_command("ADDJOB", "pipe", str(i), "0") for i in range(500))
    batch += encode_command("QLEN", "pipe")
    r.send(batch)
    replies = r.read_replies(501)
    assert all(x.startswith(b"+D-") for x in replies[:500])
    assert replies[500] == b":500\r\n"


def test_protocol_switch_inside_a_pipeline(snode):
    from tests.harness import encode_command
    r = snode.raw()
    r.send(encode_command("GETJOB", "NOHANG", "FROM", "x") + encode_command("HELLO", "3")
           + encode_command("GETJOB", "NOHANG", "FROM", "x") + encode_command("HELLO", "2")
           + encode_command("SHOW", UNKNOWN))
    replies = r.read_replies(5)
    assert replies[0] == b"*-1\r\n"
    assert replies[1].startswith(b"%7\r\n")
    assert replies[2] == b"_\r\n"
    assert replies[3].startswith(b"*14\r\n")
    assert replies[4] == b"$-1\r\n"


def test_quit_in_a_pipeline_stops_there(snode):
    from tests.harness import encode_command
    r = snode.raw()
    r.send(encode_command("PING") + encode_command("QUIT") + encode_command("ADDJOB", "qq", "b", "0"))
    assert r.read_until_closed(5) == b"+PONG\r\n+OK\r\n"
    assert snode.raw().call("QLEN", "qq") == b":0\r\n"
