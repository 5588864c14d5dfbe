"""The workload of a chaos run: producers and consumers on every node, through
the SDK (``disquette.Client``), each call written to the history.

- Producers (``producers`` per node) add jobs whose body is a value unique
  in the run (``<client>-<n>-r<retry>``), at several REPLICATE levels, some
  with RETRY 0 (at most once: REPLICATE 1, never NACKed), paced to ``rate``
  adds/s each, ``batch`` at a time pipelined (``Client.add_jobs``), each job
  still its own op in the history.
- Consumers fetch with GETJOB (WITHCOUNTERS) and then, by a seeded draw: ACKJOB
  on the delivering node, ACKJOB on another node, FASTACK, WORKING then ACKJOB,
  or NACK (RETRY 0 jobs: always ACKJOB on the delivering node). Every delivery and every answer (or error) is recorded.
- An add answered with an id is ``ok``; an error reply (NOREPL, LEAVING...) is
  ``fail``; a lost reply or no reachable node is ``info`` (unknown outcome).

Threads, because the SDK's sync client is what most users run; one client per
thread, pinned to its node first (``follow_producers=False``) and failing over
to the others as the SDK does.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from chaos.history import HistoryWriter
from chaos.launcher import ChaosCluster, wait_for
from disquette import Client, DisqueError
from disquette.errors import ReplyError

QUEUES = ("chaos-a", "chaos-b")


@dataclass
class WorkloadSpec:
    rate: float = 40.0                        # adds per second per producer
    producers: int = 1                        # producer threads per node
    consumers: int = 1                        # consumer threads per node
    batch: int = 1                            # adds per pipelined call (add_jobs)
    replicate: tuple[int, ...] = (1, 2, 3)    # REPLICATE levels drawn (capped at the size)
    retry: tuple[int, ...] = (1, 2)           # RETRY seconds of at-least-once jobs
    retry0_share: float = 0.1                 # share of RETRY 0 jobs
    timeout_ms: int = 2000                    # ADDJOB replication timeout
    actions: dict[str, float] = field(default_factory=lambda: {
        "ack": 0.70, "ack_other": 0.10, "fastack": 0.05, "working": 0.05, "nack": 0.10})


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class Workload:
    def __init__(self, cluster: ChaosCluster, history: HistoryWriter, spec: WorkloadSpec,
                 seed: int) -> None:
        self.cluster, self.history, self.spec = cluster, history, spec
        self.seed = seed
        self.producing = threading.Event()
        self.consuming = threading.Event()
        self.draining = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.adds = 0
        self.deliveries = 0
        # monotonic times: the invoke of the latest acknowledged add, the latest delivery
        self.last_add_invoked = 0.0
        self.last_delivery = 0.0

    def _client(self, first: int) -> Client:
        nodes = self.cluster.nodes
        order = [nodes[(first + k) % len(nodes)].addr for k in range(len(nodes))]
        return Client(order, follow_producers=False, socket_timeout=3.0,
                      socket_connect_timeout=1.0, retry_down_after=1.0, refresh_interval=3600)

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self.producing.set()
        self.consuming.set()
        for i, node in enumerate(self.cluster.nodes):
            roles = [(f"p{node.name}" + (f".{k + 1}" if k else ""), self._produce)
                     for k in range(self.spec.producers)]
            roles += [(f"c{node.name}" + (f".{k + 1}" if k else ""), self._consume)
                      for k in range(self.spec.consumers)]
            for name, target in roles:
                t = threading.Thread(target=self._guard, args=(target, i, name), name=name,
                                     daemon=True)
                t.start()
                self.threads.append(t)

    def _guard(self, target: Any, i: int, name: str) -> None:
        try:
            target(i, name)
        except Exception as exc:  # noqa: BLE001 - a workload bug must show in the report
            self.errors.append(f"{name}: {_error(exc)}")
            raise

    def stop_producing(self) -> None:
        self.producing.clear()

    def wait_recovered(self, since: float, timeout: float) -> bool:
        """Until an add invoked after ``since`` (monotonic) was acknowledged
        and a job was delivered after it: the cluster serves again."""
        try:
            wait_for(lambda: self.last_add_invoked >= since and self.last_delivery >= since,
                     timeout, "adds and deliveries to succeed again", interval=0.05)
        except TimeoutError:
            return False
        return True

    def stop(self) -> None:
        self.producing.clear()
        self.consuming.clear()
        for t in self.threads:
            t.join(15)

    # -- producers -------------------------------------------------------------
    def _produce(self, i: int, name: str) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        spec, size = self.spec, self.cluster.size
        levels = [r for r in spec.replicate if r <= size] or [1]
        client = self._client(i)
        n = 0
        batch = max(1, spec.batch)
        period = batch / spec.rate if spec.rate > 0 else 0.0
        next_at = time.monotonic()
        try:
            while self.producing.is_set():
                items: list[tuple[str, bytes, dict[str, int]]] = []
                ops: list[int] = []
                for _ in range(batch):
                    n += 1
                    retry0 = rng.random() < spec.retry0_share
                    retry = 0 if retry0 else rng.choice(spec.retry)
                    replicate = 1 if retry0 else rng.choice(levels)
                    queue = rng.choice(QUEUES)
                    value = f"{name}-{n}-r{retry}"
                    ops.append(self.history.add_invoked(node=client.node, queue=queue,
                                                        value=value, replicate=replicate,
                                                        retry=retry, client=name))
                    items.append((queue, value.encode(), {"replicate": replicate,
                                                          "retry": retry}))
                self._add(client, items, ops, time.monotonic())
                if period:
                    next_at += period
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        next_at = time.monotonic()
        finally:
            client.close()

    def _add(self, client: Client, items: list[tuple[str, bytes, dict[str, int]]],
             ops: list[int], invoked: float) -> None:
        """One ADDJOB, or a pipelined batch of them (``add_jobs``): each
        job's answer is written on its own op."""
        results: list[Any]
        try:
            if len(items) == 1:
                queue, body, options = items[0]
                results = [client.add_job(queue, body, timeout_ms=self.spec.timeout_ms,
                                          **options)]
            else:
                results = client.add_jobs(items, timeout_ms=self.spec.timeout_ms,
                                          raise_on_error=False)
        except (DisqueError, OSError) as exc:
            results = [exc] * len(items)
        for op, result in zip(ops, results):
            if isinstance(result, ReplyError):
                self.history.add_failed(op, _error(result))
            elif isinstance(result, BaseException):
                # a lost reply, no reachable node: the add may have happened
                self.history.add_indeterminate(op, _error(result))
            else:
                self.history.add_ok(op, result)
                self.adds += 1
                self.last_add_invoked = max(self.last_add_invoked, invoked)

    # -- consumers -------------------------------------------------------------
    def _consume(self, i: int, name: str) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        actions, weights = zip(*self.spec.actions.items())
        client = self._client(i)
        others = [n.addr for n in self.cluster.nodes if n is not self.cluster.nodes[i]]
        try:
            while self.consuming.is_set():
                try:
                    jobs = client.get_jobs(*QUEUES, count=10, timeout_ms=200)
                except DisqueError:
                    time.sleep(0.05)          # node down: the SDK moves on next call
                    continue
                drain = self.draining.is_set()
                for job in jobs:
                    value = job.raw.decode(errors="replace")
                    self.history.delivered(id=job.id, value=value, node=job.node,
                                           queue=job.queue, client=name, drain=drain,
                                           nacks=job.nacks,
                                           additional_deliveries=job.additional_deliveries)
                    self.deliveries += 1
                    self.last_delivery = time.monotonic()
                    action = rng.choices(actions, weights)[0]
                    if drain or (action in ("nack", "ack_other") and value.endswith("-r0")):
                        # RETRY 0 is at most once: never NACKed, and acked where it
                        # was delivered (its only copy; another node makes no dummy
                        # ack for it, as in Disque)
                        action = "ack"
                    self._settle(client, job, action, rng.choice(others))
        finally:
            client.close()

    def _settle(self, client: Client, job: Any, action: str, other: str) -> None:
        h = self.history
        if action == "working":
            try:
                h.working(job.id, job.node, client.working(job.id, node=job.node))
            except DisqueError as exc:
                h.working(job.id, job.node, error=_error(exc))
            action = "ack"
        if action == "nack":
            try:
                h.nacked(job.id, job.node, client.nack_job(job.id, node=job.node))
            except DisqueError as exc:
                h.nacked(job.id, job.node, error=_error(exc))
            return
        node = other if action == "ack_other" else job.node
        fast = action == "fastack"
        try:
            result = (client.fast_ack if fast else client.ack_job)(job.id, node=node)
        except DisqueError as exc:
            h.acked(job.id, node, fast=fast, error=_error(exc))
        else:
            h.acked(job.id, node, result, fast=fast)

    # -- the end of a run --------------------------------------------------------
    def drain(self, timeout: float) -> bool:
        """Producers stopped and faults healed: consumers take what is left.
        Complete when, twice in a row, no node has a job queued or waiting to
        be re-queued (an active job with RETRY > 0); RETRY 0 jobs delivered and
        not acked stay active for ever, by design."""
        self.stop_producing()
        self.draining.set()
        self.history.drain_started()
        quiet = [0]

        def empty() -> bool:
            pending = sum(1 for node in self.cluster.nodes for job in jobs_of(node).values()
                          if job["state"] == "queued"
                          or (job["state"] == "active" and job["retry"] > 0))
            quiet[0] = quiet[0] + 1 if pending == 0 else 0
            return quiet[0] >= 2
        try:
            wait_for(empty, timeout, "the queues to drain", interval=0.5)
            complete = True
        except TimeoutError:
            complete = False
        self.history.drain_ended(complete)
        self.consuming.clear()
        for t in self.threads:
            t.join(15)
        return complete

    def record_leftovers(self, settle: float = 10.0) -> None:
        """What each node still holds, once acked jobs had ``settle`` seconds to
        be garbage-collected everywhere."""
        def collected() -> bool:
            return not any(job["state"] == "acked" for node in self.cluster.nodes
                           for job in jobs_of(node).values())
        try:
            wait_for(collected, settle, "acked jobs to be collected", interval=0.5)
        except TimeoutError:
            pass
        for node in self.cluster.nodes:
            try:
                held = {jid: job["state"] for jid, job in jobs_of(node).items()}
            except Exception as exc:  # noqa: BLE001 - an unreachable node is a finding
                self.errors.append(f"leftovers of {node.name}: {_error(exc)}")
                continue
            self.history.leftovers(node.name, held)


def jobs_of(node: Any) -> dict[str, dict[str, Any]]:
    """Every job the node holds (JSCAN ... REPLY all), by id."""
    out: dict[str, dict[str, Any]] = {}
    with node.admin() as r:
        cursor = "0"
        while True:
            cursor, items = r.execute_command("JSCAN", cursor, "COUNT", 1000, "REPLY", "all")
            for item in items:
                job = dict(zip(item[::2], item[1::2]))
                out[job["id"]] = job
            if str(cursor) == "0":
                return out
