"""The disk and power scenarios (chaos/disk.py), as ``make chaos`` runs them
but short and seeded: 3 real nodes with ``appendonly yes``, a few seconds
each. Each verdict must be clean (with REPLICATE >= 2 one node's damaged disk
costs no acknowledged job; a power loss costs no more than its fsync policy
allows) and each fault must have bitten: the node repaired or refused the
damaged file naming the offset, answered -MISCONF or exited on a full disk,
and the power cut dropped unsynced bytes."""

from __future__ import annotations

import json

import pytest

from broker import aof_format as fmt
from broker.job import ACTIVE, Job
from chaos.checker import check
from chaos.disk import flip_bit, live_jobs, power_loss_lines
from chaos.history import read_history
from disquette.aof_codec import FILE_HEADER_SIZE, REC_ACK, REC_HEADER_SIZE, file_header
from server import check_aof
from tests.chaos.crafted import Run
from tests.chaos.short_run import run_chaos

# One run of every scenario below (about 90 s on 2 busy cores), in the
# fixture of the first test.
pytestmark = [pytest.mark.xdist_group("chaos-run"), pytest.mark.timeout(400)]

SEED = 11
SECONDS = 6
# power-loss-no (nothing fsynced: the whole backlog is lost, no bound to
# check) runs in `make chaos` only.
SCENARIOS = ("aof-truncate", "aof-bitflip", "disk-full", "disk-full-always", "power-loss",
             "power-loss-everysec")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("chaos-disk")
    proc = run_chaos(out, *SCENARIOS, seconds=SECONDS, seed=SEED, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def figures(out, name: str) -> dict:
    return json.loads((out / f"{name}-seed{SEED}" / "report.json").read_text())["figures"]


def events(out, name: str, type: str) -> list[dict]:
    history = read_history(out / f"{name}-seed{SEED}" / "history.jsonl")
    return [e for e in history.events if e["type"] == type]


def disk_events(out, name: str, what: str) -> list[dict]:
    return [e for e in events(out, name, "disk") if e.get("what") == what]


def started(out, name: str, fault: str) -> list[dict]:
    return [e for e in events(out, name, "fault")
            if e["phase"] == "start" and e["name"] == fault]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_disk_scenario_loses_nothing_it_promised_to_keep(out, name):
    f = figures(out, name)
    assert f["valid"] is True and f["lost"] == 0 and f["unexpected"] == 0, f["problems"]
    assert f["acknowledged"] > 50


def test_a_cut_aof_is_repaired_by_the_node_or_refused_naming_the_offset(out):
    """A cut inside a record leaves a torn tail: the node cuts it itself the
    first time (aof-load-truncated yes); started with aof-load-truncated no
    the second time, it refuses naming where the good data ends, and
    ``disquette-check-aof --fix --force`` lets it start. A cut on a record
    boundary (rare) just loads."""
    cuts = [c["detail"] for c in started(out, "aof-truncate", "aof-truncate")]
    assert [c["load_truncated"] for c in cuts] == [True, False]
    said = [e for e in events(out, "aof-truncate", "disk")
            if e["what"] not in ("fixed", "discarded")]
    assert [e["node"] for e in said] == [c["node"] for c in cuts]
    for cut, e in zip(cuts, said):
        if not cut["mid_record"]:
            assert e["what"] == "loaded"
        elif cut["load_truncated"]:
            assert e["what"] == "repaired" and FILE_HEADER_SIZE <= e["offset"] < cut["cut"]
        else:
            assert e["what"] == "refused" and FILE_HEADER_SIZE <= e["offset"] < cut["cut"]
            assert "disque.aof" in e["message"]
            assert [f["status"] for f in disk_events(out, "aof-truncate", "fixed")] == [0]


def test_a_flipped_bit_is_refused_naming_the_file_and_the_offset(out):
    flips = started(out, "aof-bitflip", "aof-bitflip")
    refused = disk_events(out, "aof-bitflip", "refused")
    assert len(flips) == 1 and "duplicated" in flips[0]["detail"]
    assert [r["offset"] for r in refused] == [f["detail"]["expected_offset"] for f in flips]
    assert all("disque.aof" in r["message"] for r in refused)
    assert [e["status"] for e in disk_events(out, "aof-bitflip", "fixed")] == [0]


@pytest.mark.parametrize("name", ["aof-truncate", "aof-bitflip"])
def test_each_damage_records_the_jobs_its_file_lost(out, name):
    """What the checker names for a lost job (lost_where): per damaged
    file, the ids of the jobs it held that the damaged file no longer gives
    back (job ids, as the history writes them)."""
    faults = [f["fault"] for f in started(out, name, name)]
    cut = disk_events(out, name, "discarded")
    assert [d["fault"] for d in cut] == faults
    for d in cut:
        assert d["count"] == len(d["jobs"])
        assert all(len(j) == 40 and j.startswith("D-") for j in d["jobs"]), d["jobs"][:3]


def test_a_full_disk_answers_misconf_under_everysec_then_writes_again(out):
    misconf = disk_events(out, "disk-full", "misconf")
    assert misconf and misconf[0]["reply"].startswith("MISCONF Errors writing to the AOF file")
    assert disk_events(out, "disk-full", "writable")


def test_a_full_disk_stops_the_node_under_always_before_it_acknowledges(out):
    exited = disk_events(out, "disk-full-always", "exited")
    assert exited and exited[0]["code"] == 1
    assert "appendfsync always" in exited[0]["message"]


@pytest.mark.parametrize("name, policy", [("power-loss", "always"),
                                          ("power-loss-everysec", "everysec")])
def test_a_power_loss_drops_unsynced_bytes_and_costs_what_the_policy_says(out, name, policy):
    dropped = disk_events(out, name, "dropped")
    assert len(dropped) == 3
    [loss] = figures(out, name)["power_loss"]
    assert loss["policy"] == policy
    if policy == "always":
        assert loss["lost"] == 0            # every acknowledged job was fsynced
        return
    assert sum(d["dropped"] for d in dropped) > 0
    assert loss["lost"] == loss["excused"] and loss["window_s"] <= 2.0


# -- the checker's power-loss figures, on crafted histories -------------------------
def power_cut_history(tmp_path, policy: str, tolerates):
    """Jobs acked 3 s, 1.5 s and 0.5 s before a power cut at t=10, never
    delivered; one acked after the power came back, delivered."""
    run = Run(tmp_path / f"{policy}.jsonl")
    lost = [run.add(t)[1] for t in (7.0, 8.5, 9.5)]
    fault = run.at(10.0).w.fault_started("power-loss", policy=policy, tolerates_s=tolerates)
    run.at(11.0).w.fault_stopped(fault)
    run.job(12.0)
    return check(read_history(run.finish(14.0))), lost


def test_the_checker_excuses_only_the_loss_a_policy_allows(tmp_path):
    always, lost = power_cut_history(tmp_path, "always", 0.0)
    assert not always.valid and always.lost == 3
    assert always.power_loss[0]["lost"] == 3 and always.power_loss[0]["excused"] == 0
    everysec, lost = power_cut_history(tmp_path, "everysec", 2.0)
    assert not everysec.valid and everysec.examples["lost"] == lost[:1]   # 3 s: beyond it
    [p] = everysec.power_loss
    assert (p["lost"], p["excused"], p["window_s"]) == (3, 2, 2.99)     # replied at 7.01
    no, _ = power_cut_history(tmp_path, "no", None)
    assert no.valid and no.lost == 0 and no.power_loss[0]["excused"] == 3
    assert "appendfsync no): 3 of 3 acknowledged adds lost" in power_loss_lines(no)


# -- what a damaged file lost, on a crafted file -------------------------------------
def test_live_jobs_reads_what_a_node_loads_up_to_the_first_damage(tmp_path):
    """chaos.disk.live_jobs (the ``discarded`` events): jobs written and not
    acked or deleted later, read as far as the file is whole."""
    ids = [f"D-00000000-job{i:021d}-0000".encode() for i in range(4)]
    jobs = [Job(jid, b"q", b"body", ACTIVE, 2, 10**13, 1, 0, 5) for jid in ids]
    path = tmp_path / "disque.aof"
    head = file_header() + fmt.encode_jobs(jobs[:3]) + fmt.encode_ids(REC_ACK, [ids[0]])
    path.write_bytes(head + fmt.encode_jobs(jobs[3:]))
    assert live_jobs(path) == {jid.decode() for jid in ids[1:]}
    flip_bit(path, (len(head) + REC_HEADER_SIZE + 2) * 8)   # the last job's record damaged
    assert live_jobs(path) == {ids[1].decode(), ids[2].decode()}


def test_the_operators_fix_says_how_many_bytes_it_discards(tmp_path, monkeypatch, capsys):
    """``disquette-check-aof --fix --force`` on a file damaged early names
    the bytes it cuts off: the rest of the file, not of the chunk it was
    reading when it found the damage (the aof-bitflip runs reported whole
    MiB as the file's size)."""
    monkeypatch.setattr(check_aof, "CHUNK", 64)     # files of MiB, in small
    jobs = [Job(f"D-00000000-job{i:021d}-0000".encode(), b"q", b"body", ACTIVE, 2, 10**13, 1,
                0, 5) for i in range(40)]
    records = [fmt.encode_jobs([j]) for j in jobs]
    path = tmp_path / "disque.aof"
    path.write_bytes(file_header() + b"".join(records))
    size = path.stat().st_size
    damaged = FILE_HEADER_SIZE + len(records[0])
    flip_bit(path, (damaged + REC_HEADER_SIZE + 2) * 8)
    assert check_aof.main([str(path), "--fix", "--force"]) == 0
    out = capsys.readouterr().out
    assert f"AOF {path}: {size} bytes" in out
    assert f"Truncated the AOF at byte offset {damaged} ({size - damaged} bytes discarded)" in out
