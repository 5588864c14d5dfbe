"""``spark.read.format("disquette-aof")``: the job history in AOF files
written by real nodes (``appendonly yes``, ``aof-history yes``), read by a
real SparkSession: one row per record, split into partitions at record
boundaries, checksums verified, a prefix of a file a node keeps appending to.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from broker import aof_format as fmt
from broker.job import ACTIVE, Job, make_job_id
from disquette.spark.aof_files import plan
from disquette.spark.aof_rows import read_range
from tests import aof_v2
from tests.harness import NodeFactory, NodeProcess, wait_until

HISTORY = {"appendonly": "yes", "aof_history": "yes", "appendfsync": "always"}
# Several Spark actions per test, on a machine that may be busy.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def history_node(spark_factory: NodeFactory) -> NodeProcess:
    return spark_factory(**HISTORY)


def node_id(n: NodeProcess) -> str:
    return n.client(protocol=2).execute_command("HELLO")[1].decode()


def make_history(n: NodeProcess) -> dict[str, object]:
    """Jobs added, delivered, nacked, acked and expired on ``n``; what was done."""
    c = n.client(protocol=2)
    mails = [c.execute_command("ADDJOB", "mails", f"mail-{i}", 0, "RETRY", 60).decode()
             for i in range(20)]
    c.execute_command("ADDJOB", "short", "gone", 0, "TTL", 1)
    got = c.execute_command("GETJOB", "COUNT", 20, "FROM", "mails")
    assert len(got) == 20
    nacked = mails[:3]
    c.execute_command("NACK", *nacked)
    again = c.execute_command("GETJOB", "COUNT", 3, "FROM", "mails")
    assert len(again) == 3
    c.execute_command("ACKJOB", *mails[:10])
    wait_until(lambda: c.execute_command("QLEN", "short") == 0
               and not c.execute_command("JSCAN", "0", "QUEUE", "short")[1], timeout=10)
    return {"mails": mails, "nacked": nacked}


def read(spark, *paths: object, **options: object):
    reader = spark.read.format("disquette-aof")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load([str(p) for p in paths] if len(paths) > 1 else str(paths[0]))


def test_one_row_per_record_of_a_nodes_history(spark, history_node):
    done = make_history(history_node)
    rows = read(spark, history_node.dir).collect()
    mails = set(done["mails"])
    by = {}
    for r in rows:
        by.setdefault(r.record, []).append(r)
    assert {r.id for r in by["add"] if r.queue == "mails"} == mails
    assert {r.body for r in by["add"] if r.queue == "mails"} == {f"mail-{i}" for i in range(20)}
    deliveries = [r.id for r in by["deliver"] if r.id in mails]
    assert sorted(deliveries) == sorted(done["mails"] + done["nacked"])
    assert sorted(r.id for r in by["nack"]) == sorted(done["nacked"])
    assert {r.id for r in by["ack"]} == set(done["mails"][:10])
    (gone,) = [r.id for r in by["add"] if r.queue == "short"]
    assert [r.id for r in by["expire"]] == [gone]
    me = node_id(history_node)
    assert all(r.node == me and r.time is not None for r in rows)
    assert all(r.retry == 60 and r.state == "queued" for r in by["add"] if r.queue == "mails")
    times = [r.time for r in sorted(rows, key=lambda r: r.offset)]
    assert times == sorted(times)


def test_partitions_and_many_files_read_the_same_rows(spark, history_node, tmp_path):
    c = history_node.client(protocol=2)
    for i in range(300):
        c.execute_command("ADDJOB", "bulk", "x" * 100 + str(i), 0)
    aof = history_node.dir / "disque.aof"
    copy = tmp_path / "copy" / "disque.aof"
    copy.parent.mkdir()
    shutil.copyfile(aof, copy)
    cols = ["time", "record", "id", "queue", "body", "offset"]
    whole = read(spark, copy).select(*cols)
    assert whole.rdd.getNumPartitions() == 1
    split = read(spark, copy, partitionBytes=2048).select(*cols)
    assert split.rdd.getNumPartitions() > 4
    rows = sorted(whole.collect())
    assert sorted(split.collect()) == rows
    # A file named twice (here by its path and a glob) is read once; a
    # directory, its AOF files (not the live one: its node keeps appending).
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(copy, other / "disque.aof")
    both = read(spark, copy, str(tmp_path / "copy" / "*.aof"), other,
                partitionBytes=4096).select("file").collect()
    assert sorted(Counter(r.file for r in both).values()) == [len(rows), len(rows)]


def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_bit_fails_the_read_or_is_skipped_and_counted(spark, history_node, tmp_path):
    c = history_node.client(protocol=2)
    for i in range(50):
        c.execute_command("ADDJOB", "flip", f"job-{i}", 0)
    src = history_node.dir / "disque.aof"
    damaged = tmp_path / "damaged.aof"
    shutil.copyfile(src, damaged)
    good = read(spark, damaged).select("offset", "record", "id").collect()
    offsets = sorted({r.offset for r in good})
    victim = offsets[len(offsets) // 2]
    flip_bit(damaged, victim + 20)          # inside the payload
    with pytest.raises(Exception) as e:
        read(spark, damaged).count()
    assert f"{damaged}: record checksum mismatch at byte offset {victim}" in str(e.value)
    skipped = read(spark, damaged, onDamage="skip").collect()
    bad = [r for r in skipped if r.record == "damaged"]
    assert [(r.offset, r.error) for r in bad] == [(victim, "record checksum mismatch")]
    assert sorted((r.offset, r.id) for r in skipped if r.record != "damaged") == sorted(
        (r.offset, r.id) for r in good if r.offset != victim)
    # A damaged record header: the read starts again at the next whole record,
    # across partitions as well.
    header = tmp_path / "header.aof"
    shutil.copyfile(src, header)
    flip_bit(header, victim + 1)
    with pytest.raises(Exception) as e:
        read(spark, header, partitionBytes=512).count()
    assert f"{header}: record header checksum mismatch at byte offset {victim}" in str(e.value)
    for part in (512, 1 << 20):
        rows = read(spark, header, onDamage="skip", partitionBytes=part).collect()
        assert [r.offset for r in rows if r.record == "damaged"] == [victim]
        assert sorted((r.offset, r.id) for r in rows if r.record != "damaged") == sorted(
            (r.offset, r.id) for r in good if r.offset != victim)


def test_a_file_being_appended_is_read_as_a_prefix_of_whole_records(spark, history_node):
    c = history_node.client(protocol=2)
    stop = threading.Event()
    added: list[str] = []

    def produce() -> None:
        w = history_node.client(protocol=2)
        while not stop.is_set():
            added.append(w.execute_command("ADDJOB", "live", "y" * 100, 0).decode())

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_until(lambda: len(added) > 50, timeout=10)
        reads = []
        for _ in range(3):
            df = read(spark, history_node.dir, partitionBytes=8192)
            reads.append({(r.offset, r.id) for r in df.select("offset", "id").collect()})
    finally:
        stop.set()
        t.join()
    c.execute_command("PING")
    final = {(r.offset, r.id) for r in read(spark, history_node.dir).select("offset", "id")
             .collect()}
    for rows in reads:
        assert rows <= final
    assert len(reads[0]) <= len(reads[1]) <= len(reads[2]) < len(final)
    live = {jid for _, jid in final}
    assert set(added) <= live


def test_bad_options_and_paths_say_what_is_wrong(spark, tmp_path):
    with pytest.raises(Exception, match="no AOF file at"):
        read(spark, tmp_path / "nothing-here").count()
    (tmp_path / "not.aof").write_bytes(b"hello, world, this is not an AOF")
    with pytest.raises(Exception, match="not a Disquette AOF"):
        read(spark, tmp_path / "not.aof").count()
    with pytest.raises(Exception, match="onDamage"):
        read(spark, tmp_path / "not.aof", onDamage="maybe").count()


# -- the reader's planning and decoding on crafted files (no Spark) -----------

def crafted(n: int = 200) -> bytes:
    t0 = 1_700_000_000_000
    out = [fmt.file_header()]
    for i in range(n):
        job = Job(make_job_id("ab" * 20, i, 3600, 30), b"q%d" % (i % 3), b"body-%d" % i,
                  ACTIVE, 1, t0 + 3_600_000, t0 * 1_000_000 + i, 0, 30)
        out += [fmt.encode_time(t0 + i), fmt.encode_jobs([job])]
        if i % 4 == 0:
            out.append(fmt.encode_ids(fmt.REC_GOT, [job.id]))
    return b"".join(out)


def rows_of(path: Path, partition_bytes: int, skip: bool = False) -> list[tuple]:
    out = []
    for fr in plan([str(path)], partition_bytes, skip):
        for batch in read_range(fr, False, skip):
            out += list(zip(*(batch.column(c).to_pylist() for c in
                              ("offset", "record", "id", "time", "body"))))
    return out


def test_ranges_split_at_record_boundaries_and_tails_are_not_damage(tmp_path):
    data = crafted()
    path = tmp_path / "disque.aof"
    path.write_bytes(data)
    whole = rows_of(path, 1 << 30)
    assert len(whole) == 250
    for part in (100, 1000, 4096):
        assert rows_of(path, part) == whole
    # A torn last record and a zero-filled tail: a prefix of whole records.
    torn = fmt.encode_time(1_700_000_000_000)[:-3]      # a write cut short
    for tail in (torn, bytes(100)):
        path.write_bytes(data + tail)
        for part in (1000, 1 << 30):
            assert rows_of(path, part) == whole


TIMES = ("time", "ctime", "expires")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(iso: str | None) -> int | None:
    return None if iso is None else (datetime.fromisoformat(iso) - EPOCH) // timedelta(
        microseconds=1)


def test_a_version_2_file_of_main_reads_as_main_read_it(spark, tmp_path):
    """tests/data/aof-v2.aof, written by the code of main in format version 2
    (its job records in the older order; tests/aof_v2.py says how it was
    made), reads as main's reader read it (tests/data/aof-v2.json): the
    records' decode, and the rows a SparkSession shows, partitions and all."""
    expected = json.loads(aof_v2.EXPECTED.read_text())["rows"]
    assert aof_v2.spark_rows(aof_v2.AOF) == expected
    assert {r["record"] for r in expected} >= {"add", "deliver", "nack", "requeue", "ack",
                                               "delete", "expire", "release"}
    path = tmp_path / "disque.aof"
    shutil.copy(aof_v2.AOF, path)
    df = read(spark, path, bodyType="binary", partitionBytes=1000)
    cols = [c for c in df.columns if c != "file"]
    shown = df.selectExpr(*(f"unix_micros({c}) as {c}" if c in TIMES else c for c in cols))
    got = [tuple(bytes(v).hex() if isinstance(v, (bytes, bytearray)) else v for v in r)
           for r in shown.collect()]
    want = [tuple(micros(r[c]) if c in TIMES else r[c] for c in cols) for r in expected]
    order = cols.index("offset"), cols.index("id")
    assert (sorted(got, key=lambda t: (t[order[0]], t[order[1]] or ""))
            == sorted(want, key=lambda t: (t[order[0]], t[order[1]] or "")))


def test_config_set_aof_history_at_run_time(spark_factory):
    """CONFIG SET aof-history yes on a node already logging: the history
    starts with the next records; no turns it off again."""
    n = spark_factory(appendonly="yes", appendfsync="always")
    c = n.client(protocol=2)
    path = n.dir / "disque.aof"

    def records() -> list[str]:
        return [r[1] for r in rows_of(path, 1 << 30)]

    c.execute_command("ADDJOB", "q", "before", 0)
    c.execute_command("GETJOB", "FROM", "q")
    assert records() == ["add"]
    c.execute_command("CONFIG", "SET", "aof-history", "yes")
    c.execute_command("ADDJOB", "q", "during", 0)
    c.execute_command("GETJOB", "FROM", "q")
    assert records() == ["add", "add", "deliver"]
    c.execute_command("CONFIG", "SET", "aof-history", "no")
    c.execute_command("ADDJOB", "q", "after", 0)
    c.execute_command("GETJOB", "FROM", "q")
    assert records() == ["add", "add", "deliver", "add"]
    n.stop()
