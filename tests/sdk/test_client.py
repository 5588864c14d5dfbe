"""Every command method of Client and AsyncClient, against a real node, in
RESP2 and RESP3 (the ``api`` fixture runs each test with all four)."""

from __future__ import annotations

import signal
import time

import pytest
import redis.asyncio.retry
import redis.retry
from redis.backoff import NoBackoff

from disquette import (
    AddJobsError, Hello, Job, MaxLenError, NoNodeAvailableError, QueuePausedError,
    ReplyLostError,
)
from tests.sdk.conftest import make_api

JOB_ID_LEN = 40


def test_add_show_get_ack(api):
    jid = api.add_job("emails", {"to": 42}, retry=60, ttl=3600)
    assert isinstance(jid, str) and len(jid) == JOB_ID_LEN and jid.startswith("D-")
    shown = api.show(jid)
    assert shown["id"] == jid and shown["queue"] == "emails" and shown["state"] == "queued"
    assert shown["retry"] == 60 and 3590 <= shown["ttl"] <= 3600
    assert shown["body"] == {"to": 42} and shown["raw"] == b'{"to":42}'
    assert shown["nodes_delivered"] == [api.node_id] and shown["additional_deliveries"] == 0

    jobs = api.get_jobs("emails", count=10, timeout_ms=1000)
    assert [j.id for j in jobs] == [jid]
    job = jobs[0]
    assert (job.queue, job.body, job.raw) == ("emails", {"to": 42}, b'{"to":42}')
    assert (job.nacks, job.additional_deliveries, job.attempts) == (0, 0, 1)
    assert job.node == api.node and job.node_prefix == api.node_id[:8]
    assert api.show(jid)["state"] == "active"
    assert job.ack() == 1
    assert api.show(jid) is None


def test_add_options(api):
    jid = api.add_job("q", b"x", 0, replicate=1, delay=5, retry=7, ttl=100, maxlen=10,
                      asynchronous=True)
    s = api.show(jid)
    assert (s["repl"], s["delay"], s["retry"], s["state"]) == (1, 5, 7, "active")
    assert api.qlen("q") == 0  # delayed
    jid0 = api.add_job("q", b"once", retry=0)
    assert api.show(jid0)["retry"] == 0 and int(jid0[-4:], 16) % 2 == 0  # even TTL nibble
    with pytest.raises(TypeError):
        api.add_job("q", b"x", bogus=1)


def test_get_jobs_modes(api):
    t0 = time.monotonic()
    assert api.get_jobs("empty", timeout_ms=200) == []
    assert time.monotonic() - t0 >= 0.15
    assert api.get_jobs("empty", nohang=True) == []
    a = [api.add_job("a", i) for i in range(3)]
    b = [api.add_job("b", i) for i in range(2)]
    got = api.get_jobs("a", "b", count=10, nohang=True)
    assert sorted(j.id for j in got) == sorted(a + b)
    assert {j.queue for j in got} == {"a", "b"}
    api.add_job("c", "s")
    (j,) = api.get_jobs(["c"], withcounters=False)  # a list of queues works too
    assert (j.body, j.nacks, j.additional_deliveries, j.attempts) == ("s", None, None, 1)


def test_nack_working_enqueue_dequeue_del(api):
    jid = api.add_job("q", "w", retry=30)
    (job,) = api.get_jobs("q", nohang=True)
    assert job.working() == 30
    assert api.working(jid) == 30
    assert job.nack() == 1
    (again,) = api.get_jobs("q", nohang=True)
    assert (again.nacks, again.attempts) == (1, 2)
    assert api.nack_job(jid) == 1 and api.qlen("q") == 1
    assert api.dequeue(jid) == 1 and api.qlen("q") == 0
    assert api.enqueue(jid) == 1 and api.qlen("q") == 1
    assert api.show(jid)["additional_deliveries"] == 1
    assert api.del_job(jid) == 1 and api.show(jid) is None
    other = api.add_job("q", "f")
    assert api.fast_ack(other) == 1 and api.show(other) is None
    j2 = api.add_job("q", "g")
    assert api.ack_job([j2]) == 1  # a list of ids works too
    j3 = api.add_job("q", "h")
    (job3,) = api.get_jobs("q", nohang=True)
    assert job3.fast_ack() == 1 and api.show(j3) is None


