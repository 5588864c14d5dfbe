"""(ext) broker/idempotency.py: a node's (queue, key) -> job id map, as
ADDJOB ... IDEMPOTENCY sees it (the first job wins, kept until the job's TTL
even once it is acked, forgotten when its add failed); and the key travels
with its job: in the job's fields (REPLJOB, YOURJOBS), in the bus frame's
shape check and in AOF records (rows and columns), and a load maps the keys of
the jobs it keeps. Jobs without a key keep the layouts peers and files without
the extension know."""

from __future__ import annotations

import pytest

from broker import aof_format as fmt
from broker.idempotency import ENTRY_OVERHEAD, IdempotencyKeys, key_error
from broker.job import HolderLists, Job, job_from_fields, job_to_fields
from protocol import bus
from protocol.resp import Error
from tests.unit.broker.test_aof_format import T0, VirtualClock, load, new_node
from tests.unit.protocol.test_bus import A, read_all, sample


def test_a_key_maps_to_the_first_job_until_that_jobs_expire_time():
    keys = IdempotencyKeys()
    keys.remember(b"q", b"order-1", b"D-1", etime=T0 + 1000, now=T0)
    keys.remember(b"q", b"order-1", b"D-2", etime=T0 + 5000, now=T0)   # a second job: ignored
    assert keys.lookup(b"q", b"order-1", T0 + 999) == b"D-1"
    assert keys.lookup(b"other", b"order-1", T0) is None               # per queue
    assert keys.lookup(b"q", b"order-1", T0 + 1000) is None            # its job's TTL is over
    # Once the entry has expired, the key may name a new job.
    keys.remember(b"q", b"order-1", b"D-3", etime=T0 + 9000, now=T0 + 1000)
    assert keys.lookup(b"q", b"order-1", T0 + 1000) == b"D-3"


def test_forget_drops_only_the_entry_of_that_job():
    keys = IdempotencyKeys()
    keys.remember(b"q", b"k", b"D-1", etime=T0 + 1000, now=T0)
    keys.forget(b"q", b"k", b"D-2")
    assert keys.lookup(b"q", b"k", T0) == b"D-1"
    keys.forget(b"q", b"k", b"D-1")
    assert keys.lookup(b"q", b"k", T0) is None and len(keys) == 0


def test_expire_frees_the_entries_and_their_memory():
    keys = IdempotencyKeys()
    keys.remember(b"q", b"a", b"D-1", etime=T0 + 1000, now=T0)
    keys.remember(b"q", b"bb", b"D-2", etime=T0 + 2000, now=T0)
    assert keys.memory == 2 * (1 + ENTRY_OVERHEAD) + 3
    keys.expire(T0 + 1000)
    assert len(keys) == 1 and keys.memory == 1 + 2 + ENTRY_OVERHEAD
    keys.forget(b"q", b"bb", b"D-2")    # forgotten early: its memory goes at its expiry
    assert keys.memory == 1 + 2 + ENTRY_OVERHEAD
    keys.expire(T0 + 2000)
    assert keys.memory == 0 and keys.expiries == []


@pytest.mark.parametrize("key, error", [(b"k", None), (b"k" * 256, None), (b"", True),
                                        (b"k" * 257, True)])
def test_key_error_bounds_the_keys_length(key, error):
    assert (key_error(key) is not None) is bool(error)


def test_addjob_with_a_known_key_answers_the_same_id_even_after_the_ack(inprocess):
    first = inprocess.call("ADDJOB", "q", "a", 0, "IDEMPOTENCY", "order-1")
    assert inprocess.call("ADDJOB", "q", "b", 0, "IDEMPOTENCY", "order-1") == first
    assert inprocess.call("QLEN", "q") == 1
    job = inprocess.call("GETJOB", "FROM", "q")
    assert inprocess.call("ACKJOB", job[0][1]) == 1
    assert inprocess.call("ADDJOB", "q", "c", 0, "IDEMPOTENCY", "order-1") == first
    assert inprocess.call("QLEN", "q") == 0
    assert inprocess.call("ADDJOB", "q", "d", 0, "IDEMPOTENCY", "") == \
        Error("ERR IDEMPOTENCY key must be 1 to 256 bytes long")


