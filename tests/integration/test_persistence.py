"""Persistence with real processes (SPEC section 7, issue 5): kill -9 during a
stream of ADDJOBs, controlled restarts, run-time CONFIG SET appendonly, rewrites
while clients write, DEBUG LOADAOF, damaged files and the check tool.

(The cluster mass-restart check of issue 5 lives with the cluster tests.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from broker import aof_format as fmt
from broker.job import ACTIVE, Job, make_job_id
from tests.harness import WAIT_TIMEOUT, NodeStartError, RawConn, wait_until

CHECK_AOF = [sys.executable, "-m", "server.check_aof"]


def all_ids(n) -> set[bytes]:
    cursor, ids = n.client().execute_command("JSCAN", 0, "BUSYLOOP")
    assert cursor == b"0"
    return set(ids)


def pinfo(n) -> dict:
    return n.client().info("persistence")


def aof_path(n) -> Path:
    return n.dir / "disque.aof"


class Producer:
    """Threads streaming ADDJOBs, one connection each, until stopped or the
    node dies; ``acked`` maps every id the client received to when."""

    def __init__(self, n, threads: int = 4, prefix: str = "p") -> None:
        self.n = n
        self.acked: dict[bytes, float] = {}
        self.bodies: dict[bytes, bytes] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(f"{prefix}{t}",), daemon=True)
                        for t in range(threads)]

    def start(self) -> "Producer":
        for t in self.threads:
            t.start()
        return self

    def run(self, name: str) -> None:
        i = 0
        try:
            with RawConn(self.n.host, self.n.port) as r:
                while not self.stop.is_set():
                    body = f"{name}-{i}".encode()
                    reply = r.call("ADDJOB", "stream", body, 0, "RETRY", 30)
                    assert reply.startswith(b"+D-"), reply
                    jid = reply[1:-2]
                    with self.lock:
                        self.acked[jid] = time.monotonic()
                        self.bodies[jid] = body
                    i += 1
        except (TimeoutError, OSError):
            pass            # the node died

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(WAIT_TIMEOUT)


def kill_during_stream(n, at_least: int, seconds: float) -> tuple[Producer, float]:
    p = Producer(n).start()
    started = time.monotonic()
    wait_until(lambda: p.count() >= at_least and time.monotonic() - started >= seconds,
               message=lambda: f"{p.count()} acknowledged")
    killed_at = time.monotonic()
    n.kill()
    p.join()
    return p, killed_at


def test_kill9_with_appendfsync_always_loses_no_acknowledged_job(node_factory):
    n = node_factory(appendonly="yes", appendfsync="always")
    p, _ = kill_during_stream(n, 300, 0.5)
    n.start()
    present = all_ids(n)
    missing = set(p.acked) - present
    assert not missing, f"{len(missing)} acknowledged jobs lost"
    # At most the ADDJOBs in flight when the node died come back unacknowledged.
    assert len(present - set(p.acked)) <= len(p.threads)
    c = n.client()
    for jid in list(p.acked)[-50:]:             # nothing half-written is loaded
        assert c.execute_command("SHOW", jid)[-1] == p.bodies[jid]


def test_kill9_with_everysec_loses_at_most_about_a_second(node_factory):
    n = node_factory(appendonly="yes", appendfsync="everysec")
    p, killed_at = kill_during_stream(n, 600, 1.5)
    n.start()
    present = all_ids(n)
    missing = [t for jid, t in p.acked.items() if jid not in present]
    assert all(t > killed_at - 1.5 for t in missing), (
        f"{len(missing)} lost, the oldest {killed_at - min(missing):.2f} s before the kill")
    assert len(missing) < len(p.acked) / 2


def test_controlled_restart_keeps_queues_exactly(node_factory, tmp_path):
    d = tmp_path / "ctl"
    d.mkdir()
    (d / "disque.conf").write_text("# operator's file\nappendonly yes\n")
    n = node_factory(dir=d, cmd=[sys.executable, "-m", "server", "disque.conf"])
    c = n.client()
    for i in range(30):
        c.execute_command("ADDJOB", f"q{i % 3}", f"job-{i}", 0, "RETRY", 60)
    c.execute_command("ADDJOB", "q0", "at most once", 0, "RETRY", 0)
    working = [j[1] for j in c.execute_command("GETJOB", "COUNT", 2, "FROM", "q1")]
    done = c.execute_command("GETJOB", "FROM", "q2")[0][1]
    assert c.execute_command("ACKJOB", done) == 1

    def queues():
        return {q: [j[1] for j in c.execute_command("QPEEK", q, 100)] for q in ("q0", "q1", "q2")}

    before = queues()
    assert c.config_set("aof-enqueue-jobs-once", "yes")
    assert c.execute_command("CONFIG", "REWRITE")
    with n.raw() as r:
        r.send(b"SHUTDOWN REWRITE-AOF\r\n")
        assert r.read_until_closed() == b""
    assert n.wait_exit() == 0
    n.start()
    c = n.client()
    assert queues() == before
    for jid in working:                  # being worked on: still active, timer running
        show = c.execute_command("SHOW", jid)
        assert show[show.index(b"state") + 1] == b"active"
    assert c.execute_command("SHOW", done) is None
    assert c.config_get("aof-enqueue-jobs-once") == {"aof-enqueue-jobs-once": "no"}
    # Reset in the file too, so the next (crash) restart does not queue everything.
    assert "aof-enqueue-jobs-once no" in (d / "disque.conf").read_text()


def test_loaded_jobs_come_back_active_and_are_requeued_by_retry(node_factory):
    n = node_factory(appendonly="yes")
    c = n.client()
    jid = c.execute_command("ADDJOB", "q", "again", 0, "RETRY", 1)
    once = c.execute_command("ADDJOB", "q0", "at most once", 0, "RETRY", 0)
    n.restart()                                     # SIGTERM: flush, no rewrite
    c = n.client()
    assert c.execute_command("QLEN", "q") == 0
    assert c.execute_command("SHOW", jid)[5] == b"active"
    wait_until(lambda: c.execute_command("QLEN", "q") == 1)
    assert c.execute_command("GETJOB", "FROM", "q")[0][1] == jid
    # RETRY 0: never queued again by a load.
    assert c.execute_command("QLEN", "q0") == 0
    assert c.execute_command("SHOW", once)[5] == b"active"


def test_held_jobs_stay_held_across_restarts_and_releases_are_kept(node_factory):
    """(ext) ADDJOB ... HOLD: a kill -9 and a rewrite keep a held job held; a
    release (ENQUEUE) is logged, so a released job does not come back held."""
    n = node_factory(appendonly="yes", appendfsync="always")
    c = n.client()
    held = c.execute_command("ADDJOB", "hq", "held", 0, "HOLD", "RETRY", 1)
    released = c.execute_command("ADDJOB", "hq", "released", 0, "HOLD", "RETRY", 1)
    assert c.execute_command("ENQUEUE", released) == 1
    n.kill()
    n.start()
    c = n.client()
    assert c.execute_command("SHOW", held)[5] == b"held"
    assert c.execute_command("SHOW", released)[5] in (b"active", b"queued")
    # The released one is re-queued by its RETRY, as any loaded job; the held one never.
    got = c.execute_command("GETJOB", "TIMEOUT", int(WAIT_TIMEOUT * 1000), "FROM", "hq")
    assert got == [[b"hq", released, b"released"]]
    assert c.execute_command("ACKJOB", released) == 1
    assert c.execute_command("BGREWRITEAOF")
    wait_until(lambda: pinfo(n)["aof_rewrite_in_progress"] == 0)
    n.kill()
    n.start()
    c = n.client()
    assert c.execute_command("SHOW", held)[5] == b"held"
    assert c.execute_command("SHOW", released) is None
    assert c.execute_command("QLEN", "hq") == 0
    assert c.execute_command("ENQUEUE", held) == 1
    assert c.execute_command("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "hq") == [
        [b"hq", held, b"held", b"nacks", 0, b"additional-deliveries", 0]]


def test_config_set_appendonly_at_run_time(node_factory):
    n = node_factory()
    c = n.client()
    assert pinfo(n)["aof_enabled"] == 0
    before = {c.execute_command("ADDJOB", f"q{i % 5}", f"b{i}", 0) for i in range(300)}
    assert c.config_set("appendonly", "yes")
    wait_until(lambda: pinfo(n)["aof_state"] == "on")
    after = {c.execute_command("ADDJOB", "q", f"later{i}", 0) for i in range(50)}
    gone = sorted(before)[:10]
    assert c.execute_command("FASTACK", *gone) == 10
    n.kill()
    n.args += ["--appendonly", "yes"]
    n.start()
    assert all_ids(n) == (before | after) - set(gone)
    # And off again: nothing is logged any more.
    c = n.client()
    assert c.config_set("appendonly", "no")
    assert pinfo(n)["aof_enabled"] == 0
    late = c.execute_command("ADDJOB", "q", "not logged", 0)
    n.kill()
    n.start()
    assert late not in all_ids(n)


def test_bgrewriteaof_while_clients_keep_writing(node_factory):
    n = node_factory(appendonly="yes", auto_aof_rewrite_percentage=100)
    c = n.client()
    pipe = c.pipeline(transaction=False)
    for i in range(20000):
        pipe.execute_command("ADDJOB", f"q{i % 10}", f"preloaded-{i}", 0)
    ids = pipe.execute()
    assert c.execute_command("FASTACK", *ids[:10000]) == 10000
    size_before = pinfo(n)["aof_current_size"]

    p = Producer(n, threads=2).start()
    acker = n.client()
    wait_until(lambda: p.count() > 50)
    assert c.execute_command("BGREWRITEAOF") == b"Background append only file rewriting started"
    with pytest.raises(redis.ResponseError, match="already in progress"):
        for _ in range(3):
            c.execute_command("BGREWRITEAOF")
    # While it runs, jobs keep coming and going.
    deleted = 0
    while pinfo(n)["aof_rewrite_in_progress"] == 1:
        with p.lock:
            some = list(p.acked)[deleted:deleted + 20]
        if some:
            deleted += acker.execute_command("FASTACK", *some)
    wait_until(lambda: pinfo(n)["aof_last_bgrewrite_status"] == "ok"
               and pinfo(n)["aof_rewrite_in_progress"] == 0)
    more = p.count() + 200
    wait_until(lambda: p.count() >= more)     # writing on into the new file
    p.join()
    expected = all_ids(n)
    info = pinfo(n)
    assert info["aof_base_size"] < size_before and info["aof_last_rewrite_time_sec"] >= 0
    n.kill()
    n.start()
    assert all_ids(n) == expected
    assert not list(n.dir.glob("temp-*"))


def test_debug_loadaof(node_factory):
    n = node_factory(appendonly="yes")
    c = n.client()
    ids = {c.execute_command("ADDJOB", "q", f"b{i}", 0) for i in range(20)}
    assert c.execute_command("QLEN", "q") == 20
    assert c.execute_command("DEBUG", "LOADAOF") == b"OK"
    assert all_ids(n) == ids
    assert c.execute_command("QLEN", "q") == 0     # loaded jobs are active
    new = c.execute_command("ADDJOB", "q", "after", 0)
    assert c.execute_command("DEBUG", "LOADAOF") == b"OK"
    assert all_ids(n) == ids | {new}


def test_auto_rewrite_keeps_the_file_small(node_factory):
    n = node_factory(appendonly="yes", auto_aof_rewrite_min_size="64kb",
                     auto_aof_rewrite_percentage=100)
    c = n.client()
    body = "x" * 200
    for _ in range(8):
        pipe = c.pipeline(transaction=False)
        for i in range(300):
            pipe.execute_command("ADDJOB", "q", body, 0)
        c.execute_command("FASTACK", *pipe.execute())
    wait_until(lambda: pinfo(n)["aof_last_rewrite_time_sec"] >= 0)
    keep = c.execute_command("ADDJOB", "q", "kept", 0)
    written = 8 * 300 * len(body)       # bodies alone, never rewritten: > 470 KB

    def settled():
        # Every flush compares the size with the last rewrite's base; one that
        # crossed it while a rewrite was running is looked at again by the next.
        # A rewrite that ran in the middle of the batches kept the jobs live at
        # that moment (a big base): more writes bring the next one, whose base
        # holds the one job left.
        if pinfo(n)["aof_rewrite_in_progress"]:
            return None
        info = pinfo(n)
        if (info["aof_current_size"] <= max(64 * 1024, 2 * info["aof_base_size"])
                and info["aof_base_size"] < written / 4):
            return info
        pipe = c.pipeline(transaction=False)
        for _ in range(20):
            pipe.execute_command("ADDJOB", "scratch", body, 0)
        c.execute_command("FASTACK", *pipe.execute())
        return None

    info = wait_until(settled)
    assert info["aof_current_size"] < written / 2
    n.restart(kill=True)
    assert all_ids(n) == {keep}


def _torn_copy(n, extra: bytes = b"") -> tuple[int, int]:
    """Stop the node and append a torn record; returns (good size, torn size)."""
    n.terminate()
    path = aof_path(n)
    good = path.stat().st_size
    record = fmt.encode_record(b"D" + b"D-00000000-" + b"A" * 24 + b"-0000")
    with open(path, "ab") as f:
        f.write(record[:25] + extra)
    return good, path.stat().st_size


def test_torn_tail_refused_reported_fixed_or_truncated(node_factory):
    n = node_factory(appendonly="yes", aof_load_truncated="no")
    c = n.client()
    ids = {c.execute_command("ADDJOB", "q", f"b{i}", 0) for i in range(10)}
    good, _ = _torn_copy(n)
    with pytest.raises(NodeStartError):
        n.start()
    assert f"torn last record at byte offset {good}" in n.log()
    # The check tool says so, and --fix truncates.
    path = str(aof_path(n))
    res = subprocess.run([*CHECK_AOF, path], capture_output=True, text=True)
    assert res.returncode == 1 and f"byte offset {good}" in res.stdout, res.stdout
    res = subprocess.run([*CHECK_AOF, path, "--fix"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
    assert os.path.getsize(path) == good
    n.start()
    assert all_ids(n) == ids
    # With aof-load-truncated yes (the default) the node truncates it itself.
    _torn_copy(n)
    n.args = [a for a in n.args if a not in ("--aof-load-truncated", "no")]
    n.start()
    assert all_ids(n) == ids
    assert os.path.getsize(path) == good
    assert "Truncating it" in n.log()


def test_corruption_before_the_end_refuses_to_start_naming_the_offset(node_factory):
    n = node_factory(appendonly="yes")
    c = n.client()
    for i in range(5):
        c.execute_command("ADDJOB", "q", f"b{i}", 0)
    n.terminate()
    path = aof_path(n)
    data = bytearray(path.read_bytes())
    data[fmt.FILE_HEADER_SIZE + fmt.REC_HEADER_SIZE + 3] ^= 0x10   # first record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(NodeStartError):
        n.start()
    assert f"record checksum mismatch at byte offset {fmt.FILE_HEADER_SIZE}" in n.log()
    assert path.read_bytes() == bytes(data)        # left as it was
    res = subprocess.run([*CHECK_AOF, str(path)], capture_output=True, text=True)
    assert res.returncode == 2 and f"byte offset {fmt.FILE_HEADER_SIZE}" in res.stdout


def test_answers_loading_then_pong_while_a_big_aof_loads(node_factory, tmp_path):
    n = node_factory(appendonly="yes", start=False)
    now = int(time.time() * 1000)
    count = 150_000
    jobs = [Job(make_job_id("ab" * 20, i, 86400, 30), b"q", b"x" * 50, ACTIVE, 1,
                now + 86_400_000, now * 1_000_000 + i, 0, 30) for i in range(count)]
    n.dir.mkdir(parents=True, exist_ok=True)
    aof_path(n).write_bytes(fmt.file_header() + fmt.encode_jobs(jobs))
    del jobs

    replies = []

    def probe():        # PINGs from another thread while the main one starts the node
        deadline = time.monotonic() + WAIT_TIMEOUT
        while time.monotonic() < deadline:
            try:
                # Each PING is answered, however slow the machine: the load
                # yields to the event loop (a load that held it would show
                # no -LOADING at all, only the PONG after it).
                with RawConn(n.host, n.port) as r:
                    reply = r.request(b"PING\r\n")
            except ConnectionRefusedError:
                time.sleep(0.01)
                continue
            replies.append(reply)
            if not reply.startswith(b"-LOADING"):
                return
            time.sleep(0.01)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    n.start()       # (not from a thread: the node dies with the thread that spawned it)
    prober.join(WAIT_TIMEOUT)
    assert replies[-1] == b"+PONG\r\n", replies[-3:]
    assert replies[0].startswith(b"-LOADING"), replies[:3]
    assert all(r.startswith(b"-LOADING") for r in replies[:-1]), set(replies)
    assert n.client().info("jobs")["registered_jobs"] == count


def test_misconf_while_the_aof_cannot_be_written(node_factory):
    """Disk full (here: a file size limit, EFBIG): no new jobs are accepted with
    -MISCONF until the log can be written again; nothing acknowledged is lost."""
    # Soft limit only, so that it can be raised again while the node runs.
    limited = ["prlimit", "--fsize=300000:unlimited", sys.executable, "-m", "server"]
    n = node_factory(cmd=limited, appendonly="yes", appendfsync="everysec")
    c = n.client()
    body = b"x" * 20_000
    accepted = []
    misconf = None
    for _ in range(60):
        try:
            accepted.append(c.execute_command("ADDJOB", "q", body, 0))
        except redis.ResponseError as e:
            misconf = str(e)
            break
    assert misconf is not None and misconf.startswith("MISCONF Errors writing to the AOF file")
    assert "too large" in misconf.lower()
    assert pinfo(n)["aof_last_write_status"] == "err"
    assert c.execute_command("QLEN", "q") == len(accepted)       # reads still work
    # Room again: the once-a-second retry writes what was buffered.
    subprocess.run(["prlimit", "--pid", str(n.pid), "--fsize=unlimited"], check=True)
    wait_until(lambda: pinfo(n)["aof_last_write_status"] == "ok")
    accepted.append(c.execute_command("ADDJOB", "q", body, 0))
    n.kill()        # everysec wrote every record before its reply went out
    n.start()
    assert all_ids(n) >= set(accepted)
