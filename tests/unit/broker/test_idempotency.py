"""(ext) The IDEMPOTENCY key travels with its job: in the job's fields (REPLJOB,
YOURJOBS), in the bus frame's shape check and in AOF records (rows and
columns), and a load maps the keys of the jobs it keeps. Jobs without a key
keep the layouts peers and files without the extension know."""

from __future__ import annotations

import pytest

from broker import aof_format as fmt
from broker.job import HolderLists, Job, job_from_fields, job_to_fields
from protocol import bus
from tests.unit.broker.test_aof_format import T0, VirtualClock, load, new_node
from tests.unit.protocol.test_bus import A, read_all, sample


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
