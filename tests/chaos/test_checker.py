"""The total-queue checker on crafted histories: it must pass a clean run and
catch a lost job, an unexpected delivery, a duplicate and a RETRY 0 job
delivered twice; and ``python -m chaos check`` must say so in its exit code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chaos.checker import check, percentiles
from chaos.history import HistoryError, read_history
from tests.chaos.crafted import clean_run
from tests.harness import REPO_ROOT


def checked(path):
    return check(read_history(path))


def test_a_clean_history_passes(tmp_path):
    path = clean_run(tmp_path / "h.jsonl").finish(6.0)
    r = checked(path)
    assert r.valid and r.problems == []
    assert (r.attempted, r.acknowledged, r.failed, r.indeterminate) == (10, 10, 0, 0)
    assert (r.deliveries, r.delivered, r.lost, r.unexpected, r.duplicated) == (10, 10, 0, 0, 0)
    assert (r.recovered, r.retry0_redelivered, r.uncollected, r.acked_jobs) == (0, 0, 0, 10)
    assert r.drain_complete is True and r.history_complete is True
    assert r.add_latency == {"count": 10, "p50": pytest.approx(0.01), "p90": pytest.approx(0.01),
                             "p99": pytest.approx(0.01), "max": pytest.approx(0.01)}
    assert r.delivery_latency["p50"] == pytest.approx(0.1)


def test_a_lost_job_fails_the_run(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, value, _ = run.add(5.5)                     # acknowledged, never delivered
    r = checked(run.finish(6.0))
    assert not r.valid and r.lost == 1 and r.examples["lost"] == [value]
    assert r.problems == ["1 acknowledged add(s) never delivered (lost)"]


def test_a_lost_job_names_the_damaged_disks_that_cut_its_records(tmp_path):
    """Disk faults record the jobs each damaged file lost (chaos/disk.py,
    ``discarded``): a lost job says where its copies went; one cut on as
    many disks as its REPLICATE level is counted apart, and still fails."""
    run = clean_run(tmp_path / "h.jsonl")
    _, both, both_id = run.add(5.0)                 # REPLICATE 2: both copies cut
    _, one, one_id = run.add(5.1)                   # one copy cut, the other not delivered
    run.at(5.5).w.event("disk", node="n1", what="discarded", fault=1, count=2,
                        jobs=[both_id, one_id])
    run.at(25.0).w.event("disk", node="n2", what="discarded", fault=2, count=1, jobs=[both_id])
    r = checked(run.finish(30.0))
    assert not r.valid and r.lost == 2 and r.lost_every_copy_cut == 1
    assert r.examples["lost_where"] == [
        f"{both}: REPLICATE 2, records cut on n1 at 5.5 s, n2 at 25.0 s",
        f"{one}: REPLICATE 2, records cut on n1 at 5.5 s"]
    assert r.problems == ["2 acknowledged add(s) never delivered (lost), 1 of them with a "
                          "record cut on as many damaged disks as their REPLICATE level "
                          "(see lost_where)"]


def test_an_unexpected_delivery_fails_the_run(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    run.deliver(5.5, "never-added", "D-00000000-nobodyaddedthisjob00000-0000")
    r = checked(run.finish(6.0))
    assert not r.valid and r.unexpected == 1 and r.examples["unexpected"] == ["never-added"]


def test_a_retry0_job_delivered_twice_fails_the_run(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, value, job_id = run.add(5.0, retry=0)
    run.deliver(5.1, value, job_id, node="n1")
    run.deliver(5.2, value, job_id, node="n2")
    r = checked(run.finish(6.0))
    assert not r.valid
    assert (r.retry0_jobs, r.retry0_redelivered) == (1, 1)
    assert r.examples["retry0_redelivered"] == [value]
    assert r.problems == ["1 RETRY 0 job(s) delivered more than once"]


def test_a_retry0_job_delivered_once_is_fine(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    run.job(5.0, retry=0)
    r = checked(run.finish(6.0))
    assert r.valid and (r.retry0_jobs, r.retry0_redelivered) == (1, 0)


def test_a_retry0_job_never_delivered_is_counted_apart_and_allowed(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, value, _ = run.add(5.0, retry=0)            # its only copy went with its node
    r = checked(run.finish(6.0))
    assert r.valid and r.lost == 0
    assert r.retry0_undelivered == 1 and r.examples["retry0_undelivered"] == [value]


def test_duplicates_are_counted_and_classified_but_allowed(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, by_retry, id1 = run.add(5.0)
    run.deliver(5.1, by_retry, id1)
    run.deliver(5.2, by_retry, id1)                # retry timer: no ack, no nack between
    run.ack(5.3, id1)
    _, by_nack, id2 = run.add(5.0)
    run.deliver(5.1, by_nack, id2)
    run.at(5.15).w.nacked(id2, "n2", 1)
    run.deliver(5.2, by_nack, id2)
    run.ack(5.3, id2)
    _, by_ack, id3 = run.add(5.0)
    run.deliver(5.1, by_ack, id3)
    run.ack(5.15, id3)
    run.deliver(5.2, by_ack, id3, node="n1")      # acked, yet another holder requeued it
    r = checked(run.finish(6.0))
    assert r.valid
    assert (r.duplicated, r.deliveries, r.delivered) == (3, 16, 13)
    assert r.duplicate_rate == round(3 / 13, 6)
    assert (r.duplicates_after_timeout, r.duplicates_after_nack, r.duplicates_after_ack) == (1, 1, 1)
    assert sorted(r.examples["duplicated"]) == sorted([by_retry, by_nack, by_ack])


def test_indeterminate_and_failed_adds(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, recovered, rid = run.add(5.0, outcome="info")
    run.deliver(5.2, recovered, rid)
    run.ack(5.3, rid)
    run.add(5.0, outcome="info")                   # unknown outcome, never delivered: not lost
    _, failed, fid = run.add(5.0, outcome="fail")
    run.deliver(5.2, failed, fid)
    run.ack(5.3, fid)
    run.add(5.0, outcome="fail")
    run.at(5.5).w.add_invoked(node="n1", queue="q", value="no-reply", retry=5)   # never answered
    r = checked(run.finish(6.0))
    assert r.valid
    assert (r.attempted, r.acknowledged, r.failed, r.indeterminate) == (15, 10, 2, 3)
    assert (r.recovered, r.failed_then_delivered, r.lost) == (1, 1, 0)
    assert r.examples["recovered"] == [recovered]


def test_acked_jobs_left_on_nodes_after_healing(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, _, acked_id = run.add(5.0)
    run.deliver(5.1, f"v{run.n}", acked_id)
    run.ack(5.2, acked_id)
    r = checked(run.finish(6.0, leftovers={"n1": {acked_id: "acked"},
                                           "n2": {acked_id: "acked", "D-other": "queued"}}))
    assert r.valid                                  # worth a look, not a failed run
    assert (r.uncollected, r.uncollected_by_node, r.leftover_unacked) == (
        2, {"n1": 1, "n2": 1}, 1)
    assert r.examples["uncollected"] == [acked_id]


def test_a_delivery_under_another_id_is_reported(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    _, value, _ = run.add(5.0)
    run.deliver(5.1, value, "D-00000000-someotherjobid0000000000-0000")
    r = checked(run.finish(6.0))
    assert r.valid and r.id_mismatches == 1 and r.lost == 0


def test_an_unfinished_history_is_checked_as_far_as_it_goes(tmp_path):
    run = clean_run(tmp_path / "h.jsonl")
    run.w._file.close()                            # the run died: no drain, no end
    r = checked(run.path)
    assert r.valid and r.history_complete is False and r.drain_complete is None


def test_percentiles_nearest_rank():
    assert percentiles([]) == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    assert percentiles(range(1, 101)) == {"count": 100, "p50": 1 + 49, "p90": 90, "p99": 99,
                                          "max": 100}
    assert percentiles([3.0]) == {"count": 1, "p50": 3.0, "p90": 3.0, "p99": 3.0, "max": 3.0}


def test_history_reading_errors(tmp_path):
    path = clean_run(tmp_path / "h.jsonl").finish(6.0)
    lines = path.read_text().splitlines(keepends=True)

    torn = tmp_path / "torn.jsonl"                 # the writer died mid-line
    torn.write_text("".join(lines[:-1]) + lines[-1][:10])
    history = read_history(torn)
    assert history.torn and history.warnings and not history.ended

    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines[:3]) + "{oops\n" + "".join(lines[3:]))
    with pytest.raises(HistoryError, match=r"broken.jsonl:4: not JSON"):
        read_history(broken)
    no_meta = tmp_path / "no-meta.jsonl"
    no_meta.write_text("".join(lines[1:]))
    with pytest.raises(HistoryError, match="no meta line"):
        read_history(no_meta)
    future = tmp_path / "future.jsonl"
    meta = json.loads(lines[0]) | {"version": 99}
    future.write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))
    with pytest.raises(HistoryError, match="history version 99"):
        read_history(future)


def run_check(*args):
    return subprocess.run([sys.executable, "-m", "chaos", "check", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def test_cli_exit_codes_and_files(tmp_path):
    good = clean_run(tmp_path / "good.jsonl").finish(6.0)
    done = run_check(good)
    assert done.returncode == 0, done.stderr
    assert "VALID" in done.stdout and "INVALID" not in done.stdout
    assert (tmp_path / "good.report.json").exists() and (tmp_path / "good.report.html").exists()

    run = clean_run(tmp_path / "bad.jsonl")
    run.add(5.5)
    bad = run.finish(6.0)
    done = run_check(bad, "--no-files")
    assert done.returncode == 1
    assert "INVALID" in done.stdout and "never delivered (lost)" in done.stdout
    assert not (tmp_path / "bad.report.json").exists()

    (tmp_path / "junk.jsonl").write_text("hello\n")
    done = run_check(tmp_path / "junk.jsonl")
    assert done.returncode == 2 and "not JSON" in done.stderr
    assert run_check(tmp_path / "missing.jsonl").returncode == 2
