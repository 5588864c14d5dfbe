"""An App's workers as a user runs them: ``disquette worker tasks:app``
processes on a real 3-node cluster, killed with SIGKILL mid-run: periodic
jobs (no tick missed, none doubled), max_running across workers, a backoff
through a crash; ``--exec`` and ``--processes``; a result across nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from disquette import App, Client
from tests.conftest import _FACTORIES
from tests.harness import WAIT_TIMEOUT, NodeFactory, NodeProcess, module_factory
from tests.sdk.cli_worker import cli_workers as workers  # noqa: F401 (a fixture: killed at the end)
from tests.sdk.test_cli import disquette_exe

pytestmark = pytest.mark.xdist_group("sdk_app_cluster")

TASKS = '''
import os, time
import disquette

OUT = os.environ["TASKS_OUT"]
app = disquette.App(disquette.Client(os.environ["TASKS_NODES"]))

def note(name, line):
    with open(OUT + "." + name, "a") as f:   # one write per line: O_APPEND keeps lines whole
        f.write(line + "\\n")

@app.periodic(every=0.5, retry=1)
def tick():
    note("ticks", f"{disquette.current_tick().timestamp()} {disquette.current_job().id}")

@app.job("limited", max_running=3, retry=2)
def limited(n):
    start = time.time()
    note("starts", f"{os.getpid()} {n} {start}")
    time.sleep(0.3)
    note("runs", f"{os.getpid()} {n} {start} {time.time()}")

@app.job("flaky", retry=1, backoff=disquette.Backoff(base=60, cap=60, jitter=0))
def flaky():
    job = disquette.current_job()
    note("flaky", f"{os.getpid()} {job.id} {job.attempts} {job.nacks} {job.additional_deliveries}")
    if job.attempts == 1:
        raise ValueError("first try fails")
'''


class AppWorker:
    """``disquette worker tasks:app`` (its client on ``node``), output in ``tmp``."""

    def __init__(self, tmp: Path, node: NodeProcess, *extra: str,
                 handler: str | None = "tasks:app") -> None:
        (tmp / "tasks.py").write_text(TASKS)
        self.tmp = tmp
        self.log = open(tmp / f"worker-{time.monotonic_ns()}.log", "w")
        env = {**os.environ, "TASKS_OUT": str(tmp / "out"), "TASKS_NODES": node.addr}
        env.pop("DISQUETTE_NODES", None)
        self.proc = subprocess.Popen(
            [*disquette_exe(), "worker", *([handler] if handler else []), "--poll-ms", "200",
             *extra], cwd=tmp, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = WAIT_TIMEOUT) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


def lines(tmp: Path, name: str) -> list[list[str]]:
    path = tmp / f"out.{name}"
    return [x.split() for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def app_factory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "sdkapp")


@pytest.fixture(scope="module")
def app_cluster(app_factory: NodeFactory) -> list[NodeProcess]:
    return app_factory.cluster(3, cluster_node_timeout=1500)


@pytest.fixture
def trio(request, app_factory, app_cluster) -> list[NodeProcess]:
    request.node.stash.setdefault(_FACTORIES, []).append(app_factory)
    for n in app_cluster:
        n.client().execute_command("DEBUG", "FLUSHALL")
    return app_cluster


def test_periodic_ticks_once_each_while_workers_die(trio, tmp_path, workers, wait_until):
    """Three workers on three nodes each schedule every tick; two are killed
    (SIGKILL) midway: every tick from the first to the last ran, each as one
    job (a tick handled twice by at-least-once is still one job id)."""
    workers += [AppWorker(tmp_path, n, "--queue", "periodic:tasks.tick") for n in trio]
    wait_until(lambda: len(lines(tmp_path, "ticks")) >= 4)
    workers[0].kill()
    workers[1].kill()
    until = time.time() + 2.5

    def ticks() -> dict[float, set[str]]:
        out: dict[float, set[str]] = {}
        for t, job_id in lines(tmp_path, "ticks"):
            out.setdefault(float(t), set()).add(job_id)
        return out

    def every_tick_until(t: float) -> bool:
        times = sorted(ticks())
        return times[-1] >= t and [round((b - a) * 2) for a, b in zip(times, times[1:])] == [
            1] * (len(times) - 1)

    wait_until(lambda: every_tick_until(until), message=lambda: str(sorted(ticks())))
    assert workers[2].stop() == 0
    assert every_tick_until(until) and all(len(ids) == 1 for ids in ticks().values()), ticks()


def started(worker: AppWorker, wait_until) -> None:
    wait_until(lambda: "worker started" in Path(worker.log.name).read_text())


def test_max_running_holds_across_workers_and_a_killed_ones_slot_returns(
        trio, tmp_path, workers, wait_until):
    """Four workers (two nodes each) and a limit of three: never more than
    three handlers at once, counted from their own start and end times; a
    worker killed while it holds a slot gives it back by the slot's RETRY."""
    workers += [AppWorker(tmp_path, trio[i % 2], "--queue", "limited", "--concurrency", "4")
                for i in range(4)]
    for w in workers:
        started(w, wait_until)
    n_jobs = 12  # all taken at once: none waits in a queue past its RETRY
    Client(trio[0].addr).add_jobs([("limited", [[i]]) for i in range(n_jobs)], retry=2)
    victim = workers[0]

    def runs_of(kind: str) -> list[list[str]]:
        return [r for r in lines(tmp_path, kind) if int(r[0]) == victim.proc.pid]

    wait_until(lambda: len(runs_of("starts")) > len(runs_of("runs")))  # it holds a slot
    victim.kill()
    killed_at = time.time()

    def finished() -> bool:
        ended = {(pid, n) for pid, n, _, _ in lines(tmp_path, "runs")}
        return {int(n) for _, n in ended} == set(range(n_jobs)) and all(
            (pid, n) in ended for pid, n, *_ in lines(tmp_path, "starts")
            if int(pid) != victim.proc.pid)

    wait_until(finished)
    ends = {(pid, n): float(end) for pid, n, _, end in lines(tmp_path, "runs")}
    events = []
    for pid, n, start, *_ in lines(tmp_path, "starts"):
        # A handler the kill cut short wrote no end: it ran until the kill.
        end = ends.get((pid, n), killed_at if int(pid) == victim.proc.pid else None)
        assert end is not None, (pid, n)
        events += [(float(start), 1), (end, -1)]
    running = peak = 0
    for _, step in sorted(events):
        running += step
        peak = max(peak, running)
    assert peak == 3, sorted(lines(tmp_path, "starts"))

    def queued_slots() -> set[str]:
        return {i for n in trio for i in Client(n.addr).jscan(
            queue="disquette:slots:limited", states=["queued"], busyloop=True)}

    wait_until(lambda: len(queued_slots()) == 3)  # the victim's came back too


