"""broker/node.py: the Node's timers, memory rules and command dispatch in
virtual time: no processes, no sleeps."""

from __future__ import annotations

import random

import pytest

from broker.commands import COMMANDS
from broker.config import Config
from broker.node import BLOCKED, Node
from protocol.resp import NULL_ARRAY, Error


class VirtualClock:
    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
def node(clock):
    return Node(Config(), clock, random.Random(1), commands=COMMANDS, strict=True)


def run(node, client, *args):
    return node.handle_command(client, [a if isinstance(a, bytes) else str(a).encode()
                                        for a in args])


def advance(node, clock, ms: int, step: int = 10) -> None:
    """Move virtual time forward, ticking like the server's timer would."""
    end = clock.now + ms
    while clock.now < end:
        clock.now = min(end, max(clock.now + 1, min(node.next_deadline(), end)))
        node.tick()


def test_unacked_job_is_requeued_after_retry(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "body", 0, "RETRY", 2).encode()
    assert run(node, c, "GETJOB", "FROM", "q")[0][1] == jid
    assert run(node, c, "QLEN", "q") == 0
    advance(node, clock, 1700)          # retry 2 s, -250 ms jitter at most
    assert run(node, c, "QLEN", "q") == 0
    advance(node, clock, 600)
    assert run(node, c, "QLEN", "q") == 1
    job = run(node, c, "GETJOB", "WITHCOUNTERS", "FROM", "q")[0]
    assert job[1] == jid and job[3:] == [b"nacks", 0, b"additional-deliveries", 1]


def test_acked_job_is_gone_and_never_requeued(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "body", 0, "RETRY", 1)
    run(node, c, "GETJOB", "FROM", "q")
    assert run(node, c, "ACKJOB", jid) == 1
    assert run(node, c, "SHOW", jid) is None
    advance(node, clock, 5000)
    assert run(node, c, "QLEN", "q") == 0
    assert run(node, c, "ACKJOB", jid) == 0


def test_ttl_expires_job_wherever_it_is(node, clock):
    c = node.new_client()
    queued = run(node, c, "ADDJOB", "q", "a", 0, "TTL", 5, "RETRY", 1)
    active = run(node, c, "ADDJOB", "q", "b", 0, "TTL", 5, "RETRY", 1)
    run(node, c, "DEQUEUE", active)
    advance(node, clock, 4900)
    assert run(node, c, "SHOW", queued) is not None
    advance(node, clock, 200)
    assert run(node, c, "SHOW", queued) is None
    assert run(node, c, "SHOW", active) is None
    assert node.job_count == 0


def test_a_ttl_far_ahead_expires_on_time_not_early(node, clock):
    c = node.new_client()
    queued = run(node, c, "ADDJOB", "q", "a", 0, "TTL", 600, "RETRY", 300)
    active = run(node, c, "ADDJOB", "q", "b", 0, "TTL", 600, "RETRY", 300)
    run(node, c, "DEQUEUE", active)
    advance(node, clock, 599_900, step=1000)
    assert run(node, c, "SHOW", queued) is not None
    assert run(node, c, "SHOW", active) is not None
    advance(node, clock, 200)
    assert run(node, c, "SHOW", queued) is None and run(node, c, "SHOW", active) is None
    assert node.job_count == 0


