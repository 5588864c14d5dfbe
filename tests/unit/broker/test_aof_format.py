"""The AOF record format and loader (broker/aof_format.py), byte by byte.

Jobs are made by a real Node (virtual clock, no I/O) whose records (its
persistence outputs) go to an in-memory writer using the same encoder as the
server's; the bytes are
then loaded into a fresh Node, truncated, bit-flipped or zero-filled, and the
loader must behave as the module docstring specifies every time.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import struct
import threading
import time

import msgpack
import pytest

from broker import aof_format as fmt
from broker import lifecycle
from broker.aof_policy import AOFPolicy
from broker.commands import COMMANDS
from broker.config import AppendFsync, Config
from broker.job import (
    ACKED, ACTIVE, FLAG_DELIVERED, FLAG_HELD, HELD, HolderLists, Job, job_to_fields, make_job_id,
)
from broker.node import Node
from server import aof as aof_mod
from server import aof_rewrite, check_aof
from server.aof_rewrite import snapshot_chunks
from server.aof_runtime import process_runtime
from tests import aof_v2
from tests.harness import WAIT_TIMEOUT

T0 = 1_700_000_000_000


class VirtualClock:
    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


class MemoryAOF:
    """An AOF writer for tests: the node's records, with the server writer's
    encoder, into memory. ``flush()`` after each command gives one flush per
    "event-loop turn"."""

    def __init__(self) -> None:
        self.data = bytearray(fmt.file_header())
        self.pending: list = []
        self.bounds = []        # (start, end) of every record written

    def append(self, records):
        self.pending.extend(records)

    def flush(self):
        if self.pending:
            items, self.pending = self.pending, []
            self.data += fmt.encode_items(items)
        self.bounds = record_bounds(bytes(self.data))


def record_bounds(data: bytes) -> list[tuple[int, int]]:
    out = []
    pos = fmt.FILE_HEADER_SIZE
    while pos < len(data):
        length = struct.unpack_from("<I", data, pos)[0]
        out.append((pos, pos + fmt.REC_HEADER_SIZE + length))
        pos += fmt.REC_HEADER_SIZE + length
    assert pos == len(data)
    return out


def new_node(clock=None, seed=1):
    return Node(Config(), clock or VirtualClock(), random.Random(seed), commands=COMMANDS,
                strict=True)


_WRITERS: dict = {}     # node -> its writer (what the output driver does in the server)


def attach(node, aof) -> None:
    node.persist = aof is not None
    _WRITERS[node] = aof


def flush(node) -> None:
    aof = _WRITERS.get(node)
    if aof is not None:
        aof.append(node.take_records())
        aof.flush()


def run(node, client, *args):
    reply = node.handle_command(client, [a if isinstance(a, bytes) else str(a).encode()
                                         for a in args])
    flush(node)
    return reply


def advance(node, clock, ms: int) -> None:
    end = clock.now + ms
    while clock.now < end:
        clock.now = min(end, max(clock.now + 1, min(node.next_deadline(), end)))
        node.tick()
        flush(node)


def load(data: bytes, now: int = T0 + 1000, enqueue_once: bool = False, chunk=None):
    clock = VirtualClock(now)
    node = new_node(clock, seed=2)
    loader = fmt.Loader(node, now, enqueue_once)
    if chunk is None:
        loader.feed(data)
    else:
        for i in range(0, len(data), chunk):
            loader.feed(data[i:i + chunk])
    torn = loader.finish()
    return node, torn, clock


def ids_of(node) -> set:
    return {j.id for j in node.iter_jobs()}


@pytest.fixture
def made():
    """A node with a recorder and a mix of jobs; returns (node, clock, aof, client)."""
    clock = VirtualClock()
    node = new_node(clock)
    aof = MemoryAOF()
    attach(node, aof)
    return node, clock, aof, node.new_client()


def fill(node, clock, client, n=40):
    """n jobs over two queues, one record per ADDJOB; returns their ids."""
    ids = []
    for i in range(n):
        clock.now += 1
        ids.append(run(node, client, "ADDJOB", f"q{i % 2}", f"body-{i}", 0, "RETRY", 5).encode())
    return ids


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_roundtrip_keeps_every_field(made, monkeypatch, layout):
    monkeypatch.setattr(fmt, "MIN_JOBS_FOR_COLUMNS", 1000 if layout == "rows" else 1)
    node, clock, aof, c = made
    a = run(node, c, "ADDJOB", "qa", b"\x00binary\r\nbody\xff", 0, "RETRY", 7, "TTL", 600).encode()
    b = run(node, c, "ADDJOB", "qb", "", 0, "DELAY", 30, "RETRY", 9).encode()
    z = run(node, c, "ADDJOB", "qa", "at most once", 0, "RETRY", 0).encode()
    big = run(node, c, "ADDJOB", "qc", b"x" * 100_000, 0).encode()
    run(node, c, "GETJOB", "FROM", "qa")            # a delivered
    run(node, c, "NACK", a)                         # nacks 1, queued again
    node.get_job(big).nodes_delivered = node.holders.of(("f" * 40, node.myself_id))
    before = {j.id: j for j in node.iter_jobs()}
    # Counters changed after creation (NACK) reach the file through a rewrite.
    image = b"".join(fmt_snapshot(node))
    assert image[fmt.FILE_HEADER_SIZE + fmt.REC_HEADER_SIZE] == (
        fmt.REC_JOB_ROWS if layout == "rows" else fmt.REC_JOBS)

    loaded, torn, _ = load(image, now=clock.now + 1000)
    assert torn is None
    assert ids_of(loaded) == {a, b, z, big}
    for jid, old in before.items():
        new = loaded.get_job(jid)
        for f in ("queue", "body", "repl", "etime", "ctime", "delay", "retry", "nacks",
                  "additional_deliveries", "nodes_delivered"):
            assert getattr(new, f) == getattr(old, f), (jid, f)
        assert new.state == ACTIVE                  # loaded jobs come back active
    assert loaded.get_job(a).nacks == 1
    assert loaded.job_count == 4
    assert loaded.jobs_memory == node.jobs_memory
    assert all(len(q.jobs) == 0 for q in loaded.queues.values())


def test_loaded_jobs_are_requeued_by_their_retry_timer(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", "b", 0, "RETRY", 5).encode()
    # Loaded 60 s later: the recorded requeue time is past, so now + retry.
    loaded, _, lclock = load(bytes(aof.data), now=clock.now + 60_000)
    lc = loaded.new_client()
    assert run(loaded, lc, "QLEN", "q") == 0
    job = loaded.get_job(jid)
    assert job.state == ACTIVE and job.requeue_time == lclock.now + 5000
    advance(loaded, lclock, 4900)
    assert run(loaded, lc, "QLEN", "q") == 0
    advance(loaded, lclock, 200)
    assert run(loaded, lc, "QLEN", "q") == 1


def test_recorded_requeue_time_still_ahead_is_kept(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", "b", 0, "RETRY", 100).encode()
    loaded, _, lclock = load(bytes(aof.data), now=clock.now + 10_000)
    assert loaded.get_job(jid).requeue_time == clock.now + 100_000


def test_delay_not_elapsed_is_kept_even_for_retry_0(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", "b", 0, "RETRY", 0, "DELAY", 20).encode()
    loaded, _, lclock = load(bytes(aof.data), now=clock.now + 5_000)
    lc = loaded.new_client()
    advance(loaded, lclock, 14_000)
    assert run(loaded, lc, "QLEN", "q") == 0
    advance(loaded, lclock, 2_000)
    assert run(loaded, lc, "QLEN", "q") == 1
    assert run(loaded, lc, "GETJOB", "NOHANG", "FROM", "q")[0][1] == jid


def test_retry_0_jobs_are_never_requeued_by_a_load(made):
    node, clock, aof, c = made
    queued = run(node, c, "ADDJOB", "q", "never delivered", 0, "RETRY", 0).encode()
    run(node, c, "ADDJOB", "q", "delivered", 0, "RETRY", 0)
    got = run(node, c, "GETJOB", "FROM", "q")[0][1]
    assert got == queued
    loaded, _, lclock = load(bytes(aof.data), now=clock.now + 1000)
    lc = loaded.new_client()
    advance(loaded, lclock, 3_600_000)
    assert run(loaded, lc, "QLEN", "q") == 0
    assert all(j.state == ACTIVE and not j.requeue_time for j in loaded.iter_jobs())
    # aof-enqueue-jobs-once queues what was queued, never a delivered RETRY 0 job.
    loaded, _, _ = load(bytes(aof.data), now=clock.now + 1000, enqueue_once=True)
    q = loaded.queues[b"q"]
    assert [j.body for j in q.jobs] == [b"delivered"]
    assert loaded.get_job(got).flags & FLAG_DELIVERED


def test_enqueue_once_restores_queues_exactly(made):
    node, clock, aof, c = made
    ids = fill(node, clock, c, 20)
    delivered = [run(node, c, "GETJOB", "FROM", "q0")[0][1] for _ in range(3)]
    before = {name: [j.id for j in q.jobs] for name, q in node.queues.items()}
    # A controlled restart rewrites the file from memory (SHUTDOWN REWRITE-AOF).
    image = b"".join(fmt_snapshot(node))
    loaded, torn, _ = load(image, now=clock.now + 1000, enqueue_once=True)
    assert torn is None
    after = {name: [j.id for j in q.jobs] for name, q in loaded.queues.items()}
    assert after == before
    assert all(loaded.get_job(d).state == ACTIVE for d in delivered)
    assert ids_of(loaded) == set(ids)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_held_jobs_load_held_and_releases_are_replayed(made, monkeypatch, layout):
    """(ext) ADDJOB ... HOLD: a held job comes back held, with no timer but its
    TTL (log or rewrite alike); a U record brings a released one back active,
    re-queued by its DELAY (else RETRY) from the load; enqueue-once queues it."""
    monkeypatch.setattr(fmt, "MIN_JOBS_FOR_COLUMNS", 1000 if layout == "rows" else 1)
    node, clock, aof, c = made
    held = run(node, c, "ADDJOB", "q", "held", 0, "HOLD", "RETRY", 5).encode()
    rel = run(node, c, "ADDJOB", "q", "released", 0, "HOLD", "RETRY", 5).encode()
    late = run(node, c, "ADDJOB", "q", "delayed", 0, "HOLD", "DELAY", 30).encode()
    clock.now += 1
    released_at = clock.now
    assert run(node, c, "ENQUEUE", rel, late) == 2
    assert aof.data.count(b"U" + rel) == 1
    log, rewritten = bytes(aof.data), b"".join(fmt_snapshot(node))
    for image in (log, rewritten):
        loaded, torn, lclock = load(image, now=clock.now + 10_000)
        assert torn is None
        h, r, d = loaded.get_job(held), loaded.get_job(rel), loaded.get_job(late)
        assert h.state == HELD and h.flags & FLAG_HELD and h.requeue_time == 0
        assert r.state == ACTIVE and not r.flags & FLAG_HELD
        assert r.requeue_time == lclock.now + 5000
        # The log knows the release, not its time: the DELAY runs again from
        # the load; a rewrite recorded the time the DELAY ends.
        assert d.state == ACTIVE and d.requeue_time == (
            lclock.now + 30_000 if image is log else released_at + 30_000)
        lc = loaded.new_client()
        advance(loaded, lclock, 31_000)
        assert [j[1] for j in run(loaded, lc, "QPEEK", "q", 10)] == [rel, late]
        assert loaded.get_job(held).state == HELD
    loaded, _, _ = load(bytes(aof.data), now=clock.now + 1000, enqueue_once=True)
    assert [j.id for j in loaded.queues[b"q"].jobs] == [rel]
    assert loaded.get_job(held).state == HELD


def test_a_job_held_and_released_in_one_flush_is_logged_once(made):
    node, clock, aof, c = made
    jid = node.handle_command(c, [b"ADDJOB", b"q", b"b", b"0", b"HOLD"]).encode()
    node.handle_command(c, [b"ENQUEUE", jid])
    flush(node)                     # one event-loop turn: the job record says queued
    loaded, _, _ = load(bytes(aof.data), now=clock.now + 10, enqueue_once=True)
    assert [j.id for j in loaded.queues[b"q"].jobs] == [jid]


def fmt_snapshot(node):
    return snapshot_chunks(node, 0, fmt.SHARDS_COUNT, header=True)


def test_acked_deleted_expired_and_flushed_jobs_are_not_live(made):
    node, clock, aof, c = made
    ids = fill(node, clock, c, 10)
    run(node, c, "ACKJOB", ids[0])
    run(node, c, "FASTACK", ids[1])
    run(node, c, "DELJOB", ids[2])
    short = run(node, c, "ADDJOB", "q", "short", 0, "TTL", 2).encode()
    advance(node, clock, 2500)                      # TTL expiry: deleted and logged
    assert node.get_job(short) is None
    loaded, torn, _ = load(bytes(aof.data), now=clock.now)
    assert torn is None
    assert ids_of(loaded) == set(ids[3:])
    # Even loaded before the expiry was logged, an expired job is dropped.
    assert short not in ids_of(load(bytes(aof.data[:aof.bounds[-1][0]]), now=clock.now)[0])
    run(node, c, "DEBUG", "FLUSHALL")
    after = run(node, c, "ADDJOB", "q", "after flushall", 0).encode()
    loaded, _, _ = load(bytes(aof.data), now=clock.now)
    assert ids_of(loaded) == {after}
    assert loaded.job_count == 1


def test_acked_job_with_other_holders_stays_acked(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", "b", 0).encode()
    job = node.get_job(jid)
    job.nodes_delivered = node.holders.of((node.myself_id, "a" * 40))
    aof.append([job])
    lifecycle.ack(node, job, clock.now)     # the cluster keeps it until every holder confirmed
    flush(node)
    loaded, _, _ = load(bytes(aof.data), now=clock.now + 10)
    lj = loaded.get_job(jid)
    assert lj is not None and lj.state == ACKED
    assert not loaded.queues or not loaded.queues[b"q"].jobs


def test_a_later_job_record_replaces_the_earlier(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", "b", 0).encode()
    job = node.get_job(jid)
    job.nacks = 5
    aof.append([job])           # a rewrite may log a job twice: the last one wins
    aof.flush()
    loaded, _, _ = load(bytes(aof.data), now=clock.now + 10)
    assert loaded.get_job(jid).nacks == 5
    assert loaded.job_count == 1


def test_incremental_feeding_gives_the_same_result(made):
    node, clock, aof, c = made
    ids = fill(node, clock, c, 30)
    run(node, c, "ACKJOB", *ids[:5])
    data = bytes(aof.data)
    whole = ids_of(load(data)[0])
    for chunk in (1, 7, 13, 64, 1000):
        assert ids_of(load(data, chunk=chunk)[0]) == whole


def test_a_record_bigger_than_the_chunks(made):
    node, clock, aof, c = made
    jid = run(node, c, "ADDJOB", "q", b"z" * (3 * 1024 * 1024), 0).encode()
    data = bytes(aof.data)
    loaded, torn, _ = load(data, chunk=65536)
    assert torn is None and loaded.get_job(jid).body == b"z" * (3 * 1024 * 1024)
    loaded, torn, _ = load(data[:-10], chunk=65536)
    assert torn.offset == fmt.FILE_HEADER_SIZE and loaded.job_count == 0


def test_batches_of_many_jobs_split_and_load(made):
    node, clock, aof, c = made
    attach(node, None)
    for i in range(3000):
        run(node, c, "ADDJOB", f"q{i % 7}", f"b{i}", 0)
    image = fmt.file_header() + fmt.encode_items(list(node.iter_jobs()))
    assert len(record_bounds(image)) == 3           # 1024 jobs a record at most
    loaded, torn, _ = load(image, now=node.clock() + 1)
    assert torn is None and ids_of(loaded) == ids_of(node)


# ------------------------------------------------------------------- damage
def _expected_jobs(aof, node_before_records):
    """ids alive after loading each prefix of records: list indexed by count."""
    out = []
    for k in range(len(aof.bounds) + 1):
        end = aof.bounds[k - 1][1] if k else fmt.FILE_HEADER_SIZE
        out.append(ids_of(load(bytes(aof.data[:end]))[0]))
    return out


@pytest.fixture
def log_image(made):
    node, clock, aof, c = made
    ids = fill(node, clock, c, 12)
    run(node, c, "ACKJOB", ids[3])
    run(node, c, "DELJOB", ids[4], ids[5])
    run(node, c, "GETJOB", "FROM", "q0")
    run(node, c, "ADDJOB", "q9", "the last one", 0, "RETRY", 0)
    run(node, c, "GETJOB", "FROM", "q9")            # R record
    run(node, c, "ADDJOB", "q9", "really the last one", 0)
    data = bytes(aof.data)
    return data, aof.bounds, _expected_jobs(aof, None)


def test_truncating_inside_the_last_record_at_every_offset(log_image):
    data, bounds, expected = log_image
    start, end = bounds[-1]
    for cut in range(start + 1, end):
        loaded, torn, _ = load(data[:cut])
        assert torn is not None and torn.offset == start and torn.size == cut, cut
        assert ids_of(loaded) == expected[len(bounds) - 1], cut
    loaded, torn, _ = load(data)
    assert torn is None and ids_of(loaded) == expected[-1]


def test_truncating_at_random_offsets(log_image):
    data, bounds, expected = log_image
    rnd = random.Random(5)
    for cut in [rnd.randrange(0, len(data)) for _ in range(300)] + [0, 1, 15, 16]:
        loaded, torn, _ = load(data[:cut], chunk=rnd.choice([None, 5, 100]))
        if cut == 0:
            assert torn is None and loaded.job_count == 0
            continue
        if cut < fmt.FILE_HEADER_SIZE:
            assert torn.offset == 0
            continue
        complete = sum(1 for s, e in bounds if e <= cut)
        boundary = cut == fmt.FILE_HEADER_SIZE or any(e == cut for _, e in bounds)
        if boundary:
            assert torn is None, cut
        else:
            assert torn.offset == bounds[complete][0], cut
        assert ids_of(loaded) == expected[complete], cut


def _record_at(bounds, pos):
    for k, (s, e) in enumerate(bounds):
        if s <= pos < e:
            return k
    raise AssertionError(pos)


def test_flipping_random_bytes(log_image):
    data, bounds, expected = log_image
    rnd = random.Random(7)
    last = len(bounds) - 1
    positions = [rnd.randrange(len(data)) for _ in range(400)]
    positions += list(range(fmt.FILE_HEADER_SIZE)) + list(range(bounds[-1][0], len(data)))
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= rnd.randrange(1, 256)
        if pos < fmt.FILE_HEADER_SIZE:
            with pytest.raises(fmt.CorruptAOF) as e:
                load(bytes(bad))
            assert e.value.offset == 0
            continue
        k = _record_at(bounds, pos)
        start = bounds[k][0]
        in_header = pos < start + fmt.REC_HEADER_SIZE
        if k == last and not in_header:
            loaded, torn, _ = load(bytes(bad), chunk=rnd.choice([None, 3, 50]))
            assert torn is not None and torn.offset == start, pos
            assert ids_of(loaded) == expected[last], pos
        else:
            with pytest.raises(fmt.CorruptAOF) as e:
                load(bytes(bad), chunk=rnd.choice([None, 3, 50]))
            assert e.value.offset == start, (pos, e.value)
            assert f"byte offset {start}" in str(e.value)


def test_flipping_several_bytes_reports_the_first_damaged_record(log_image):
    data, bounds, _ = log_image
    rnd = random.Random(11)
    for _ in range(100):
        bad = bytearray(data)
        picks = sorted(rnd.sample(range(fmt.FILE_HEADER_SIZE, bounds[-2][1]), 3))
        for p in picks:
            bad[p] ^= 0x5A
        with pytest.raises(fmt.CorruptAOF) as e:
            load(bytes(bad))
        assert e.value.offset == bounds[_record_at(bounds, picks[0])][0]


def test_zero_filled_tail_is_a_torn_tail(log_image):
    data, bounds, expected = log_image
    for n in (1, 11, 12, 13, 4096):
        loaded, torn, _ = load(data + bytes(n), chunk=100)
        assert torn is not None and torn.offset == len(data)
        assert ids_of(loaded) == expected[-1]
    # Zeros followed by data are corruption.
    with pytest.raises(fmt.CorruptAOF) as e:
        load(data + bytes(20) + b"\x01")
    assert e.value.offset == len(data)


def test_file_header_checks():
    with pytest.raises(fmt.BadHeader, match="not a Disquette AOF"):
        load(b"*2\r\n$7\r\nLOADJOB\r\n$3\r\nabc\r\n")
    head = bytearray(fmt.file_header(version=4))
    with pytest.raises(fmt.BadHeader, match="version 4"):
        load(bytes(head))
    node, torn, _ = load(fmt.file_header()[:9])
    assert torn.offset == 0
    node, torn, _ = load(b"")
    assert torn is None and node.job_count == 0


# --------------------------------------------------------------- check tool
def test_check_tool_reports_and_fixes(tmp_path, log_image, capsys):
    data, bounds, _ = log_image
    p = tmp_path / "disque.aof"
    p.write_bytes(data)
    assert check_aof.main([str(p)]) == 0
    assert "AOF is valid" in capsys.readouterr().out
    p.write_bytes(data[:-3])
    assert check_aof.main([str(p)]) == 1
    out = capsys.readouterr().out
    assert f"torn last record at byte offset {bounds[-1][0]}" in out
    assert check_aof.main([str(p), "--fix"]) == 0
    assert p.read_bytes() == data[:bounds[-1][0]]
    assert check_aof.main([str(p)]) == 0
    bad = bytearray(data)
    bad[bounds[2][0] + 20] ^= 1
    p.write_bytes(bytes(bad))
    assert check_aof.main([str(p), "--fix"]) == 2
    assert f"byte offset {bounds[2][0]}" in capsys.readouterr().out
    assert p.read_bytes() == bytes(bad)             # not touched without --force
    assert check_aof.main([str(p), "--fix", "--force"]) == 0
    assert p.read_bytes() == data[:bounds[2][0]]


# ------------------------------------------------------------------ rewrite
def no_exit():
    raise OSError("fatal AOF error")        # where the process would exit


def file_aof(node, loop, policy=None):
    """The process's writer on the test's loop, raising where the process exits."""
    return aof_mod.AppendOnlyFile(node, node.config, process_runtime(loop, exit=no_exit),
                                  policy=policy)


class StepLoop:
    """Just enough of an event loop for AppendOnlyFile, driven by the test."""

    def __init__(self) -> None:
        self.ready: list = []
        self.lock = threading.Lock()

    def call_soon(self, fn, *args):
        h = _Handle(fn, args)
        with self.lock:
            self.ready.append(h)
        return h

    call_soon_threadsafe = call_soon

    def call_later(self, delay, fn, *args):
        return _Handle(fn, args)        # the cron is not needed here

    def run_one(self) -> bool:
        with self.lock:
            if not self.ready:
                return False
            h = self.ready.pop(0)
        if not h.cancelled:
            h.fn(*h.args)
        return True


class _Handle:
    def __init__(self, fn, args) -> None:
        self.fn, self.args, self.cancelled = fn, args, False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.mark.parametrize("flushall", [False, True])
def test_background_rewrite_while_jobs_come_and_go(tmp_path, monkeypatch, flushall):
    """The walk of the shards interleaved with creations, acks, deletions and
    deliveries: the rewritten file loads to exactly the live jobs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(aof_rewrite, "REWRITE_SLICE", 0)    # one shard per turn
    clock = VirtualClock()
    node = new_node(clock)
    loop = StepLoop()
    aof = file_aof(node, loop)
    aof.files.create_empty(aof.path)
    aof._open_append()
    aof.state = "on"
    attach(node, aof)
    c = node.new_client()
    rnd = random.Random(3)
    live = [run(node, c, "ADDJOB", f"q{i % 4}", f"b{i}", 0,
                "RETRY", rnd.choice([0, 5])).encode() for i in range(3000)]
    run(node, c, "ACKJOB", *live[:500])
    assert aof.start_rewrite() == "Background append only file rewriting started"
    turns = 0
    served_at = set()               # walk positions at which commands were served
    deadline = time.monotonic() + WAIT_TIMEOUT      # a hang, not a speed
    while aof.rewrite is not None:
        assert time.monotonic() < deadline
        if 0 < aof.rewrite.cursor < fmt.SHARDS_COUNT:
            served_at.add(aof.rewrite.cursor)
        op = rnd.random()
        if op < 0.4:
            live.append(run(node, c, "ADDJOB", "qn", f"n{turns}", 0, "RETRY",
                            rnd.choice([0, 5])).encode())
        elif op < 0.6:
            run(node, c, "ACKJOB", rnd.choice(live))
        elif op < 0.7:
            run(node, c, "DELJOB", rnd.choice(live))
        elif op < 0.8:
            run(node, c, "GETJOB", "NOHANG", "FROM", "q0", "q1", "qn")
        if flushall and turns == 2000:
            run(node, c, "DEBUG", "FLUSHALL")
        aof.flush()
        if not loop.run_one():
            time.sleep(0.001)          # the background fsync
        turns += 1
    # The walk ran a shard per turn and the node served commands between every
    # two: a slow machine ends a slice sooner, never later.
    assert served_at == set(range(1, fmt.SHARDS_COUNT))
    assert aof.last_bgrewrite_status == "ok" and aof.state == "on"
    # More records after the swap go to the new file.
    after = run(node, c, "ADDJOB", "q", "after the swap", 0).encode()
    expected = {j.id for j in node.iter_jobs() if j.state != ACKED}
    assert after in expected
    aof.shutdown("default")
    attach(node, None)
    data = (tmp_path / "disque.aof").read_bytes()
    loaded, torn, _ = load(data, now=clock.now)
    assert torn is None
    assert ids_of(loaded) == expected
    for j in node.iter_jobs():
        if j.retry == 0 and j.flags & FLAG_DELIVERED:
            assert loaded.get_job(j.id).flags & FLAG_DELIVERED
    assert not list(tmp_path.glob("temp-*"))