def test_queue_inspection(api):
    assert api.qstat("nothing") is None
    ids = [api.add_job("q", {"n": i}) for i in range(5)]
    assert api.qlen("q") == 5
    peek = api.qpeek("q", 2)
    assert [j.id for j in peek] == ids[:2] and all(isinstance(j, Job) for j in peek)
    assert [j.body for j in api.qpeek("q", -2)] == [{"n": 4}, {"n": 3}]
    st = api.qstat("q")
    assert (st["name"], st["len"], st["jobs_in"], st["pause"]) == ("q", 5, 5, "none")
    assert st["import_from"] == []
    assert api.pause("q", "in") == "in"
    assert api.pause("q", "state") == "in"
    assert api.pause("q", "out") == "out"
    assert api.pause("q", "none") == "none"
    assert api.pause("q", "all", bcast=True) == "all"
    api.pause("q", "none")


def test_scans(api):
    ids = {api.add_job("q1", i) for i in range(25)}
    api.add_job("q2", "x")
    assert set(api.qscan(count=1)) == {"q1", "q2"}
    assert set(api.qscan(minlen=2, busyloop=True)) == {"q1"}
    assert set(api.jscan(queue="q1", count=5)) == ids
    assert len(set(api.jscan(busyloop=True))) == 26
    full = list(api.jscan(queue="q2", reply="all"))
    assert len(full) == 1 and full[0]["queue"] == "q2" and full[0]["body"] == "x"
    api.get_jobs("q2", nohang=True)
    assert [d["queue"] for d in list(api.jscan(states=["active"], reply="all"))] == ["q2"]


def test_hello_info_ping_execute(api):
    hello = api.hello()
    assert isinstance(hello, Hello) and hello.version == 1
    assert hello.node_id == api.node_id and len(hello.node_id) == 40
    (me,) = hello.nodes
    assert (me.id, me.addr, me.priority) == (hello.node_id, api.node, 1)
    assert api.nodes == [api.node]
    info = api.info()
    assert info["registered_jobs"] == 0 and "uptime_in_seconds" in info
    assert api.info("queues") == {"registered_queues": 0}
    assert api.ping() in (True, b"PONG", "PONG")
    assert api.execute_command("QLEN", "q") == 0


def test_jobs_iterator(api):
    for i in range(3):
        api.add_job("it", i)
    got = list(api.jobs("it", count=2, timeout_ms=200, poll_ms=100))
    assert sorted(j.body for j in got) == [0, 1, 2]


def test_add_jobs_batch(api):
    items = [("b", {"i": i}) for i in range(2500)]
    items.append(("b2", b"raw", {"retry": 9}))
    items.append({"queue": "b3", "body": "d", "ttl": 50})
    ids = api.add_jobs(items, batch_size=1000, retry=20)
    assert len(ids) == 2502 and len(set(ids)) == 2502
    assert api.qlen("b") == 2500
    assert api.show(ids[0])["retry"] == 20 and api.show(ids[0])["body"] == {"i": 0}
    assert api.show(ids[2500])["retry"] == 9 and api.show(ids[2500])["raw"] == b"raw"
    assert api.show(ids[2501])["ttl"] <= 50


def test_add_jobs_per_item_errors(api):
    api.add_job("full", 1)
    with pytest.raises(AddJobsError) as ei:
        api.add_jobs([("ok", 1), ("full", 2, {"maxlen": 1}), ("ok", 3)])
    err = ei.value
    assert isinstance(err.results[0], str) and isinstance(err.results[2], str)
    bad = err.results[1]
    assert isinstance(bad, MaxLenError) and (bad.index, bad.queue) == (1, "full")
    assert err.errors == [(1, bad)]
    assert "item 1 (queue 'full'): MAXLEN Queue is already longer" in str(err)
    assert api.qlen("ok") == 2
    api.pause("p", "in")
    res = api.add_jobs([("p", 1), ("ok", 2)], raise_on_error=False)
    assert isinstance(res[0], QueuePausedError) and isinstance(res[1], str)
    with pytest.raises(TypeError, match="item 1"):
        api.add_jobs([("never", 1), ("never", 2, {"bogus": 1})])
    with pytest.raises(TypeError, match="no 'body'"):
        api.add_jobs([{"queue": "never"}])
    assert api.qlen("never") == 0  # nothing sent before the items were checked