def test_retry_zero_is_delivered_once(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "x", 0, "RETRY", 0)
    assert run(node, c, "GETJOB", "FROM", "q")[0][1] == jid.encode()
    assert run(node, c, "NACK", jid) == 0
    assert run(node, c, "ENQUEUE", jid) == 0
    advance(node, clock, 60_000)
    assert run(node, c, "GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY


def test_delay_queues_the_job_later(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "x", 0, "DELAY", 3)
    assert run(node, c, "QLEN", "q") == 0
    show = run(node, c, "SHOW", jid)
    assert show[show.index(b"state") + 1] == b"active"
    advance(node, clock, 2990)
    assert run(node, c, "QLEN", "q") == 0
    advance(node, clock, 20)
    assert run(node, c, "QLEN", "q") == 1
    job = run(node, c, "GETJOB", "WITHCOUNTERS", "FROM", "q")[0]
    assert job[6] == 0                  # first queueing is not an additional delivery


def test_working_postpones_requeue_until_half_ttl(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "x", 0, "TTL", 20, "RETRY", 4)
    run(node, c, "GETJOB", "FROM", "q")
    for _ in range(3):                  # 3 x 3 s = 9 s < half of 20 s
        advance(node, clock, 3000)
        assert run(node, c, "WORKING", jid) == 4
        assert run(node, c, "QLEN", "q") == 0
    advance(node, clock, 2000)          # 11 s elapsed
    reply = run(node, c, "WORKING", jid)
    assert isinstance(reply, Error) and reply.startswith("TOOLATE")
    advance(node, clock, 2500)
    assert run(node, c, "QLEN", "q") == 1


def test_blocked_getjob_times_out_and_wakes_on_addjob(node, clock):
    waiter, producer = node.new_client(), node.new_client()
    assert run(node, waiter, "GETJOB", "TIMEOUT", 100, "FROM", "q") is BLOCKED
    advance(node, clock, 99)
    assert node.outbox == []
    advance(node, clock, 2)
    assert node.outbox == [(waiter, NULL_ARRAY)]
    node.outbox.clear()
    assert run(node, waiter, "GETJOB", "FROM", "q1", "q2") is BLOCKED
    jid = run(node, producer, "ADDJOB", "q2", "x", 0)
    assert node.outbox == [(waiter, [[b"q2", jid.encode(), b"x"]])]
    assert waiter.blocked_on is None and node.blocked_count == 0


def test_blocked_getjob_wakes_on_nack_and_enqueue(node, clock):
    c, waiter = node.new_client(), node.new_client()
    jid = run(node, c, "ADDJOB", "q", "x", 0)
    run(node, c, "GETJOB", "FROM", "q")
    assert run(node, waiter, "GETJOB", "FROM", "q") is BLOCKED
    assert run(node, c, "NACK", jid) == 1
    assert node.outbox[0][1][0][1] == jid.encode()


def test_idle_empty_queue_is_collected(node, clock):
    c = node.new_client()
    jid = run(node, c, "ADDJOB", "q", "x", 0)
    run(node, c, "GETJOB", "FROM", "q")
    run(node, c, "ACKJOB", jid)
    advance(node, clock, 299_000, step=1000)
    assert run(node, c, "QSTAT", "q") is not NULL_ARRAY
    advance(node, clock, 2_000)
    assert run(node, c, "QSTAT", "q") is NULL_ARRAY


def test_paused_queue_is_not_collected(node, clock):
    c = node.new_client()
    run(node, c, "PAUSE", "q", "in")
    advance(node, clock, 400_000)
    assert run(node, c, "QSTAT", "q") is not NULL_ARRAY


def test_over_maxmemory_refuses_growth_after_evicting(clock):
    cfg = Config()
    cfg.set("maxmemory", "3mb")
    node = Node(cfg, clock, random.Random(2), commands=COMMANDS, strict=True)
    c = node.new_client()
    body = b"x" * 10_000
    ids = []
    while True:
        reply = run(node, c, "ADDJOB", "q", body, 0, "RETRY", 0)
        if isinstance(reply, Error):
            assert reply.startswith("OOM")
            break
        ids.append(reply)
    assert len(ids) > 50
    # Delivered RETRY 0 jobs are safe to lose: fetching them lets new jobs in.
    run(node, c, "GETJOB", "COUNT", 10, "FROM", "q")
    assert not isinstance(run(node, c, "ADDJOB", "q", body, 0, "RETRY", 0), Error)


def test_ctime_orders_jobs_created_in_the_same_ms(node):
    c = node.new_client()
    ids = [run(node, c, "ADDJOB", "q", str(i), 0).encode() for i in range(100)]
    got = run(node, c, "GETJOB", "COUNT", 100, "FROM", "q")
    assert [j[1] for j in got] == ids


def test_a_bug_in_a_command_is_raised_in_tests_and_counted_in_production(inprocess, monkeypatch):
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
