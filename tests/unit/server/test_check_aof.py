"""disquette-check-aof --to-version 2 (server/check_aof.py): a file of
format version 3 rewritten as version 2 by the codec's encoders reads back
job for job, record for record, with the version 2 header. (That the previous
release loads it: tests/integration/test_previous_release.py.)"""

from __future__ import annotations

import random

from broker.config import Config
from broker.job import job_to_fields
from disquette import aof_codec as codec
from server.check_aof import main, to_version
from server.sim.disk import SimDisk
from server.sim.inprocess import InProcessNode


def _records(data: bytes) -> list[tuple[int, list]]:
    """Each record's type, and its jobs (rows, in the record's order) or its bytes."""
    out = []
    scanner = codec.Scanner()
    for _, payload in scanner.feed(data):
        kind = payload[0]
        if kind in codec.JOB_RECORDS:
            n = len(list(codec.decode_jobs(payload)[0]))
            cols = codec.decode_jobs(payload)
            full = [[c] * n if c is None or isinstance(c, int) else list(c) for c in cols]
            out.append((kind, [list(r) for r in zip(*full)]))
        else:
            out.append((kind, bytes(payload)))
    assert scanner.finish() is None
    return out


def _v3_file() -> bytes:
    """What a node writes (job rows, a keyed job, acks, deletions), and a
    column batch of every job it holds (what a turn of 16 adds or more, or a
    rewrite, writes)."""
    disk = SimDisk()
    node = InProcessNode(Config(appendonly=True), rng=random.Random(1), disk=disk)
    ids = [node.call("ADDJOB", f"q{i % 3}", f"job {i}", 0, "RETRY", 5) for i in range(20)]
    node.call("ADDJOB", "k", "keyed", 0, "IDEMPOTENCY", "key-1")
    node.call("GETJOB", "FROM", "q0")
    node.call("ACKJOB", ids[0])
    node.call("DELJOB", ids[1])
    node.advance(10)
    batch = [job_to_fields(job) for job in node.node.iter_jobs()]
    return disk.image() + codec.encode_job_columns(batch)


def test_a_version_3_file_reads_back_the_same_as_version_2(tmp_path):
    data = _v3_file()
    before = _records(data)
    kinds = {k for k, _ in before}
    assert codec.REC_JOBS in kinds and codec.REC_JOB_ROWS in kinds      # both job records
    path = tmp_path / "disque.aof"
    path.write_bytes(data)
    assert to_version(str(path), 2) == sum(k in (codec.REC_JOBS, codec.REC_JOB_ROWS)
                                           for k, _ in before)
    after = _records(path.read_bytes())
    v2 = {codec.REC_JOBS: codec.REC_JOBS_V2, codec.REC_JOB_ROWS: codec.REC_JOB_ROWS_V2}
    assert after == [(v2.get(k, k), r) for k, r in before]
    scanner = codec.Scanner()
    list(scanner.feed(path.read_bytes()))
    assert scanner.version == 2


def test_the_command_rewrites_a_valid_file_and_says_so(tmp_path, capsys):
    path = tmp_path / "disque.aof"
    path.write_bytes(_v3_file())
    assert main([str(path), "--to-version", "2"]) == 0
    out = capsys.readouterr().out
    assert "format version 3" in out and "Rewrote the AOF as format version 2" in out
    assert main([str(path), "--to-version", "2"]) == 0
    assert "It is format version 2 already." in capsys.readouterr().out
