"""Queues and iteration on a real node: QLEN, QPEEK, QSTAT, PAUSE replies,
QSCAN and JSCAN (cursors, filters, the at-least-once guarantee while the data
set changes, REPLY all)."""

from __future__ import annotations

import random

import pytest

from tests.integration.conftest import addjob, show


def fill(c, queue, n, *opts, body="b"):
    p = c.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("ADDJOB", queue, f"{body}{i}", 0, *opts)
    return p.execute()


def qstat(c, queue) -> dict | None:
    reply = c.execute_command("QSTAT", queue)
    if reply is None:
        return None
    assert isinstance(reply, list) and len(reply) == 20, reply
    return {reply[i].decode(): reply[i + 1] for i in range(0, 20, 2)}


# ------------------------------------------------------------------ QLEN/QPEEK
def test_qlen(snode):
    r = snode.raw()
    assert r.call("QLEN", "nope") == b":0\r\n"
    fill(snode.client(), "q", 7)
    assert r.call("QLEN", "q") == b":7\r\n"
    r.call("GETJOB", "COUNT", "3", "FROM", "q")
    assert r.call("QLEN", "q") == b":4\r\n"


def test_qpeek(snode):
    c = snode.client()
    ids = fill(c, "q", 5)
    assert c.execute_command("QPEEK", "q", 2) == [[b"q", ids[0], b"b0"], [b"q", ids[1], b"b1"]]
    assert [j[1] for j in c.execute_command("QPEEK", "q", 100)] == ids
    assert [j[1] for j in c.execute_command("QPEEK", "q", -2)] == [ids[4], ids[3]]
    assert [j[1] for j in c.execute_command("QPEEK", "q", -100)] == ids[::-1]
    assert c.execute_command("QPEEK", "q", 0) == []
    assert c.execute_command("QPEEK", "nope", 3) == []
    # Peeking changes nothing.
    assert c.execute_command("QLEN", "q") == 5
    assert show(c, ids[0])["state"] == b"queued"
    r = snode.raw()
    assert r.call("QPEEK", "nope", "3") == b"*0\r\n"
    assert r.call("QPEEK", "q", "x") == b"-ERR value is not an integer or out of range\r\n"
    assert r.call("QPEEK", "q") == b"-ERR wrong number of arguments for 'qpeek' command\r\n"


# ---------------------------------------------------------------------- QSTAT
@pytest.mark.parametrize("proto,null", [(2, b"*-1\r\n"), (3, b"_\r\n")])  # Disque's null array
def test_qstat_unknown_queue_is_null(snode, proto, null):
    r = snode.raw()
    if proto == 3:
        r.call("HELLO", "3")
    assert r.call("QSTAT", "nope") == null


def test_qstat_fields(snode):
    c = snode.client()
    fill(c, "q", 3)
    c.execute_command("GETJOB", "FROM", "q")
    s = qstat(c, "q")
    assert list(s) == ["name", "len", "age", "idle", "blocked", "import-from", "import-rate",
                       "jobs-in", "jobs-out", "pause"]
    assert s["name"] == b"q" and s["len"] == 2 and s["blocked"] == 0
    assert s["jobs-in"] == 3 and s["jobs-out"] == 1
    assert s["import-from"] == [] and s["import-rate"] == 0
    assert s["pause"] == b"none"
    assert 0 <= s["age"] <= 5 and 0 <= s["idle"] <= 5
    c.execute_command("PAUSE", "q", "all")
    assert qstat(c, "q")["pause"] == b"all"


@pytest.mark.parametrize("proto", [2, 3])
def test_qstat_stays_a_flat_array_byte_exact(snode, proto):
    r = snode.raw()
    if proto == 3:
        r.call("HELLO", "3")
    r.call("ADDJOB", "q", "b", "0")
    raw = r.call("QSTAT", "q")
    assert raw.startswith(b"*20\r\n$4\r\nname\r\n$1\r\nq\r\n$3\r\nlen\r\n:1\r\n$3\r\nage\r\n:")
    assert b"$11\r\nimport-from\r\n*0\r\n$11\r\nimport-rate\r\n:0\r\n" in raw
    assert raw.endswith(b"$7\r\njobs-in\r\n:1\r\n$8\r\njobs-out\r\n:0\r\n$5\r\npause\r\n$4\r\nnone\r\n")


