"""Jobs on one node: ADDJOB and its options, ids, SHOW, the state commands
(ACKJOB, FASTACK, NACK, WORKING, ENQUEUE, DEQUEUE, DELJOB) and the timers seen
from outside (RETRY requeue, TTL expiry, DELAY, RETRY 0), against a real node.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import NODE_WAIT_MS, encode_command, wait_until
from tests.integration.conftest import JOB_ID_RE, addjob, show

BADID = "BADID Invalid Job ID format."
GOOD_UNKNOWN = "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


def err(node, *args) -> str:
    """The exact error line of a command that must fail, without '-' and CRLF
    (raw socket: redis-py would strip the "ERR " prefix)."""
    with node.raw() as r:
        reply = r.call(*args)
    assert reply.startswith(b"-") and reply.endswith(b"\r\n"), reply
    return reply[1:-2].decode()


def myid(conn) -> bytes:
    return conn.execute_command("HELLO")[1]


# --------------------------------------------------------------------- ADDJOB
def test_addjob_reply_is_a_status_with_a_well_formed_id(snode):
    r = snode.raw()
    reply = r.call("ADDJOB", "q", "hello", "0")
    assert reply.startswith(b"+D-") and reply.endswith(b"\r\n"), reply
    jid = reply[1:-2]
    assert JOB_ID_RE.match(jid)
    assert len(jid) == 40 and jid[1:2] == jid[10:11] == jid[35:36] == b"-"
    # The node part is the first 8 hex chars of the node id.
    c = snode.client()
    assert jid[2:10] == myid(c)[:8]
    # Same reply shape once the connection speaks RESP3.
    r.call("HELLO", "3")
    assert r.call("ADDJOB", "q", "hello", "0").startswith(b"+D-")


@pytest.mark.parametrize("opts,nibble", [
    ((), b"05a1"),                            # 86400 s = 1440 min = 0x5a0, RETRY > 0: odd
    (("RETRY", "0"), b"05a0"),                # RETRY 0: even
    (("TTL", "120", "RETRY", "1"), b"0003"),   # 2 min -> 0x2, odd
    (("TTL", "60", "RETRY", "0"), b"0000"),    # 1 min -> 0x1, forced even
    (("TTL", "59"), b"0001"),                 # 0 min, RETRY default (>0): odd
    (("TTL", "3600"), b"003d"),               # 60 min = 0x3c, odd
])
def test_job_id_ttl_nibble(snode, opts, nibble):
    jid = addjob(snode.client(), "q", "b", *opts)
    assert jid[-4:] == nibble


def test_job_ids_are_unique(snode):
    c = snode.client()
    p = c.pipeline(transaction=False)
    for _ in range(1000):
        p.execute_command("ADDJOB", "q", "x", 0)
    ids = p.execute()
    assert len(set(ids)) == 1000
    assert all(JOB_ID_RE.match(i) for i in ids)


def test_addjob_defaults_shown_by_show(snode):
    c = snode.client()
    jid = addjob(c, "q", "body")
    s = show(c, jid)
    assert s["id"] == jid and s["queue"] == b"q" and s["body"] == b"body"
    assert s["state"] == b"queued"
    assert s["repl"] == 1            # min(3, reachable nodes) on a lone node
    assert 86390 <= s["ttl"] <= 86400
    assert s["retry"] == 300 and s["delay"] == 0
    assert s["nacks"] == 0 and s["additional-deliveries"] == 0
    me = myid(c)
    # As Disque: confirmations are listed only while the job waits for them.
    assert s["nodes-delivered"] == [me] and s["nodes-confirmed"] == []
    assert 0 < s["next-requeue-within"] <= 300_000 + 250
    assert s["next-awake-within"] is not None


@pytest.mark.parametrize("ttl,retry", [(100, 10), (5000, 300), (5, 1), (1, 1), (3000, 300)])
def test_default_retry_from_ttl(snode, ttl, retry):
    c = snode.client()
    assert show(c, addjob(c, "q", "b", "TTL", ttl))["retry"] == retry


def test_addjob_explicit_options(snode):
    c = snode.client()
    jid = addjob(c, "q", "b", "REPLICATE", 1, "TTL", 1000, "RETRY", 7, "DELAY", 30,
                 "MAXLEN", 5, "ASYNC")
    s = show(c, jid)
    assert (s["repl"], s["retry"], s["delay"]) == (1, 7, 30)
    assert 990 <= s["ttl"] <= 1000
    assert s["state"] == b"active"        # delayed: not queued yet
    assert c.execute_command("QLEN", "q") == 0
    assert 29_000 <= s["next-awake-within"] <= 30_000
    # Options are case-insensitive.
    jid = addjob(c, "q", "b", "ttl", 100, "retry", 3, "async")
    assert show(c, jid)["retry"] == 3


@pytest.mark.parametrize("opts,words", [
    (("REPLICATE", "0"), "REPLICATE"),
    (("REPLICATE", "65536"), "REPLICATE"),
    (("REPLICATE", "-1"), "REPLICATE"),
    (("REPLICATE", "abc"), ""),
    (("TTL", "0"), "TTL"),
    (("TTL", "-5"), "TTL"),
    (("TTL", "1.5"), ""),
    (("RETRY", "-1"), "RETRY"),
    (("RETRY", "x"), ""),
    (("DELAY", "-1"), "DELAY"),
    (("MAXLEN", "0"), "MAXLEN"),
    (("MAXLEN", "-3"), "MAXLEN"),
    (("RETRY", "0", "REPLICATE", "2"), "RETRY"),
    (("DELAY", "10", "TTL", "10"), "DELAY"),
    (("DELAY", "11", "TTL", "10"), "DELAY"),
    (("FOO",), "syntax"),
    (("TTL",), "syntax"),          # option without its value
    (("ASYNC", "extra"), "syntax"),
])
def test_addjob_validation_errors(snode, opts, words):
    c = snode.client()
    msg = err(snode, "ADDJOB", "q", "b", 0, *opts)
    assert msg.startswith("ERR "), msg
    assert words.lower() in msg.lower(), msg
    assert c.execute_command("QLEN", "q") == 0
    info = snode.raw().call("INFO", "jobs")
    assert b"registered_jobs:0\r\n" in info


@pytest.mark.parametrize("timeout,word", [("abc", "timeout"), ("-1", "negative"), ("1.5", "timeout")])
def test_addjob_bad_timeout(snode, timeout, word):
    msg = err(snode, "ADDJOB", "q", "b", timeout)
    assert msg.startswith("ERR ") and word in msg, msg


def test_addjob_replicate_more_than_nodes_is_norepl(snode):
    r = snode.raw()
    assert r.call("ADDJOB", "q", "b", "0", "REPLICATE", "2") == (
        b"-NOREPL Not enough reachable nodes for the requested replication level\r\n")
    assert r.call("ADDJOB", "q", "b", "0", "REPLICATE", "3", "ASYNC").startswith(b"-NOREPL ")
    assert r.call("QLEN", "q") == b":0\r\n"


def test_addjob_maxlen(snode):
    r = snode.raw()
    for _ in range(3):
        assert r.call("ADDJOB", "q", "b", "0", "MAXLEN", "3").startswith(b"+D-")
    assert r.call("ADDJOB", "q", "b", "0", "MAXLEN", "3") == (
        b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n")
    assert r.call("ADDJOB", "q", "b", "0", "MAXLEN", "4").startswith(b"+D-")
    # No MAXLEN: no limit.
    assert r.call("ADDJOB", "q", "b", "0").startswith(b"+D-")
    assert r.call("QLEN", "q") == b":5\r\n"
    # Only queued jobs count: delivered ones do not.
    r.call("GETJOB", "COUNT", "5", "FROM", "q")
    assert r.call("ADDJOB", "q", "b", "0", "MAXLEN", "1").startswith(b"+D-")


def test_addjob_paused_in(snode):
    r = snode.raw()
    assert r.call("PAUSE", "q", "in") == b"+in\r\n"
    assert r.call("ADDJOB", "q", "b", "0") == b"-PAUSED Queue paused in input, try later\r\n"
    assert r.call("ADDJOB", "other", "b", "0").startswith(b"+D-")
    assert r.call("PAUSE", "q", "none") == b"+none\r\n"
    assert r.call("ADDJOB", "q", "b", "0").startswith(b"+D-")


def test_bodies_and_queue_names_are_binary_safe(snode):
    c = snode.client()
    body = bytes(range(256)) + b"\r\n\x00\r\n$3\r\n*1\r\n"
    queue = b"q\x00\r\n\xff name"
    jid = addjob(c, queue, body)
    assert show(c, jid)["body"] == body
    assert c.execute_command("QPEEK", queue, 1) == [[queue, jid, body]]
    assert c.execute_command("GETJOB", "FROM", queue) == [[queue, jid, body]]
    # Empty body, 1 MB body.
    for b in (b"", b"x" * (1 << 20)):
        jid = addjob(c, "big", b)
        assert c.execute_command("GETJOB", "FROM", "big") == [[b"big", jid, b]]


# ---------------------------------------------------------------------- SHOW
def test_show_reply_types_byte_exact(snode):
    r = snode.raw()
    jid = r.call("ADDJOB", "q", "b", "0", "RETRY", "0")[1:-2]
    raw = r.call("SHOW", jid)
    assert raw.startswith(b"*30\r\n$2\r\nid\r\n$40\r\n" + jid + b"\r\n$5\r\nqueue\r\n$1\r\nq\r\n"
                          b"$5\r\nstate\r\n$6\r\nqueued\r\n$4\r\nrepl\r\n:1\r\n$3\r\nttl\r\n:")
    # RETRY 0: no requeue time -> null bulk; awake time (TTL) -> integer.
    assert b"$19\r\nnext-requeue-within\r\n$-1\r\n$17\r\nnext-awake-within\r\n:" in raw
    assert raw.endswith(b"$4\r\nbody\r\n$1\r\nb\r\n")
    assert b"$15\r\nnodes-delivered\r\n*1\r\n$40\r\n" in raw
    r.call("HELLO", "3")
    raw3 = r.call("SHOW", jid)
    assert raw3.startswith(b"*30\r\n")     # stays a flat array under RESP3
    assert b"$19\r\nnext-requeue-within\r\n_\r\n" in raw3


def test_show_field_order_and_unknown(snode):
    c = snode.client()
    jid = addjob(c)
    reply = c.execute_command("SHOW", jid)
    assert reply[::2] == [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay",
                          b"retry", b"nacks", b"additional-deliveries", b"nodes-delivered",
                          b"nodes-confirmed", b"next-requeue-within", b"next-awake-within",
                          b"body"]
    assert c.execute_command("SHOW", GOOD_UNKNOWN) is None
    assert snode.raw().call("SHOW", GOOD_UNKNOWN) == b"$-1\r\n"
    assert err(snode, "SHOW", "nope") == BADID


def test_ctime_orders_jobs(snode):
    c = snode.client()
    p = c.pipeline(transaction=False)
    for i in range(50):
        p.execute_command("ADDJOB", "q", str(i), 0)
    ids = p.execute()
    ctimes = [show(c, j)["ctime"] for j in ids]
    assert ctimes == sorted(ctimes) and len(set(ctimes)) == 50
    now_ns = time.time_ns()
    assert abs(ctimes[0] // 1_000_000 - now_ns // 1_000_000) < 60_000   # ms * 1e6 + counter


def test_hundred_jobs_come_out_in_creation_order(snode):
    c = snode.client()
    p = c.pipeline(transaction=False)
    for i in range(100):
        p.execute_command("ADDJOB", "fifo", f"job-{i}", 0)
    ids = p.execute()
    peek = c.execute_command("QPEEK", "fifo", 100)
    assert [j[1] for j in peek] == ids
    # Half one by one, half in one GETJOB COUNT.
    got = [c.execute_command("GETJOB", "NOHANG", "FROM", "fifo")[0] for _ in range(50)]
    got += c.execute_command("GETJOB", "NOHANG", "COUNT", 100, "FROM", "fifo")
    assert [j[1] for j in got] == ids
    assert [j[2] for j in got] == [f"job-{i}".encode() for i in range(100)]
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "fifo") is None


# ----------------------------------------------------------------- ACK & co
def test_ackjob(snode):
    c = snode.client()
    a, b = addjob(c), addjob(c)
    c.execute_command("GETJOB", "FROM", "q")
    assert c.execute_command("ACKJOB", a, b, GOOD_UNKNOWN) == 2
    assert show(c, a) is None and show(c, b) is None      # lone node: gone at once
    assert c.execute_command("QLEN", "q") == 0
    assert c.execute_command("ACKJOB", a) == 0
    assert c.execute_command("ACKJOB", GOOD_UNKNOWN) == 0
    # The acked job never comes back.
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_ack_same_id_twice_in_one_call(snode):
    c = snode.client()
    a = addjob(c)
    assert c.execute_command("ACKJOB", a, a) == 1


@pytest.mark.parametrize("cmd", ["ACKJOB", "FASTACK", "NACK", "ENQUEUE", "DEQUEUE", "DELJOB"])
@pytest.mark.parametrize("bad", [
    "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a",      # 39 chars
    "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1x",    # 41 chars
    "X-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1",     # no D
    "D_deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1",     # dash at 1
    "D-deadbeef_AAAAAAAAAAAAAAAAAAAAAAAA-05a1",     # dash at 10
    "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA_05a1",     # dash at 35
    "",
    "hello",
])
@pytest.mark.parametrize("where", ["first", "last"])
def test_badid_anywhere_fails_whole_command(snode, cmd, bad, where):
    c = snode.client()
    a = addjob(c, "q", "b")
    before = show(c, a)
    ids = [bad, a] if where == "first" else [a, GOOD_UNKNOWN, bad]
    assert err(snode, cmd, *ids) == BADID
    after = show(c, a)
    assert after is not None and after["state"] == before["state"] == b"queued"
    assert c.execute_command("QLEN", "q") == 1


@pytest.mark.parametrize("cmd", ["SHOW", "WORKING"])
def test_badid_single_id_commands(snode, cmd):
    assert snode.raw().call(cmd, "D-123") == b"-BADID Invalid Job ID format.\r\n"


def test_fastack_and_deljob(snode):
    c = snode.client()
    a, b, d = addjob(c), addjob(c), addjob(c)
    c.execute_command("GETJOB", "FROM", "q")         # a is active, b and d queued
    assert c.execute_command("FASTACK", a, b, GOOD_UNKNOWN) == 2
    assert show(c, a) is None and show(c, b) is None
    assert c.execute_command("FASTACK", a) == 0
    assert c.execute_command("DELJOB", d, GOOD_UNKNOWN) == 1
    assert show(c, d) is None and c.execute_command("QLEN", "q") == 0
    assert c.execute_command("DELJOB", d) == 0


def test_nack_requeues_and_counts(snode):
    c = snode.client()
    a = addjob(c)
    assert c.execute_command("NACK", a) == 0               # already queued
    job = c.execute_command("GETJOB", "FROM", "q")[0]
    assert job[1] == a and show(c, a)["state"] == b"active"
    assert c.execute_command("NACK", a, GOOD_UNKNOWN) == 1
    s = show(c, a)
    assert s["state"] == b"queued" and s["nacks"] == 1 and s["additional-deliveries"] == 0
    got = c.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", a, b"body", b"nacks", 1, b"additional-deliveries", 0]]
    assert c.execute_command("NACK", a) == 1
    assert show(c, a)["nacks"] == 2


def test_enqueue_dequeue(snode):
    c = snode.client()
    a = addjob(c)
    assert c.execute_command("ENQUEUE", a) == 0             # already queued
    assert c.execute_command("DEQUEUE", a, GOOD_UNKNOWN) == 1
    s = show(c, a)
    assert s["state"] == b"active" and c.execute_command("QLEN", "q") == 0
    assert c.execute_command("DEQUEUE", a) == 0             # not queued
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    assert c.execute_command("ENQUEUE", a, GOOD_UNKNOWN) == 1
    s = show(c, a)
    assert s["state"] == b"queued" and s["additional-deliveries"] == 1 and s["nacks"] == 0
    c.execute_command("GETJOB", "FROM", "q")
    assert c.execute_command("ENQUEUE", a) == 1
    assert show(c, a)["additional-deliveries"] == 2


def test_enqueue_refuses_acked_job(snode):
    c = snode.client()
    a = addjob(c)
    c.execute_command("ACKJOB", a)
    assert c.execute_command("ENQUEUE", a) == 0
    assert c.execute_command("NACK", a) == 0
    assert c.execute_command("QLEN", "q") == 0


def test_working(snode):
    c = snode.client()
    a = addjob(c, "q", "b", "RETRY", 100)
    r = snode.raw()
    # On a queued job: dequeues it and postpones the requeue by RETRY.
    assert r.call("WORKING", a) == b":100\r\n"
    s = show(c, a)
    assert s["state"] == b"active" and c.execute_command("QLEN", "q") == 0
    assert 99_000 <= s["next-requeue-within"] <= 100_000 + 250
    assert r.call("WORKING", GOOD_UNKNOWN) == b"-NOJOB Job not known in the context of this node.\r\n"
    assert snode.client().execute_command("WORKING", a) == 100


def test_working_too_late_after_half_ttl(snode):
    c = snode.client()
    r = snode.raw()
    t0 = time.monotonic()               # before the job exists: a lower bound
    a = addjob(c, "q", "b", "TTL", 2, "RETRY", 1)
    assert r.call("WORKING", a) == b":1\r\n"

    def too_late():
        reply = r.call("WORKING", a)
        if reply == b":1\r\n":
            return False
        return reply
    reply = wait_until(too_late, interval=0.05)
    assert reply == (b"-TOOLATE Half of job TTL already elapsed, you are no longer allowed "
                     b"to postpone the next delivery.\r\n")
    assert time.monotonic() - t0 >= 0.9


# -------------------------------------------------------------------- timers
def test_unacked_job_comes_back_after_retry(snode):
    c = snode.client()
    a = addjob(c, "q", "payload", "RETRY", 1)
    t0 = time.monotonic()
    assert c.execute_command("GETJOB", "FROM", "q")[0][1] == a
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    # When it comes back is the node's schedule (RETRY +- 250 ms; queued
    # already, the next one), not a wall-clock upper bound a loaded machine
    # could miss.
    assert show(c, a)["next-requeue-within"] <= 1250
    again = wait_until(lambda: c.execute_command("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q"),
                       interval=0.02)
    elapsed = time.monotonic() - t0
    assert again == [[b"q", a, b"payload", b"nacks", 0, b"additional-deliveries", 1]]
    assert elapsed >= 0.7, elapsed


def test_blocked_getjob_gets_requeued_job(snode):
    """The requeue also wakes a client blocked on the queue."""
    c = snode.client()
    a = addjob(c, "q", "p", "RETRY", 1)
    c.execute_command("GETJOB", "FROM", "q")
    w = snode.raw()
    w.send(encode_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "q"))
    assert w.read_reply() == (b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + a + b"\r\n$1\r\np\r\n")


def test_acked_job_does_not_come_back(snode):
    c = snode.client()
    a = addjob(c, "q", "p", "RETRY", 1)
    b = addjob(c, "witness", "p", "RETRY", 1)
    c.execute_command("GETJOB", "FROM", "q")
    c.execute_command("GETJOB", "FROM", "witness")
    assert c.execute_command("ACKJOB", a) == 1
    # The unacked witness, added at the same time, comes back; the acked one never.
    wait_until(lambda: c.execute_command("QLEN", "witness") == 1)
    assert c.execute_command("QLEN", "q") == 0
    assert show(c, a) is None and show(c, b)["state"] == b"queued"
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_job_with_ttl_expires(snode):
    c = snode.client()
    t0 = time.monotonic()               # before the jobs exist: a lower bound
    queued = addjob(c, "q", "p", "TTL", 1)
    active = addjob(c, "q2", "p", "TTL", 1, "RETRY", 0)
    c.execute_command("GETJOB", "FROM", "q2")
    before = int(dict(l.split(b":") for l in snode.raw().call("INFO", "stats").split(b"\r\n")
                      if b"expired_jobs" in l)[b"expired_jobs"])
    wait_until(lambda: show(c, queued) is None and show(c, active) is None)
    assert time.monotonic() - t0 >= 0.5
    assert c.execute_command("QLEN", "q") == 0
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q", "q2") is None
    assert b"registered_jobs:0\r\n" in snode.raw().call("INFO", "jobs")
    stats = snode.raw().call("INFO", "stats")
    assert b"expired_jobs:%d\r\n" % (before + 2) in stats


def test_retry_zero_is_delivered_once(snode):
    c = snode.client()
    once = addjob(c, "once", "p", "RETRY", 0)
    witness = addjob(c, "witness", "p", "RETRY", 1)
    assert show(c, once)["next-requeue-within"] is None
    assert c.execute_command("GETJOB", "FROM", "once")[0][1] == once
    c.execute_command("GETJOB", "FROM", "witness")
    # NACK and ENQUEUE cannot queue an at-most-once job a second time.
    assert c.execute_command("NACK", once) == 0
    assert c.execute_command("ENQUEUE", once) == 0
    # The RETRY 1 witness comes back; the RETRY 0 job does not.
    wait_until(lambda: c.execute_command("QLEN", "witness") == 1)
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "once") is None
    s = show(c, once)
    assert s["state"] == b"active" and s["next-requeue-within"] is None
    assert s["additional-deliveries"] == 0


def test_delay_queues_the_job_later(snode):
    c = snode.client()
    t0 = time.monotonic()               # before the job exists: a lower bound
    a = addjob(c, "q", "p", "DELAY", 1)
    assert show(c, a)["state"] == b"active"
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") is None
    got = c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "q")
    assert got[0][1] == a
    assert time.monotonic() - t0 >= 0.9
    assert show(c, a)["additional-deliveries"] == 0    # the first queueing is no redelivery


def test_maxmemory_oom_and_eviction(snode):
    c = snode.client()
    r = snode.raw()
    try:
        assert r.call("CONFIG", "SET", "maxmemory", "3mb") == b"+OK\r\n"
        body = b"x" * 100_000
        ids = []
        for _ in range(200):
            reply = r.call("ADDJOB", "mem", body, "0")
            if reply.startswith(b"-"):
                break
            ids.append(reply[1:-2])
        else:
            pytest.fail("ADDJOB never hit maxmemory")
        assert reply.startswith(b"-OOM "), reply
        assert 3 <= len(ids) <= 12
        # Commands that would grow memory are refused; the others work.
        c.execute_command("GETJOB", "FROM", "mem")
        assert r.call("NACK", ids[0]).startswith(b"-OOM ")
        assert r.call("ENQUEUE", ids[0]).startswith(b"-OOM ")
        assert r.call("QLEN", "mem") == b":%d\r\n" % (len(ids) - 1)
        assert r.call("PING") == b"+PONG\r\n"
        # Acking frees memory: ADDJOB works again.
        assert c.execute_command("ACKJOB", *ids[:3]) == 3
        assert r.call("ADDJOB", "mem", body, "0").startswith(b"+D-")
        # Delivered RETRY 0 jobs are safe to evict: they make room.
        c.execute_command("DEBUG", "FLUSHALL")
        at_most_once = []
        while True:
            reply = r.call("ADDJOB", "amo", body, "0", "RETRY", "0")
            if reply.startswith(b"-"):
                break
            at_most_once.append(reply[1:-2])
        assert reply.startswith(b"-OOM ")
        c.execute_command("GETJOB", "COUNT", 100, "FROM", "amo")
        assert r.call("ADDJOB", "mem", body, "0").startswith(b"+D-")
        assert show(c, at_most_once[0]) is None
    finally:
        r.call("CONFIG", "SET", "maxmemory", "1gb")


# ------------------------------------------------------- held jobs (ext)
def jscan_ids(c, *opts) -> list[bytes]:
    cursor, ids = c.execute_command("JSCAN", 0, "BUSYLOOP", *opts)
    assert cursor == b"0"
    return ids


def test_held_job_is_live_but_invisible_until_enqueue(snode):
    c = snode.client()
    r = snode.raw()
    held = addjob(c, "hq", "later", "HOLD", "RETRY", 5)
    plain = addjob(c, "hq", "now", "RETRY", 5)
    s = show(c, held)
    assert s["state"] == b"held" and s["body"] == b"later" and s["retry"] == 5
    assert s["next-requeue-within"] is None and s["ttl"] > 86000
    # Neither GETJOB, QPEEK nor QLEN sees it; the unheld job is served alone.
    assert c.execute_command("QLEN", "hq") == 1
    assert [j[1] for j in c.execute_command("QPEEK", "hq", 10)] == [plain]
    assert c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "hq") == [
        [b"hq", plain, b"now"]]
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "hq") is None
    # JSCAN lists it, STATE held filters it, REPLY all shows the state.
    assert held in jscan_ids(c, "QUEUE", "hq")
    assert jscan_ids(c, "STATE", "held") == [held]
    assert held not in jscan_ids(c, "STATE", "active", "STATE", "queued")
    entry = jscan_ids(c, "STATE", "held", "REPLY", "all")[0]
    assert entry[:6] == [b"id", held, b"queue", b"hq", b"state", b"held"]
    # NACK, DEQUEUE and WORKING do not release it.
    assert c.execute_command("NACK", held) == 0
    assert c.execute_command("DEQUEUE", held) == 0
    assert r.call("WORKING", held) == b":5\r\n"
    assert show(c, held)["state"] == b"held"
    # ENQUEUE does: queued now, no delivery counted.
    assert c.execute_command("ENQUEUE", held, GOOD_UNKNOWN) == 1
    s = show(c, held)
    assert s["state"] == b"queued" and s["additional-deliveries"] == 0 and s["nacks"] == 0
    assert c.execute_command("ENQUEUE", held) == 0          # queued already
    got = c.execute_command("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "hq")
    assert got == [[b"hq", held, b"later", b"nacks", 0, b"additional-deliveries", 0]]
    assert jscan_ids(c, "STATE", "held") == []


def test_held_job_is_not_queued_by_its_delay_or_retry(snode):
    c = snode.client()
    held = addjob(c, "hd", "held", "HOLD", "DELAY", 1, "RETRY", 1)
    witness = addjob(c, "hd", "witness", "DELAY", 1, "RETRY", 1)
    # The witness is queued by its DELAY, then re-queued by its RETRY...
    got = c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "hd")
    assert got == [[b"hd", witness, b"witness"]]
    wait_until(lambda: show(c, witness)["additional-deliveries"] == 1)
    # ...while the held job, created with the same timers, is still held.
    s = show(c, held)
    assert s["state"] == b"held" and s["next-requeue-within"] is None
    assert c.execute_command("QLEN", "hd") == 1


def test_release_starts_the_delay_and_retry_clocks(snode):
    c = snode.client()
    held = addjob(c, "hr", "b", "HOLD", "DELAY", 1, "RETRY", 1)
    witness = addjob(c, "hr-witness", "w", "DELAY", 1)
    # Once a job added with the same DELAY is queued, the held one's DELAY
    # would have elapsed too, had its clock run.
    assert c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "hr-witness")[0][1] \
        == witness
    t0 = time.monotonic()
    assert c.execute_command("ENQUEUE", held) == 1
    s = show(c, held)
    assert s["state"] == b"active" and s["delay"] == 1
    assert 800 <= s["next-requeue-within"] <= 1000
    got = c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "WITHCOUNTERS", "FROM", "hr")
    assert time.monotonic() - t0 >= 0.9
    assert got == [[b"hr", held, b"b", b"nacks", 0, b"additional-deliveries", 0]]
    # Not acked: RETRY brings it back, as any job, counting that redelivery.
    got = c.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "WITHCOUNTERS", "FROM", "hr")
    assert got == [[b"hr", held, b"b", b"nacks", 0, b"additional-deliveries", 1]]
    assert c.execute_command("ACKJOB", held) == 1


def test_held_jobs_end_by_ttl_ack_fastack_and_deljob(snode):
    c = snode.client()
    short = addjob(c, "he", "x", "HOLD", "TTL", 1, "RETRY", 0)
    acked, fast, deleted = (addjob(c, "he", "x", "HOLD") for _ in range(3))
    assert c.execute_command("ACKJOB", acked) == 1
    assert c.execute_command("FASTACK", fast) == 1
    assert c.execute_command("DELJOB", deleted) == 1
    assert all(show(c, j) is None for j in (acked, fast, deleted))
    wait_until(lambda: show(c, short) is None)
    assert c.execute_command("ENQUEUE", acked, fast, deleted, short) == 0
    assert c.execute_command("QLEN", "he") == 0


def test_hold_option_anywhere_among_the_options(snode):
    c = snode.client()
    for opts in (("HOLD",), ("hold", "RETRY", 3), ("TTL", 60, "HOLD", "ASYNC")):
        jid = addjob(c, "ho", "b", *opts)
        assert show(c, jid)["state"] == b"held"
    assert err(snode, "ADDJOB", "ho", "b", "0", "HOLD", "HOLD2") == "ERR syntax error"