# ------------------------------------------------------------------- policy
class AlwaysButNoFsync(AOFPolicy):
    def fsync_before_replies(self, rewriting: bool) -> bool:
        return False


class RewriteKeepsNothing(AOFPolicy):
    @staticmethod
    def live_jobs(jobs, now: int) -> list:
        return []


def file_writer(node, policy=None):
    aof = file_aof(node, StepLoop(), policy)
    aof.files.create_empty(aof.path)
    aof._open_append()
    aof.state = "on"
    attach(node, aof)
    return aof


def test_the_file_writer_decides_by_its_policy_object(tmp_path, monkeypatch):
    """The file writer asks the same policy object as the simulator's
    (tests/sim/test_disk_sim.py): change the object, the writer follows."""
    monkeypatch.chdir(tmp_path)
    node = new_node()
    node.config.appendfsync = AppendFsync.ALWAYS
    c = node.new_client()
    aof = file_writer(node)
    assert type(aof.policy) is AOFPolicy
    run(node, c, "ADDJOB", "q", "x", 0)
    assert aof.fsyncs == 1 and not aof.unsynced
    aof.policy = AlwaysButNoFsync(node.config)
    run(node, c, "ADDJOB", "q", "x", 0)
    assert aof.fsyncs == 1 and aof.unsynced
    aof.policy = RewriteKeepsNothing(node.config)
    aof.rewrite_now()
    assert (tmp_path / "disque.aof").stat().st_size == fmt.FILE_HEADER_SIZE
    aof.shutdown("default")
    attach(node, None)