# ---------------------------------------------------------------------- PAUSE
@pytest.mark.parametrize("opts,reply", [
    (("in",), b"+in\r\n"),
    (("out",), b"+out\r\n"),
    (("all",), b"+all\r\n"),
    (("in", "out"), b"+all\r\n"),
    (("none",), b"+none\r\n"),
    (("IN",), b"+in\r\n"),
    (("state",), b"+none\r\n"),
    (("out", "state"), b"+out\r\n"),
    (("in", "none"), b"+none\r\n"),          # none clears what came before
    (("none", "out"), b"+out\r\n"),
])
def test_pause_replies(snode, opts, reply):
    r = snode.raw()
    assert r.call("PAUSE", "q", *opts) == reply


def test_pause_state_is_kept_and_reported(snode):
    r = snode.raw()
    assert r.call("PAUSE", "q", "in") == b"+in\r\n"
    assert r.call("PAUSE", "q", "state") == b"+in\r\n"
    assert r.call("PAUSE", "q", "out") == b"+out\r\n"     # replaces, does not add
    assert r.call("PAUSE", "q", "state") == b"+out\r\n"
    assert r.call("PAUSE", "q", "none") == b"+none\r\n"


def test_pause_errors(snode):
    r = snode.raw()
    assert r.call("PAUSE", "q", "sideways") == b"-ERR syntax error\r\n"
    assert r.call("PAUSE", "q") == b"-ERR wrong number of arguments for 'pause' command\r\n"
    assert r.call("PAUSE", "q", "in", "bogus") == b"-ERR syntax error\r\n"
    assert r.call("PAUSE", "q", "state") == b"+none\r\n"   # the failed calls changed nothing


def test_pause_state_does_not_create_a_queue(snode):
    r = snode.raw()
    assert r.call("PAUSE", "ghost", "state") == b"+none\r\n"
    assert r.call("PAUSE", "ghost", "none") == b"+none\r\n"
    assert r.call("QSTAT", "ghost") == b"*-1\r\n"
    # Pausing does create it: the pause must be remembered.
    assert r.call("PAUSE", "ghost", "in") == b"+in\r\n"
    assert r.call("QSTAT", "ghost").startswith(b"*20\r\n")


# ---------------------------------------------------------------------- QSCAN
def scan_all(c, command: str, *opts) -> list:
    """Every item of a full QSCAN/JSCAN iteration, cursor as a bulk string."""
    cursor, seen, calls = b"0", [], 0
    while True:
        cursor, items = c.execute_command(command, cursor, *opts)
        assert isinstance(cursor, bytes)
        seen += items
        calls += 1
        if cursor == b"0":
            return seen
        assert calls < 10_000


def qscan_all(c, *opts) -> list[bytes]:
    return scan_all(c, "QSCAN", *opts)


def test_scan_cursor_may_follow_the_options(snode):
    c = snode.client()
    fill(c, "q", 1)
    assert c.execute_command("QSCAN", "COUNT", 5, "0") == [b"0", [b"q"]]
    assert len(c.execute_command("JSCAN", "COUNT", 5, "0", "QUEUE", "q")[1]) == 1


def test_qscan_reply_shape(snode):
    r = snode.raw()
    assert r.call("QSCAN") == b"*2\r\n$1\r\n0\r\n*0\r\n"
    r.call("ADDJOB", "q", "b", "0")
    assert r.call("QSCAN", "0") == b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nq\r\n"
    r.call("HELLO", "3")
    assert r.call("QSCAN", "0", "BUSYLOOP") == b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nq\r\n"


def test_qscan_iterates_everything(snode):
    c = snode.client()
    names = [f"queue:{i}".encode() for i in range(300)]
    p = c.pipeline(transaction=False)
    for n in names:
        p.execute_command("ADDJOB", n, "b", 0)
    p.execute()
    seen = qscan_all(c, "COUNT", 7)
    assert set(seen) == set(names)
    # With a small COUNT it takes several calls; BUSYLOOP takes one.
    cursor, first = c.execute_command("QSCAN", 0, "COUNT", 7)
    assert cursor != b"0" and 0 < len(first) < 300
    cursor, everything = c.execute_command("QSCAN", "BUSYLOOP")
    assert cursor == b"0" and sorted(everything) == sorted(names)


