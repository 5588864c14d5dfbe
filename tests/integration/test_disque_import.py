"""The way in from Disque (issue 37): ``disquette-check-aof --import-disque``
against AOFs a real Disque 1.0-rc1 wrote (tests/data/disque/, made by its
make_fixtures.py), and a node started on the result, held job for job to what
Disque itself showed after loading the same files (nN-loaded.json).

The nodes run under libfaketime at the time Disque was asked (the fixtures'
jobs have TTLs of minutes to a day), their monotonic clock left alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.clock import libfaketime
from protocol import disque_aof
from tests.harness import NodeStartError

DATA = Path(__file__).resolve().parents[1] / "data" / "disque"
CHECK_AOF = [sys.executable, "-m", "server.check_aof"]
FIXTURES = ("n1", "n2", "n3")
# How far our numbers may be from Disque's: the TTL in seconds (the two
# reads were not at the same instant), requeue times in ms (both jitter
# theirs: Disque by a random error, we by +-250 ms; and the node starts later).
TTL_SLACK = 2
REQUEUE_SLACK = 1500


def import_disque(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK_AOF, "--import-disque", *map(str, args)],
                          capture_output=True, text=True)


def oracle(name: str) -> dict:
    return json.loads((DATA / f"{name}-loaded.json").read_text())


def at_oracle_time(name: str) -> dict[str, str]:
    """The environment of a node whose wall clock reads the time Disque's
    answers were taken (a second later)."""
    offset = oracle(name)["time"] + 1 - time.time()
    return {"LD_PRELOAD": libfaketime(), "FAKETIME": f"{offset:+.3f}s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def held(c) -> dict[str, dict]:
    """JSCAN ... REPLY all, as make_fixtures.py reads Disque's, by id."""
    cursor, out = b"0", {}
    while True:
        cursor, entries = c.execute_command("JSCAN", cursor, "COUNT", 1000, "REPLY", "all")
        for e in entries:
            f = dict(zip(e[::2], e[1::2]))
            job = {k.decode(): (v.decode("latin-1") if isinstance(v, bytes) else
                                [x.decode() for x in v] if isinstance(v, list) else v)
                   for k, v in f.items()}
            out[job["id"]] = job
        if cursor in (b"0", 0):
            return out