# ------------------------------------------------------- the bytes on disk
def pinned_jobs(n: int) -> list:
    jobs = []
    for i in range(n):
        j = Job(make_job_id("ab" * 20, i, 86400, 30), b"q", b"body-%d" % i, ACTIVE, 1,
                T0 + 86_400_000, T0 * 1_000_000 + i, 0, 30)
        j.requeue_time = T0 + 30_000 + i
        jobs.append(j)
    return jobs


@pytest.mark.parametrize("n, kind, digest", [
    (1, fmt.REC_JOB_ROWS, "cd7e086354896db073b6eb0eebffd7d7e7bb52dbba38a945a824895827822aef"),
    (16, fmt.REC_JOBS, "3e9c986daab8599b8708fc2cc70852ccb4464dc3160961fbaf839e22452f3889"),
])
def test_job_records_keep_their_bytes(n, kind, digest):
    """Job records encode to the bytes of format version 3 (digests of
    those), a row being the job's record as the bus carries it, and the
    requeue time loads back."""
    jobs = pinned_jobs(n)
    jobs[0].nodes_delivered = HolderLists().of(("f" * 40, "e" * 40))
    data = fmt.encode_jobs(jobs)
    assert data[fmt.REC_HEADER_SIZE] == kind
    assert hashlib.sha256(data).hexdigest() == digest
    if kind == fmt.REC_JOB_ROWS:
        assert msgpack.unpackb(data[fmt.REC_HEADER_SIZE + 1:]) == [
            [list(f) if type(f) is tuple else f for f in job_to_fields(j)] for j in jobs]
    loaded, torn, _ = load(fmt.file_header() + data, now=T0 + 1000)
    assert torn is None
    assert sorted(j.requeue_time for j in loaded.iter_jobs()) == [T0 + 30_000 + i
                                                                  for i in range(n)]