def test_qscan_minlen_maxlen(snode):
    c = snode.client()
    for i in range(1, 6):
        fill(c, f"len{i}", i)
    c.execute_command("QSCAN", "BUSYLOOP")
    _, got = c.execute_command("QSCAN", "BUSYLOOP", "MINLEN", 3)
    assert sorted(got) == [b"len3", b"len4", b"len5"]
    _, got = c.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", 2)
    assert sorted(got) == [b"len1", b"len2"]
    _, got = c.execute_command("QSCAN", "BUSYLOOP", "MINLEN", 2, "MAXLEN", 4)
    assert sorted(got) == [b"len2", b"len3", b"len4"]
    _, got = c.execute_command("QSCAN", "BUSYLOOP", "IMPORTRATE", 1)
    assert got == []          # a lone node imports nothing


def test_qscan_returns_stable_queues_while_others_come_and_go(snode):
    c = snode.client()
    rnd = random.Random(7)
    stable = {f"stable:{i}".encode() for i in range(200)}
    churn = [f"churn:{i}".encode() for i in range(400)]
    p = c.pipeline(transaction=False)
    for n in stable:
        p.execute_command("ADDJOB", n, "b", 0)
    for n in churn[:200]:
        p.execute_command("ADDJOB", n, "b", 0)
    p.execute()
    cursor, seen = b"0", set()
    added = 200
    while True:
        # MINLEN 1: a churn queue emptied by GETJOB has gone from the scan's view.
        cursor, names = c.execute_command("QSCAN", cursor, "COUNT", 5, "MINLEN", 1)
        seen.update(names)
        p = c.pipeline(transaction=False)
        for _ in range(3):
            if added < len(churn):
                p.execute_command("ADDJOB", churn[added], "b", 0)
                added += 1
        for n in rnd.sample(churn[:added], 3):
            p.execute_command("GETJOB", "NOHANG", "FROM", n)
        p.execute()
        if cursor == b"0":
            break
    assert stable <= seen, sorted(stable - seen)[:5]
    assert seen <= stable | set(churn)


BAD_CURSOR = b"-ERR invalid cursor or option name\r\n"     # Disque's words


@pytest.mark.parametrize("args,reply", [
    # Past an unsigned long (strtoul): not a cursor.
    (("99999999999999999999999",), BAD_CURSOR),
    ((" 1",), BAD_CURSOR),
    (("COUNT", "x"), b"-ERR value is not an integer or out of range\r\n"),
    (("MINLEN", "x"), b"-ERR value is not an integer or out of range\r\n"),
    # As in Disque, a word that is no option is the cursor (once, anywhere).
    (("FOO",), BAD_CURSOR),
    (("COUNT",), BAD_CURSOR),
    (("0", "FOO"), b"-ERR syntax error\r\n"),
    (("0", "0"), b"-ERR syntax error\r\n"),
])
def test_qscan_errors(snode, args, reply):
    assert snode.raw().call("QSCAN", *args) == reply


@pytest.mark.parametrize("args", [("-1",), ("4096",), ("18446744073709551615",), ("+0",),
                                  ("COUNT", "0"), ("COUNT", "-1")])
def test_qscan_takes_what_disque_takes(snode, args):
    """Any unsigned long is a cursor, COUNT 0 or negative is no error (as Disque)."""
    r = snode.raw()
    r.call("ADDJOB", "q", "b", "0")
    got = r.call("QSCAN", *args)
    assert got.startswith(b"*2\r\n$"), got


# ---------------------------------------------------------------------- JSCAN
def jscan_all(c, *opts) -> list:
    return scan_all(c, "JSCAN", *opts)