def test_a_backoff_survives_its_workers_crash_as_one_job(trio, tmp_path, workers, wait_until):
    """A failed job in a 60 s backoff is held by its worker (WORKING); killed,
    the worker never NACKs it: the nodes queue it again after its RETRY (1 s),
    the same job, whose attempts count the failure and the lost delivery."""
    c = Client(trio[0].addr)
    first = AppWorker(tmp_path, trio[0], "--queue", "flaky")
    workers.append(first)
    started(first, wait_until)  # (a job queued past its RETRY may come twice)
    jid = c.add_job("flaky", [], retry=1)
    wait_until(lambda: len(lines(tmp_path, "flaky")) == 1)
    time.sleep(1.5)  # past RETRY: the worker's WORKING keeps it
    assert c.show(jid)["state"] == "active" and len(lines(tmp_path, "flaky")) == 1
    first.kill()
    workers.append(AppWorker(tmp_path, trio[1], "--queue", "flaky"))
    wait_until(lambda: len(lines(tmp_path, "flaky")) == 2)
    (_, id1, attempts1, nacks1, lost1), (_, id2, attempts2, nacks2, lost2) = lines(tmp_path,
                                                                                   "flaky")
    assert id1 == id2 == jid
    assert (attempts1, nacks1, lost1) == ("1", "0", "0")
    assert (attempts2, nacks2, lost2) == ("2", "0", "1")
    wait_until(lambda: all(Client(n.addr).show(jid) is None for n in trio))


def test_exec_runs_a_command_per_job(trio, tmp_path, workers, wait_until):
    """Body on stdin, the job in the environment; exit status 3 fails the
    first attempt (NACK), 0 acks the second."""
    c = Client(trio[0].addr)
    ids = c.add_jobs([("shell", b"one"), ("shell", b"two")])
    cmd = ('body=$(cat); echo "$DISQUETTE_JOB_ID $DISQUETTE_QUEUE" > "out-$body-$DISQUETTE_ATTEMPT"; '
           'test "$DISQUETTE_ATTEMPT" -ge 2 || { echo nope >&2; exit 3; }')
    workers.append(AppWorker(tmp_path, trio[0], "--exec", cmd, "--queue", "shell",
                             "--nodes", trio[0].addr, handler=None))
    wait_until(lambda: all(c.show(i) is None for i in ids))
    for jid, body in zip(ids, ("one", "two")):
        for attempt in (1, 2):
            assert (tmp_path / f"out-{body}-{attempt}").read_text() == f"{jid} shell\n"
    assert workers[0].stop() == 0
    log = next(tmp_path.glob("worker-*.log")).read_text()
    assert "exited with status 3: nope" in log


def test_processes_share_the_work_and_stop_together(trio, tmp_path, workers, wait_until):
    c = Client(trio[0].addr)
    sup = AppWorker(tmp_path, trio[0], "--queue", "limited", "--processes", "2",
                    "--concurrency", "2")
    workers.append(sup)
    c.add_jobs([("limited", [[i]]) for i in range(12)])
    wait_until(lambda: len(lines(tmp_path, "runs")) == 12)
    pids = {int(r[0]) for r in lines(tmp_path, "runs")}
    assert len(pids) == 2 and sup.proc.pid not in pids
    assert sup.stop() == 0
    for pid in pids:  # the children are gone too
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"))


def test_a_result_crosses_nodes_to_its_producer(trio):
    """The worker on another node than the producer adds the result on the
    producer's node: its blocking GETJOB gets it without federation."""
    producer = App(Client(trio[0].addr))
    worker_app = App(Client(trio[1].addr))
    for app in (producer, worker_app):
        app.job("squares", results=True)(square)
    job = producer.tasks["squares"].enqueue(12)
    worker = worker_app.worker(poll_ms=200)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert job.result(timeout=WAIT_TIMEOUT) == 144
    finally:
        worker.stop()
        thread.join(WAIT_TIMEOUT)


async def square(n):
    return n * n