# ---------------------------------------------------- the history (aof-history)
def kinds_of(data: bytes) -> list[int]:
    return [data[s + fmt.REC_HEADER_SIZE] for s, _ in record_bounds(data)]


def history_run(history: bool) -> tuple[bytes, Node]:
    """The same commands and timers with and without aof-history."""
    clock = VirtualClock()
    node = new_node(clock)
    aof = MemoryAOF()
    attach(node, aof)
    node.persist_history = history
    c = node.new_client()
    a = run(node, c, "ADDJOB", "q", "a", 0, "RETRY", 1).encode()
    b = run(node, c, "ADDJOB", "q", "b", 0, "RETRY", 1).encode()
    run(node, c, "ADDJOB", "q", "gone", 0, "TTL", 1)
    run(node, c, "GETJOB", "COUNT", 2, "FROM", "q")
    run(node, c, "NACK", a)
    run(node, c, "ENQUEUE", b)
    run(node, c, "ACKJOB", a)
    advance(node, clock, 3000)
    return bytes(aof.data), node


def test_history_records_are_skipped_by_the_loader():
    """aof-history adds deliveries (G), NACKs (N), requeues (Q) and tells an
    expiry (E) from a deletion; the node loads the same jobs from either file."""
    plain, _ = history_run(False)
    data, node = history_run(True)
    kinds = kinds_of(data)
    assert fmt.REC_EXPIRED not in kinds_of(plain) and fmt.REC_GOT not in kinds_of(plain)
    for kind in (fmt.REC_GOT, fmt.REC_NACK, fmt.REC_REQUEUE, fmt.REC_EXPIRED):
        assert kind in kinds, chr(kind)
    a, b = load(plain, now=T0 + 3000)[0], load(data, now=T0 + 3000)[0]
    assert ids_of(a) == ids_of(b) == ids_of(node)
    summary = fmt.check_chunks([data])
    assert summary.corrupt is None and summary.torn is None
    got = [fmt.decode_ids(data[s + fmt.REC_HEADER_SIZE:e]) for s, e in record_bounds(data)
           if data[s + fmt.REC_HEADER_SIZE] == fmt.REC_GOT]
    assert sum(map(len, got)) == 2 and summary.records[fmt.REC_EXPIRED] == 1


