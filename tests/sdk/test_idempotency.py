"""Idempotent producers (issue 26, SPEC section 10 (ext)): `add_job(...,
idempotency_key=...)` and `ADDJOB ... IDEMPOTENCY key`, over real sockets
against real nodes: a retried add gets the first add's id and creates nothing,
for the job's TTL (even once it was consumed); across a failover, the retry
sent to another holder gets the same id, and exactly one job exists."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest

from disquette import Client
from tests.conftest import _FACTORIES
from tests.harness import (
    WAIT_TIMEOUT, NodeFactory, NodeProcess, encode_command, module_factory, wait_until,
)


def info_jobs(n: NodeProcess) -> dict[str, Any]:
    return n.client().info("jobs")


def queue_ids(n: NodeProcess, queue: str = "q") -> set[bytes]:
    """Every job id `n` holds for `queue` (JSCAN, any state)."""
    cursor, ids = b"0", set()
    while True:
        cursor, batch = n.client().execute_command("JSCAN", cursor, "QUEUE", queue)
        ids.update(batch)
        if cursor in (b"0", 0, "0"):
            return ids


# ----------------------------------------------------------------- one node
def test_the_same_key_twice_gives_the_same_id_and_one_job(api, dnode):
    first = api.add_job("q", {"n": 1}, idempotency_key="order-42")
    again = api.add_job("q", {"n": 1}, idempotency_key="order-42")
    assert again == first and api.qlen("q") == 1
    # The key is per queue, and other keys (or none) add jobs as usual.
    assert api.add_job("other", {"n": 1}, idempotency_key="order-42") != first
    assert api.add_job("q", {"n": 2}, idempotency_key="order-43") != first
    assert api.add_job("q", {"n": 3}) != first
    assert api.qlen("q") == 3
    assert info_jobs(dnode)["idempotency_keys"] == 3


def test_a_retry_after_the_job_was_consumed_still_gets_its_id(api, dnode):
    jid = api.add_job("q", "pay", idempotency_key=b"\x00binary key\xff", ttl=60)
    (job,) = api.get_jobs("q", nohang=True)
    assert job.id == jid
    job.ack()
    wait_until(lambda: api.show(jid) is None, message="the acked job is deleted")
    # Acked and gone, within its TTL: the retry creates nothing.
    assert api.add_job("q", "pay", idempotency_key=b"\x00binary key\xff", ttl=60) == jid
    assert api.qlen("q") == 0 and info_jobs(dnode)["registered_jobs"] == 0


def test_after_the_ttl_the_key_adds_a_new_job(api, dnode):
    jid = api.add_job("q", "x", idempotency_key="k", ttl=1)
    wait_until(lambda: info_jobs(dnode)["idempotency_keys"] == 0,
               message="the key expires with its job's TTL")
    again = api.add_job("q", "x", idempotency_key="k", ttl=1)
    assert again != jid and api.qlen("q") == 1


def test_bad_keys_are_refused_with_a_clear_error(api, dnode):
    with pytest.raises(TypeError, match="idempotency_key must be str or bytes"):
        api.add_job("q", "x", idempotency_key=42)
    with pytest.raises(ValueError, match="1 to 256 bytes"):
        api.add_job("q", "x", idempotency_key="k" * 257)
    with pytest.raises(ValueError, match="1 to 256 bytes"):
        api.add_job("q", "x", idempotency_key="")
    with dnode.raw() as r:
        assert r.call("ADDJOB", "q", "x", 0, "IDEMPOTENCY") == (
            b"-ERR IDEMPOTENCY needs a key: IDEMPOTENCY <key>\r\n")
        assert r.call("ADDJOB", "q", "x", 0, "IDEMPOTENCY", "k" * 257) == (
            b"-ERR IDEMPOTENCY key must be 1 to 256 bytes long\r\n")
        assert r.call("ADDJOB", "q", "x", 0, "IDEMPOTENCY", "") == (
            b"-ERR IDEMPOTENCY key must be 1 to 256 bytes long\r\n")
    assert api.qlen("q") == 0


def test_keys_in_a_batch_one_per_job(api, dnode):
    ids = api.add_jobs([("q", "a", {"idempotency_key": "a"}), ("q", "b", {"idempotency_key": "b"}),
                        {"queue": "q", "body": "a again", "idempotency_key": "a"}])
    assert ids[0] == ids[2] != ids[1] and api.qlen("q") == 2


def test_the_keys_memory_counts_until_their_ttl(dnode):
    """used_memory counts the keys' map: deleting the jobs does not give it
    back, their TTL does."""
    c = Client(dnode.addr)
    r = dnode.client()
    r.execute_command("DELJOB", c.add_job("q", "x"))     # the queue exists, empty
    before = r.info("memory")["used_memory"]
    key = "k" * 200
    ids = [c.add_job("q", "x", idempotency_key=f"{key}{i}", ttl=2) for i in range(500)]
    r.execute_command("DELJOB", *ids)
    assert r.info("memory")["used_memory"] - before >= 500 * 200
    wait_until(lambda: r.info("memory")["used_memory"] == before,
               message="the keys' memory returns at their TTL")
    c.close()


# ------------------------------------------------------------ restarts
@pytest.fixture(scope="module")
def cluster_factory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "idemcluster")


def test_a_restart_with_aof_keeps_the_keys_of_the_jobs_it_reloads(request, cluster_factory):
    """kill -9 and restart with an AOF: a retry of a live job's add still gets
    its id; the key of a job consumed before the restart is gone."""
    request.node.stash.setdefault(_FACTORIES, []).append(cluster_factory)
    n = cluster_factory(appendonly="yes", appendfsync="always")
    c = Client(n.addr)
    kept = c.add_job("q", "kept", idempotency_key="kept")
    consumed = c.add_job("q", "consumed", idempotency_key="consumed")
    c.ack_job(consumed)
    c.close()
    n.restart(kill=True)
    c = Client(n.addr)
    assert c.add_job("q", "kept", idempotency_key="kept") == kept
    assert info_jobs(n)["registered_jobs"] == info_jobs(n)["idempotency_keys"] == 1
    # The consumed job is not reloaded, nor is its key (docs/sdk.md's window).
    assert c.add_job("q", "consumed", idempotency_key="consumed") != consumed
    c.close()
    n.stop()


# ------------------------------------------------------------ three nodes


@pytest.fixture
def trio(request, cluster_factory: NodeFactory) -> list[NodeProcess]:
    """Three fresh joined nodes (a test may kill one)."""
    request.node.stash.setdefault(_FACTORIES, []).append(cluster_factory)
    nodes = cluster_factory.cluster(3, cluster_node_timeout=1500)
    yield nodes
    for n in nodes:
        n.stop()


@pytest.mark.parametrize("reply", ["lost", "received"])
def test_an_add_retried_across_a_failover(trio, reply):
    """The producer adds with a key to A (REPLICATE 3); A is killed, before its
    reply reached the producer (the SDK retries on B by itself) or after it
    (the producer retries on B, e.g. after its own timeout): B holds a copy,
    answers the same id, and exactly one job exists, delivered once."""
    a, b, c = trio
    opts = dict(replicate=3, retry=1, timeout_ms=0, idempotency_key="order-7")
    if reply == "lost":
        # C refuses copies (paused in): A keeps waiting for its third copy, B
        # holds one; A dies before answering.
        c.client().execute_command("PAUSE", "q", "in")
        producer = Client([a.addr, b.addr, c.addr], refresh_interval=3600)
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(producer.add_job("q", "pay", **opts)))
        t.start()
        wait_until(lambda: len(queue_ids(b)) == 1, message="B holds a copy")
        (held,) = queue_ids(b)
        assert t.is_alive()                      # A has not answered
        a.kill()
        t.join(WAIT_TIMEOUT)
        assert out == [held.decode()]
        c.client().execute_command("PAUSE", "q", "none")
    else:
        jid = Client(a.addr).add_job("q", "pay", **opts)
        held = jid.encode()
        a.kill()
        producer = Client([b.addr, c.addr])
        assert producer.add_job("q", "pay", **opts) == jid
    assert queue_ids(b) | queue_ids(c) == {held}
    # Delivered once: the copy left on B and C is queued by its retry timer.
    consumer = Client([b.addr, c.addr])
    (job,) = consumer.get_jobs("q", timeout_ms=int(WAIT_TIMEOUT * 1000))
    assert job.id == held.decode()
    job.ack()
    assert consumer.get_jobs("q", timeout_ms=2500) == []
    producer.close()
    consumer.close()


def test_a_batch_whose_reply_was_lost_is_added_again_without_duplicates(trio):
    """add_jobs: A dies with the batch's replies unsent; the keyed items are
    added again one by one on B, which holds their copies: the same ids."""
    a, b, c = trio
    c.client().execute_command("PAUSE", "q", "in")
    producer = Client([a.addr, b.addr, c.addr], refresh_interval=3600)
    items = [("q", f"pay {n}", {"idempotency_key": f"order-{n}"}) for n in range(3)]
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(
        producer.add_jobs(items, replicate=3, retry=1, timeout_ms=0)))
    t.start()
    wait_until(lambda: len(queue_ids(b)) == 3, message="B holds the copies")
    held = queue_ids(b)
    a.kill()
    t.join(WAIT_TIMEOUT)
    (ids,) = out
    assert {i.encode() for i in ids} == held and len(ids) == 3
    c.client().execute_command("PAUSE", "q", "none")
    assert queue_ids(b) | queue_ids(c) == held
    producer.close()


@pytest.mark.parametrize("outcome", ["replicated", "noreply"])
def test_a_retry_while_the_first_add_waits_gets_its_outcome(trio, outcome):
    """On the node where the first add still waits for its copies, the retry
    waits for the same outcome: the id once replicated, or the same -NOREPL,
    after which the key is forgotten (an add with it creates the job)."""
    a, b, c = trio
    for n in (b, c):
        n.client().execute_command("PAUSE", "q", "in")
    timeout = 0 if outcome == "replicated" else 800
    add = ("ADDJOB", "q", "x", timeout, "REPLICATE", 3, "IDEMPOTENCY", "k")
    with a.raw() as first, a.raw() as retry:
        first.send(encode_command(*add))
        wait_until(lambda: info_jobs(a)["idempotency_keys"] == 1)
        retry.send(encode_command(*add))
        if outcome == "replicated":
            assert retry.read_available(0.3) == b""      # waits with the first
            for n in (b, c):
                n.client().execute_command("PAUSE", "q", "none")
            jid = first.read_reply()
            assert jid.startswith(b"+D-") and retry.read_reply() == jid
            assert queue_ids(a) == queue_ids(b) == queue_ids(c) == {jid[1:-2]}
            return
        assert first.read_reply().startswith(b"-NOREPL Timeout")
        assert retry.read_reply().startswith(b"-NOREPL Timeout")
    assert info_jobs(a)["idempotency_keys"] == 0
    for n in (b, c):
        n.client().execute_command("PAUSE", "q", "none")
    wait_until(lambda: not queue_ids(a) | queue_ids(b) | queue_ids(c),
               message="the failed add's copies are deleted")
    ra, rb = a.client(), b.client()
    again = ("ADDJOB", "q", "x", 0, "REPLICATE", 3, "IDEMPOTENCY", "k")
    jid = ra.execute_command(*again)
    assert rb.execute_command(*again) == jid      # B holds a copy: the same id
    assert queue_ids(a) | queue_ids(b) | queue_ids(c) == {jid}
