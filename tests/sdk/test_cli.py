"""The ``disquette`` console script as a subprocess: worker, signals, dead letters."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from disquette import Client
from tests.harness import WAIT_TIMEOUT

TASKS = '''
import os, time

OUT = os.environ["TASKS_OUT"]

def record(job):
    with open(OUT + ".started", "a") as f:
        f.write(job.id + "\\n")
    time.sleep(float(os.environ.get("TASKS_SLEEP", "0")))
    with open(OUT, "a") as f:
        f.write(job.id + "\\n")

def fail(job):
    raise ValueError("no luck with " + str(job.body))

async def arecord(job):
    with open(OUT, "a") as f:
        f.write(job.id + "\\n")
'''


def disquette_exe() -> list[str]:
    exe = shutil.which("disquette", path=str(Path(sys.executable).parent))
    assert exe, "the disquette console script is not installed (make venv)"
    return [exe]


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = WAIT_TIMEOUT) -> str:
    res = subprocess.run([*disquette_exe(), *args], cwd=cwd, capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, **(env or {})})
    assert res.returncode == 0, res.stderr
    return res.stdout


class WorkerProcess:
    def __init__(self, tmp: Path, node_addr: str, handler: str, *extra: str,
                 sleep: float = 0.0) -> None:
        (tmp / "tasks.py").write_text(TASKS)
        self.out = tmp / "done.txt"
        self.log = open(tmp / "worker.log", "w")
        env = {**os.environ, "TASKS_OUT": str(self.out), "TASKS_SLEEP": str(sleep)}
        self.proc = subprocess.Popen(
            [*disquette_exe(), "worker", f"tasks:{handler}", "--queue", "q", "--nodes",
             node_addr, "--poll-ms", "200", *extra],
            cwd=tmp, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def done(self) -> list[str]:
        return self.out.read_text().split() if self.out.exists() else []

    def started(self) -> list[str]:
        """Jobs whose ``record`` handler has begun."""
        path = self.out.with_name(self.out.name + ".started")
        return path.read_text().split() if path.exists() else []

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = WAIT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def workers():
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.kill()


def test_cli_worker_processes_and_stops_on_sigterm(dnode, tmp_path, workers, wait_until):
    c = Client(dnode.addr)
    ids = c.add_jobs([("q", {"n": i}) for i in range(100)])
    w = WorkerProcess(tmp_path, dnode.addr, "record", "--concurrency", "4")
    workers.append(w)
    wait_until(lambda: len(w.done()) == 100)
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert sorted(w.done()) == sorted(ids)
    wait_until(lambda: list(c.jscan(queue="q", busyloop=True)) == [])  # all acked
    assert "worker stopped" in (tmp_path / "worker.log").read_text()


def test_cli_graceful_shutdown_under_load_loses_nothing(dnode, tmp_path, workers, wait_until):
    """SIGTERM while jobs run: in-flight jobs finish (and are acked), nothing
    else was taken; a second worker then finishes every job."""
    c = Client(dnode.addr)
    ids = set(c.add_jobs([("q", i) for i in range(200)]))
    w = WorkerProcess(tmp_path, dnode.addr, "record", "--concurrency", "8", sleep=0.05)
    workers.append(w)
    wait_until(lambda: len(w.done()) >= 40)
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    first = set(w.done())
    assert list(c.jscan(queue="q", states=["active"], busyloop=True)) == []
    queued = set(c.jscan(queue="q", states=["queued"], busyloop=True))
    assert first | queued == ids and not first & queued
    w2 = WorkerProcess(tmp_path, dnode.addr, "arecord", "--concurrency", "16")
    workers.append(w2)
    wait_until(lambda: set(w2.done()) == ids)  # same output file
    w2.signal(signal.SIGINT)
    assert w2.wait() == 0


def test_cli_second_signal_exits_at_once(dnode, tmp_path, workers, wait_until):
    c = Client(dnode.addr)
    jid = c.add_job("q", "long", retry=1)
    w = WorkerProcess(tmp_path, dnode.addr, "record", "--grace-period", "60", sleep=60)
    workers.append(w)
    # The handler runs (the node says "active" as soon as GETJOB answered,
    # before the worker may have received the job).
    wait_until(lambda: jid in w.started())
    w.signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM again exits at once" in (tmp_path / "worker.log").read_text())
    w.signal(signal.SIGTERM)
    # At once: well before the 60 s its handler and grace period would take,
    # and with the handler unfinished.
    assert w.wait(WAIT_TIMEOUT / 2) == 130
    assert w.done() == []


def test_cli_dead_list_and_requeue(dnode, tmp_path, workers, wait_until):
    c = Client(dnode.addr)
    jid = c.add_job("q", {"to": "nobody"})
    w = WorkerProcess(tmp_path, dnode.addr, "fail", "--max-attempts", "2")
    workers.append(w)
    wait_until(lambda: c.qlen("q:dead") == 1)
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    lines = run_cli("dead", "list", "q", "--nodes", dnode.addr, cwd=tmp_path).splitlines()
    (entry,) = [json.loads(x) for x in lines]
    assert (entry["queue"], entry["id"], entry["attempts"]) == ("q", jid, 2)
    assert entry["error"] == "ValueError: no luck with {'to': 'nobody'}"
    assert entry["body"] == '{"to":"nobody"}'
    env = {"DISQUETTE_NODES": dnode.addr}  # --nodes from the environment
    out = run_cli("dead", "requeue", "q:dead", cwd=tmp_path, env=env)
    assert out.strip() == "requeued 1 jobs from q:dead"
    assert c.qlen("q:dead") == 0 and c.get_jobs("q", nohang=True)[0].body == {"to": "nobody"}
    assert run_cli("dead", "list", "q", cwd=tmp_path, env=env) == ""