def test_jscan_reply_shape(snode):
    r = snode.raw()
    assert r.call("JSCAN") == b"*2\r\n$1\r\n0\r\n*0\r\n"
    jid = r.call("ADDJOB", "q", "b", "0")[1:-2]
    # Disque answers the ids as status replies.
    assert r.call("JSCAN", "0", "BUSYLOOP") == b"*2\r\n$1\r\n0\r\n*1\r\n+" + jid + b"\r\n"


def test_jscan_iterates_every_job(snode):
    c = snode.client()
    ids = set(fill(c, "a", 300)) | set(fill(c, "b", 200))
    seen = jscan_all(c, "COUNT", 11)
    assert set(seen) == ids
    cursor, first = c.execute_command("JSCAN", 0, "COUNT", 11)
    assert cursor != b"0" and len(first) < 500
    cursor, everything = c.execute_command("JSCAN", "BUSYLOOP")
    assert cursor == b"0" and set(everything) == ids and len(everything) == 500


def test_jscan_filters(snode):
    c = snode.client()
    a = fill(c, "qa", 10)
    b = fill(c, "qb", 10)
    active = [j[1] for j in c.execute_command("GETJOB", "COUNT", 4, "FROM", "qa")]
    delayed = addjob(c, "qb", "d", "DELAY", 100)
    assert set(jscan_all(c, "QUEUE", "qa")) == set(a)
    assert set(jscan_all(c, "QUEUE", "qb")) == set(b) | {delayed}
    assert set(jscan_all(c, "STATE", "active")) == set(active) | {delayed}
    assert set(jscan_all(c, "STATE", "queued", "QUEUE", "qa")) == set(a) - set(active)
    assert set(jscan_all(c, "STATE", "active", "STATE", "queued")) == set(a) | set(b) | {delayed}
    assert jscan_all(c, "STATE", "acked") == []
    assert jscan_all(c, "STATE", "wait-repl") == []
    assert jscan_all(c, "QUEUE", "nope") == []


def test_jscan_reply_all_is_show_shaped(snode):
    c = snode.client()
    ids = fill(c, "q", 3)
    _, entries = c.execute_command("JSCAN", "BUSYLOOP", "REPLY", "all")
    assert len(entries) == 3
    for e in entries:
        assert isinstance(e, list) and len(e) == 30
        fresh = c.execute_command("SHOW", e[1])
        # Same fields in the same order; times may differ by a few ms.
        assert e[::2] == fresh[::2]
        assert [e[i] for i in (1, 3, 5, 7, 11, 15, 17, 19, 29)] == \
               [fresh[i] for i in (1, 3, 5, 7, 11, 15, 17, 19, 29)]
    assert {e[1] for e in entries} == set(ids)
    _, plain = c.execute_command("JSCAN", "BUSYLOOP", "REPLY", "id")
    assert set(plain) == set(ids)


def test_jscan_returns_stable_jobs_while_others_come_and_go(snode):
    c = snode.client()
    rnd = random.Random(11)
    stable = set(fill(c, "stable", 300))
    churn = list(fill(c, "churn", 200))
    cursor, seen = b"0", set()
    while True:
        cursor, items = c.execute_command("JSCAN", cursor, "COUNT", 9)
        seen.update(items)
        # Add some, ack (delete) some of the churn jobs between calls.
        churn += fill(c, "churn", 4)
        gone = rnd.sample(churn, 4)
        for g in gone:
            churn.remove(g)
        c.execute_command("ACKJOB", *gone)
        if cursor == b"0":
            break
    assert stable <= seen, len(stable - seen)
    assert all(show(c, j) is not None for j in list(stable)[:5])


@pytest.mark.parametrize("args,reply", [
    (("STATE", "sleeping"), b"-ERR Invalid job state name\r\n"),
    (("REPLY", "some"), b"-ERR Invalid REPLY type, try ID or ALL\r\n"),
    (("COUNT", "x"), b"-ERR value is not an integer or out of range\r\n"),
    (("QUEUE",), BAD_CURSOR),
    (("BOGUS",), BAD_CURSOR),
    (("0", "1"), b"-ERR syntax error\r\n"),
])
def test_jscan_errors(snode, args, reply):
    assert snode.raw().call("JSCAN", *args) == reply