def keyed_job(i: int, key: bytes | None) -> Job:
    jid = b"D-0123abcd-%024d-0005" % i
    job = Job(jid, b"q", b"body %d" % i, 1, 1, T0 + 600_000, T0 * 1_000_000 + i, 0, 5)
    job.idem_key = key
    return job


def test_job_fields_carry_the_key_only_when_there_is_one():
    plain, keyed = keyed_job(1, None), keyed_job(2, b"order-1")
    assert len(job_to_fields(plain)) == 14
    fields = job_to_fields(keyed)
    assert len(fields) == 15 and fields[14] == b"order-1"
    assert job_from_fields(fields, HolderLists()).idem_key == b"order-1"
    assert job_from_fields(job_to_fields(plain), HolderLists()).idem_key is None


@pytest.mark.parametrize("key, ok", [(b"k", True), (b"k" * 256, True), (b"", False),
                                     (b"k" * 257, False), ("k", False), (None, False),
                                     (7.5, False)])
def test_the_bus_checks_the_keys_shape(key, ok):
    fields = job_to_fields(keyed_job(1, None)) + [key]
    fields[12] = [A]
    (got,) = read_all(bus.encode_frame(sample(bus.REPLJOB, fields, gossip=[])))
    assert (got.malformed == 0) is ok
    (got,) = read_all(bus.encode_frame(sample(bus.YOURJOBS, [fields], gossip=[])))
    assert (got.malformed == 0) is ok


@pytest.mark.parametrize("n", [3, 40])     # rows (a few jobs), columns (a batch)
def test_aof_records_carry_keys_and_a_load_maps_them(n):
    jobs = [keyed_job(i, b"key-%d" % i if i % 2 else None) for i in range(n)]
    data = fmt.file_header() + fmt.encode_jobs(jobs)
    node, torn, _ = load(data)
    assert torn is None and node.job_count == n
    for job in jobs:
        assert node.get_job(job.id).idem_key == job.idem_key
        if job.idem_key:
            assert node.idempotency.lookup(b"q", job.idem_key, T0 + 1000) == job.id
    assert len(node.idempotency) == n // 2
    # Deleted later in the log (a failed add's copy): loaded, not mapped.
    data += fmt.encode_ids(fmt.REC_DEL, [jobs[1].id])
    node, _, _ = load(data)
    assert node.idempotency.lookup(b"q", b"key-1", T0 + 1000) is None
    assert fmt.check_chunks([data]).corrupt is None


def test_records_without_keys_keep_their_layout():
    """A file without keys is byte for byte what the format wrote before."""
    for n in (3, 40):
        jobs = [keyed_job(i, None) for i in range(n)]
        payload = fmt.encode_jobs(jobs)[fmt.REC_HEADER_SIZE:]
        cols = fmt.decode_jobs(payload)
        assert len(cols) == 14


def test_a_key_expires_with_its_job_and_its_memory_returns():
    clock = VirtualClock()
    node = new_node(clock)
    base = node.used_memory()
    keys = node.idempotency
    keys.remember(b"q", b"k", b"D-1", T0 + 1000, T0)
    keys.remember(b"q", b"k", b"D-2", T0 + 5000, T0)        # the first one wins
    assert keys.lookup(b"q", b"k", T0) == b"D-1" and node.used_memory() > base
    keys.forget(b"q", b"k", b"D-2")                          # not the one mapped
    assert keys.lookup(b"q", b"k", T0) == b"D-1"
    assert keys.lookup(b"q", b"k", T0 + 1000) is None        # expired, before any cron
    keys.expire(T0 + 1000)
    assert len(keys) == 0 and node.used_memory() == base