def test_time_marks_are_skipped_by_the_loader():
    jobs = pinned_jobs(3)
    data = (fmt.file_header() + fmt.encode_time(T0) + fmt.encode_jobs(jobs)
            + fmt.encode_time(T0 + 5) + fmt.encode_ids(fmt.REC_GOT, [jobs[0].id]))
    node, torn, _ = load(data, now=T0 + 1000)
    assert torn is None and node.job_count == 3


def test_a_version_2_file_of_main_loads_job_for_job():
    """tests/data/aof-v2.aof was written by the code of main at 8079746, the
    last to write format version 2 (J and j job records, their fields in
    ORDER_V2), and tests/data/aof-v2.json holds what that code loaded from it.
    Today's loader loads the same jobs, field for field. Both files were made
    by (tests/aof_v2.py)::

        git worktree add ../v2 8079746 && cp tests/aof_v2.py ../v2/tests/
        cd ../v2 && DISQUETTE_NO_EXTENSIONS=1 python -m tests.aof_v2 <this checkout>/tests/data
    """
    data = aof_v2.AOF.read_bytes()
    expected = json.loads(aof_v2.EXPECTED.read_text())
    assert data[:fmt.FILE_HEADER_SIZE] == fmt.file_header(version=2)
    kinds = {data[s + fmt.REC_HEADER_SIZE] for s, _ in record_bounds(data)}
    assert {fmt.REC_JOBS_V2, fmt.REC_JOB_ROWS_V2} <= kinds
    assert not kinds & {fmt.REC_JOBS, fmt.REC_JOB_ROWS}
    assert aof_v2.loaded_jobs(data, expected["now"]) == expected["loaded"]
    assert any(j["nodes_delivered"] and j["requeue_time"] for j in expected["loaded"]["jobs"])
    # A version 1 file (the same job records, no history ones) loads too.
    v1 = fmt.file_header(version=1) + b"".join(
        data[s:e] for s, e in record_bounds(data)
        if data[s + fmt.REC_HEADER_SIZE] not in fmt.HISTORY_ONLY + (fmt.REC_EXPIRED,))
    assert aof_v2.loaded_jobs(v1, expected["now"])["jobs"] == expected["loaded"]["jobs"]