def test_serializers_and_foreign_bodies(dnode):
    raw = dnode.client()
    for kind in ("sync", "async"):
        mp = make_api(kind, dnode.addr, serializer="msgpack")
        jid = mp.add_job("m", {"k": [1, 2]})
        assert raw.execute_command("SHOW", jid)[-1] == b"\x81\xa1k\x92\x01\x02"
        (j,) = mp.get_jobs("m", nohang=True)
        assert j.body == {"k": [1, 2]}
        mp.close()
        custom = make_api(kind, dnode.addr, serializer=(lambda v: v.upper().encode(),
                                                        lambda b: b.decode().lower()))
        custom.add_job("c", "hello")
        (j,) = custom.get_jobs("c", nohang=True)
        assert (j.raw, j.body) == (b"HELLO", "hello")
        custom.close()
        # Bodies written by other clients: undecodable ones stay bytes.
        js = make_api(kind, dnode.addr)
        raw.execute_command("ADDJOB", "f", b"\xff\xfe not json", 0)
        raw.execute_command("ADDJOB", "f", b'{"ok": true}', 0)
        got = js.get_jobs("f", count=2, nohang=True)
        assert [j.body for j in got] == [b"\xff\xfe not json", {"ok": True}]
        assert [j.raw for j in got] == [b"\xff\xfe not json", b'{"ok": true}']
        js.add_job("f", "text")  # a str goes through JSON
        assert js.get_jobs("f", nohang=True)[0].raw == b'"text"'
        js.close()


def test_reply_lost_is_indeterminate(node_factory):
    """A frozen node: the ADDJOB was sent, no reply comes: ReplyLostError
    (sent=True); it is never re-sent, and the job does exist."""
    import signal

    n = node_factory()
    for kind in ("sync", "async"):
        c = make_api(kind, n.addr, socket_timeout=0.3)
        c.ping()
        n.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(ReplyLostError) as ei:
                c.add_job("lost", b"maybe", timeout_ms=100)
            assert ei.value.sent is True and ei.value.node == n.addr
        finally:
            n.proc.send_signal(signal.SIGCONT)
        c.close()
    assert n.client().execute_command("QLEN", "lost") == 2


def test_a_frozen_node_times_out_batches_and_handshakes(node_factory):
    """A frozen node (SIGSTOP): each item of a pipelined ``add_jobs`` gets
    ReplyLostError once its time limit passes (the AsyncClient keeps these
    limits itself, not redis-py), and a client connecting to it anew gives up
    after its timeouts (no node reachable) instead of waiting in the
    connection's handshake."""
    n = node_factory()
    retries = {"sync": redis.retry.Retry, "async": redis.asyncio.retry.Retry}
    for kind, retry in retries.items():
        c = make_api(kind, n.addr, socket_timeout=0.3, socket_connect_timeout=0.3,
                     retry=retry(NoBackoff(), 0))
        c.ping()
        n.proc.send_signal(signal.SIGSTOP)
        fresh = make_api(kind, n.addr, socket_timeout=0.3, socket_connect_timeout=0.3,
                         retry=retry(NoBackoff(), 0))
        try:
            t0 = time.monotonic()
            results = c.add_jobs([("frozen", b"a"), ("frozen", b"b")], timeout_ms=100,
                                 raise_on_error=False)
            assert [type(r) for r in results] == [ReplyLostError, ReplyLostError]
            with pytest.raises(NoNodeAvailableError):
                fresh.ping()
            assert time.monotonic() - t0 < 5
        finally:
            n.proc.send_signal(signal.SIGCONT)
        c.close()
        fresh.close()