def imported_node(node_factory, tmp_path, name: str, with_nodes: bool = True):
    d = tmp_path / name
    d.mkdir()
    args = [DATA / f"{name}.aof", "--out", d / "disque.aof"]
    if with_nodes:
        args += ["--disque-nodes", DATA / f"{name}-nodes.conf"]
    res = import_disque(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    return node_factory(dir=d, appendonly="yes", env=at_oracle_time(name)), res.stdout


@pytest.mark.parametrize("name", FIXTURES)
def test_every_job_disque_held_comes_back_as_disque_showed_it(node_factory, tmp_path, name):
    n, report = imported_node(node_factory, tmp_path, name)
    want = {j["id"]: j for j in oracle(name)["jobs"]}
    assert f"{len(want)} jobs" in report
    c = n.client(protocol=2)
    # The node kept Disque's node id: its own copy is among the holders.
    my_id = next(line.split()[0] for line in (DATA / f"{name}-nodes.conf").read_text()
                 .splitlines() if "myself" in line)
    assert c.execute_command("CLUSTER", "MYID").decode() == my_id
    got = held(c)
    assert sorted(got) == sorted(want)
    for jid, w in want.items():
        g = got[jid]
        for k in ("queue", "state", "repl", "ctime", "delay", "retry", "nacks",
                  "additional-deliveries", "nodes-confirmed", "body"):
            assert g[k] == w[k], (jid, k, g[k], w[k])
        assert sorted(g["nodes-delivered"]) == sorted(w["nodes-delivered"]), jid
        assert abs(g["ttl"] - w["ttl"]) <= TTL_SLACK, (jid, g["ttl"], w["ttl"])
        if w["delay"]:
            # Disque forgets a RETRY 0 job's DELAY when it loads it (never
            # queued again); ours queues it when the delay ends.
            assert w["retry"] == 0 and w["next-requeue-within"] is None
            ends = w["ctime"] // 1_000_000 + w["delay"] * 1000 - (oracle(name)["time"] + 1) * 1000
            assert abs(g["next-requeue-within"] - ends) <= REQUEUE_SLACK, jid
        elif w["next-requeue-within"] is None:
            assert g["next-requeue-within"] is None, jid
        else:
            for k in ("next-requeue-within", "next-awake-within"):
                assert abs(g[k] - w[k]) <= REQUEUE_SLACK, (jid, k, g[k], w[k])
        # SHOW tells the same as JSCAN.
        show = c.execute_command("SHOW", jid)
        assert dict(zip(show[::2], show[1::2]))[b"body"] == w["body"].encode("latin-1")
    # Loaded jobs are active, as Disque's are: no queue holds them yet.
    for q in {w["queue"] for w in want.values()}:
        assert c.execute_command("QLEN", q) == 0
    # And they are jobs like any other: queued, delivered, acked.
    jid = sorted(want)[0]
    assert c.execute_command("ENQUEUE", jid) == 1
    q = want[jid]["queue"]
    assert c.execute_command("QSTAT", q)[3] == 1        # len
    assert c.execute_command("GETJOB", "NOHANG", "FROM", q)[0][1].decode() == jid
    assert c.execute_command("FASTACK", jid) == 1


def test_without_disque_nodes_the_node_holds_every_job_alone(node_factory, tmp_path):
    n, report = imported_node(node_factory, tmp_path, "n1", with_nodes=False)
    assert "new id" in report
    c = n.client(protocol=2)
    my_id = c.execute_command("CLUSTER", "MYID").decode()
    got = held(c)
    assert sorted(got) == sorted(j["id"] for j in oracle("n1")["jobs"])
    assert all(j["nodes-delivered"] == [my_id] for j in got.values())


def test_a_truncated_or_damaged_disque_aof_is_refused_with_its_offset(tmp_path):
    data = (DATA / "n1.aof").read_bytes()
    offsets = [off for off, _, _ in disque_aof.read(data)]
    last = offsets[-1]
    cut = tmp_path / "cut.aof"
    cut.write_bytes(data[:last + 30])
    out = tmp_path / "out.aof"
    res = import_disque(cut, "--out", out)
    assert res.returncode == 1, res.stdout
    assert f"truncated: the file ends in the middle of a command at byte offset {last}" \
        in res.stdout
    assert not out.exists()
    # A byte changed inside the third command's job: the job's fields no
    # longer add up (its length prefix says more than there is).
    bad = bytearray(data)
    third = offsets[2]
    bad[third + len(b"*2\r\n$7\r\nLOADJOB\r\n$") + 5] ^= 0x01     # a digit of its $<len>
    damaged = tmp_path / "damaged.aof"
    damaged.write_bytes(bytes(bad))
    res = import_disque(damaged, "--out", out)
    assert res.returncode == 2, res.stdout
    assert "damaged: not a Disque AOF command" in res.stdout
    assert f"at byte offset {third}" in res.stdout
    assert not out.exists()


def test_an_existing_output_is_never_overwritten(tmp_path):
    out = tmp_path / "disque.aof"
    out.write_bytes(b"precious")
    res = import_disque(DATA / "n2.aof", "--out", out)
    assert res.returncode == 3 and "exists" in res.stderr
    assert out.read_bytes() == b"precious"


def test_a_node_started_on_a_disque_aof_names_the_import(node_factory, tmp_path):
    d = tmp_path / "n"
    d.mkdir()
    shutil.copy(DATA / "n1.aof", d / "disque.aof")
    with pytest.raises(NodeStartError):
        node_factory(dir=d, appendonly="yes")
    log = (d / "node.log").read_text()
    assert "is a Disque AOF: import it with disquette-check-aof --import-disque" in log
    # The check tool says the same.
    res = subprocess.run([*CHECK_AOF, str(d / "disque.aof")], capture_output=True, text=True)
    assert res.returncode == 2 and "--import-disque" in res.stdout
