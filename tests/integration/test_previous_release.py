"""This release beside the previous one (chaos/previous_release.py: its
source from the repository's history, its pure build in a venv of its own),
as real processes: a mixed cluster replicates both ways, the previous
release's AOF loads here, and a node that speaks only a newer bus version is
refused with one log line; a downgrade is refused by the file's version until
``disquette-check-aof --to-version 2`` rewrites it. (The rolling upgrade under load is the chaos
scenario's: tests/chaos/test_rolling_upgrade.py.)"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import msgpack
import pytest
import redis

from chaos.previous_release import Unavailable, previous_release
from disquette import aof_codec
from disquette.testing import NodeStartError
from tests.harness import REPO_ROOT, join, wait_until

pytestmark = pytest.mark.xdist_group("previous-release")


@pytest.fixture(scope="module")
def previous():
    try:
        return previous_release()
    except Unavailable as e:
        pytest.skip(f"the previous release is not available here: {e}")


def _old(node_factory, previous, *args, **directives):
    return node_factory(*args, cmd=previous.server_command(), env=previous.env(),
                        **directives)


def _client(node) -> redis.Redis:
    return redis.Redis(node.host, node.port, decode_responses=True, socket_timeout=60)


def _malformed(node) -> int:
    return _client(node).info("stats")["malformed_bus_messages"]


def _add(node, body: str, replicate: int) -> str:
    return _client(node).execute_command(
        "ADDJOB", "q", body, 5000, "REPLICATE", replicate, "RETRY", 60)


def test_a_mixed_cluster_replicates_both_ways(node_factory, previous):
    old = _old(node_factory, previous)
    new = [node_factory(), node_factory()]
    nodes = [old, *new]
    join(nodes)
    assert _client(old).info("server")["compiled_core"] == "no"
    ids = [_add(n, f"from {n.port}", 3) for n in nodes]
    for jid in ids:
        for n in nodes:      # every node holds every copy
            assert _client(n).execute_command("SHOW", jid) is not None
    for n in nodes:
        c = _client(n)
        (job,) = c.execute_command("GETJOB", "NOHANG", "FROM", "q")
        assert c.execute_command("ACKJOB", job[1]) == 1
    wait_until(lambda: all(_client(n).execute_command("JSCAN", 0, "COUNT", 100)[1] == []
                           for n in nodes), message="acked jobs collected everywhere")
    for n in nodes:
        assert _malformed(n) == 0
        assert "protocol error" not in n.log() and "refused" not in n.log()


def test_the_previous_releases_aof_loads_here(node_factory, previous, tmp_path):
    old = _old(node_factory, previous, dir=tmp_path / "n", appendonly="yes",
               appendfsync="always")
    c = _client(old)
    delivered = _add(old, "delivered", 1)
    queued = _add(old, "queued", 1)
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == delivered
    acked = c.execute_command("ADDJOB", "q2", "acked", 0)
    c.execute_command("ACKJOB", acked)
    assert _shown(c, delivered)["state"] == "active"
    # What the previous release makes of its own file, restarted on it...
    old.restart()
    c = _client(old)
    before = {jid: _shown(c, jid) for jid in (delivered, queued, acked)}
    assert before[delivered] and before[queued] and before[acked] is None
    old.stop()
    # ...is what this one makes of it.
    new = node_factory(dir=tmp_path / "n", port=old.port, appendonly="yes",
                       appendfsync="always")
    c = _client(new)
    for jid, shown in before.items():
        assert _shown(c, jid) == shown


def _shown(c: redis.Redis, jid: str) -> dict | None:
    """SHOW's fields, but those counted from now."""
    shown = c.execute_command("SHOW", jid)
    if shown is None:
        return None
    fields = dict(zip(shown[::2], shown[1::2]))
    return {k: v for k, v in fields.items()
            if k not in ("ttl", "next-requeue-within", "next-awake-within")}


def _frame(body: list) -> bytes:
    data = msgpack.packb(body, use_bin_type=True)
    return struct.pack(">I", len(data)) + data


def test_a_node_speaking_only_a_newer_bus_version_is_refused_with_one_line(node_factory):
    node = node_factory()
    newer = "f" * 40
    # A node of a release that speaks only version 3 (its flags say 3 to 3),
    # dialling again and again as a peer does.
    flags = (3 | 3 << 8) << 8
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", node.bus_port)) as s:
            s.sendall(_frame([3, 1, newer, "127.0.0.1", 1, 2, flags, [], None]))
            s.settimeout(10)
            assert s.recv(100) == b""                # closed by the node
    line = (f"Bus link with 127.0.0.1 refused: node {newer} speaks bus protocol version 3, "
            "this node versions 1 to 2; upgrade this node to a release that speaks it")
    wait_until(lambda: line in node.log(), message=node.log_tail)
    assert node.log().count("refused") == 1
    assert _malformed(node) == 0


def test_a_downgrade_refused_by_the_file_version_then_done_by_check_aof(
        node_factory, previous, tmp_path):
    new = node_factory(dir=tmp_path / "n", appendonly="yes", appendfsync="always")
    c = _client(new)
    pipe = c.pipeline(transaction=False)      # one turn of 40 adds: a column batch
    for i in range(40):
        pipe.execute_command("ADDJOB", f"q{i % 3}", f"batch {i}", 0, "RETRY", 60)
    ids = pipe.execute()
    ids.append(c.execute_command("ADDJOB", "k", "keyed", 0, "IDEMPOTENCY", "key-1"))
    c.execute_command("GETJOB", "FROM", "q0")
    c.execute_command("ACKJOB", ids[3])
    new.restart()                              # as this release loads it
    c = _client(new)
    before = {jid: _shown(c, jid) for jid in ids}
    new.stop()
    aof = tmp_path / "n" / "disque.aof"
    scanner = aof_codec.Scanner()
    kinds = {payload[0] for _, payload in scanner.feed(aof.read_bytes())}
    assert scanner.version == 3 and {aof_codec.REC_JOBS, aof_codec.REC_JOB_ROWS} <= kinds
    old = _old(node_factory, previous, dir=tmp_path / "n", port=new.port, appendonly="yes",
               start=False)
    with pytest.raises(NodeStartError):
        old.start()
    assert "AOF format version 3 is not supported" in old.log()
    fixed = subprocess.run([sys.executable, "-m", "server.check_aof", str(aof),
                            "--to-version", "2"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Rewrote the AOF as format version 2" in fixed.stdout
    old.start()
    c = _client(old)
    assert {jid: _shown(c, jid) for jid in ids} == before