def test_an_older_file_gets_the_version_3_header_and_both_layouts_load(tmp_path, monkeypatch):
    """A node opening a version 2 file for appending upgrades its header (in
    place) before writing records of this version: the file then holds J and
    j records (the older order) before C and c records (the record's order),
    each read by its type byte, and the node loads them all."""
    monkeypatch.chdir(tmp_path)
    old = aof_v2.AOF.read_bytes()
    expected = json.loads(aof_v2.EXPECTED.read_text())
    (tmp_path / "disque.aof").write_bytes(old)
    node = new_node(VirtualClock(expected["now"]))
    aof = file_aof(node, StepLoop())
    asyncio.run(aof.load())
    assert node.job_count == len(expected["loaded"]["jobs"])
    data = (tmp_path / "disque.aof").read_bytes()
    assert data[:fmt.FILE_HEADER_SIZE] == fmt.file_header() != old[:fmt.FILE_HEADER_SIZE]
    assert data[fmt.FILE_HEADER_SIZE:] == old[fmt.FILE_HEADER_SIZE:]
    attach(node, aof)
    c = node.new_client()
    new = [run(node, c, "ADDJOB", "new", "n%d" % i, 0, "RETRY", 5).encode() for i in range(3)]
    node.get_job(new[0]).nodes_delivered = node.holders.of(("f" * 40, node.myself_id))
    added = fmt.encode_jobs([node.get_job(jid) for jid in new] * 6)     # a C record
    aof.shutdown("default")
    attach(node, None)
    data = (tmp_path / "disque.aof").read_bytes() + added
    kinds = [data[s + fmt.REC_HEADER_SIZE] for s, _ in record_bounds(data)]
    assert kinds.index(fmt.REC_JOB_ROWS_V2) < kinds.index(fmt.REC_JOB_ROWS) < kinds.index(
        fmt.REC_JOBS)
    loaded, torn, _ = load(data, now=expected["now"])
    assert torn is None
    old_ids = {j["id"].encode() for j in expected["loaded"]["jobs"]}
    assert ids_of(loaded) == old_ids | set(new)
    assert loaded.get_job(new[0]).nodes_delivered == node.get_job(new[0]).nodes_delivered
    assert loaded.get_job(new[1]).requeue_time == node.get_job(new[1]).requeue_time


@pytest.mark.parametrize("n", [1, 3])
def test_a_replicate_beyond_65535_is_corruption(n):
    """A job's REPLICATE is a narrow C int of the compiled Job: a record with
    more (no node writes one) is refused where it is read, on both builds."""
    jobs = pinned_jobs(n)
    jobs[-1].repl = 65536
    data = fmt.file_header() + fmt.encode_jobs(jobs)
    with pytest.raises(fmt.CorruptAOF, match="REPLICATE out of range"):
        load(data)
    jobs[-1].repl = 65535
    node, torn, _ = load(fmt.file_header() + fmt.encode_jobs(jobs))
    assert torn is None and node.job_count == n
