"""broker/job.py: a job's id (its shape, what it tells other nodes: the
creating node, the TTL, at least or at most once), its shard, the holder
lists a node shares among its jobs, and a job's fields as a peer receives
them (disquette/job_record.py's order)."""

from __future__ import annotations

import random

from broker.job import (
    ACTIVE, JOB_ID_LEN, SHARDS, HolderLists, Job, JobIds, id_is_at_least_once, job_from_fields,
    job_shard, job_to_fields, make_job_id, node_prefix_of, random_node_id, ttl_from_id,
    valid_job_id,
)
from disquette import job_record as field

NODE = "0123abcd" + "e" * 32


def test_an_id_names_its_node_its_ttl_and_whether_it_is_retried():
    ids = JobIds(random.Random(1))
    once, retried = ids.new(NODE, 3600, 0), ids.new(NODE, 7200, 30)
    for jid in (once, retried):
        assert valid_job_id(jid) and len(jid) == JOB_ID_LEN
        assert node_prefix_of(jid) == b"0123abcd"
    assert ttl_from_id(once) == 3600 and not id_is_at_least_once(once)
    # Minutes, the last bit saying RETRY > 0: 120 minutes read back as 121.
    assert ttl_from_id(retried) == 7260 and id_is_at_least_once(retried)
    assert len({ids.new(NODE, 60, 1) for _ in range(1000)}) == 1000
    assert ids.new("f" * 40, 60, 1).startswith(b"D-ffffffff-")     # CLUSTER RESET HARD


def test_ids_are_the_same_for_the_same_seed_and_as_make_job_id_spells_them():
    a, b = JobIds(random.Random(7)), JobIds(random.Random(7))
    assert [a.new(NODE, 60, 1) for _ in range(300)] == [b.new(NODE, 60, 1) for _ in range(300)]
    jid = make_job_id(NODE, 0, 60, 1)
    assert jid == b"D-0123abcd-" + b"A" * 24 + b"-0001" and valid_job_id(jid)


def test_a_malformed_id_is_refused_by_its_shape():
    good = make_job_id(NODE, 5, 60, 1)
    assert not valid_job_id(good[:-1])
    assert not valid_job_id(b"X" + good[1:])
    assert not valid_job_id(good[:10] + b"+" + good[11:])


def test_shards_cover_the_ids_random_part():
    ids = JobIds(random.Random(3))
    shards = {job_shard(ids.new(NODE, 60, 1)) for _ in range(20_000)}
    assert all(0 <= s < SHARDS for s in shards) and len(shards) > SHARDS * 0.9


def test_holder_lists_are_sorted_without_duplicates_and_shared():
    holders = HolderLists()
    ab = holders.of(["b" * 40, "a" * 40, "b" * 40])
    assert ab == ("a" * 40, "b" * 40)
    assert holders.of(("b" * 40, "a" * 40, "b" * 40)) is ab         # the same ids: that tuple
    assert holders.with_holder(ab, "a" * 40) is ab              # there already
    abc = holders.with_holder(ab, "c" * 40)
    assert abc == ("a" * 40, "b" * 40, "c" * 40)
    assert holders.with_holder(ab, "c" * 40) is abc             # one tuple for those holders
    assert holders.with_holder(None, "a" * 40) == ("a" * 40,)
    other = HolderLists()                                        # another node's
    assert other.of(["b" * 40, "a" * 40, "b" * 40]) == ab


def test_a_jobs_fields_make_the_same_job_on_the_peer():
    job = Job(make_job_id(NODE, 9, 600, 1), b"q", b"body", ACTIVE, 3, 1_700_000_600_000,
              1_700_000_000_000_000_007, 5, 30)
    job.nacks, job.additional_deliveries = 2, 1
    job.nodes_delivered = HolderLists().of((NODE, "f" * 40))
    fields = job_to_fields(job)
    assert fields[field.ID] == job.id and fields[field.QUEUE] == b"q"
    assert fields[field.NODES_DELIVERED] == (NODE, "f" * 40)
    copy = job_from_fields(fields, HolderLists())
    assert (copy.id, copy.queue, copy.body, copy.repl, copy.etime, copy.ctime, copy.delay,
            copy.retry, copy.nacks, copy.additional_deliveries, copy.nodes_delivered) == \
        (job.id, job.queue, job.body, 3, job.etime, job.ctime, 5, 30, 2, 1, job.nodes_delivered)


def test_a_node_id_is_40_lowercase_hex_chars():
    nid = random_node_id(random.Random(5))
    assert len(nid) == 40 and int(nid, 16) >= 0 and nid == nid.lower()
