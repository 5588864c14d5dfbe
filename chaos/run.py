"""``python -m chaos run``: start a cluster behind proxies, run the workload
through a scenario's faults, heal, drain, check, report.

A run of one scenario writes, in its own folder under ``--out``
(``<scenario>-seed<N>/``): ``history.jsonl`` (every call and fault, as it
happened), ``report.json`` and ``report.html`` (the verdict and the timeline),
and the nodes' logs; ``--out`` itself gets the summary of every scenario and
seed run so far (``index.html``, ``summary.json``: one table per fault kind).
After the faults the runner heals, keeps producing until adds and deliveries
succeed again (the time to recover), then drains. The same ``--seed`` draws the same faults at the same
offsets and the same workload choices (what the network and the scheduler do
with them still varies, as in any real cluster).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from chaos import netns
from chaos.checker import CheckResult, check
from chaos.disk import power_loss_lines
from chaos.history import HistoryWriter, read_history
from chaos.launcher import ChaosCluster, child_env
from chaos.previous_release import Unavailable
from chaos.report import summary_table, write_reports, write_summary
from chaos.scenarios import SCENARIOS, Faults, Scenario, cluster_options
from chaos.workload import Workload, WorkloadSpec


@dataclass
class RunOutcome:
    scenario: str
    seed: int
    result: CheckResult | None          # None when skipped
    folder: Path
    table: str
    workload_errors: list[str]
    kind: str = "network"
    skipped: str | None = None          # why the scenario could not run here

    @property
    def valid(self) -> bool:
        return self.result is not None and self.result.valid and not self.workload_errors


@dataclass
class RunOptions:
    """How hard and how long every scenario of a run is driven."""
    nodes: int = 5
    seconds: float = 60.0
    rate: float = 40.0                  # adds/s of each producer
    producers: int = 1                  # producers per node
    consumers: int = 1                  # consumers per node
    batch: int = 1                      # adds per pipelined call
    drain_timeout: float = 60.0
    recovery_timeout: float = 30.0      # how long after the heal adds may take to succeed
    toxiproxy_url: str | None = None
    node_timeout_ms: int = 2000
    keep_node_dirs: bool = False

    def argv(self) -> list[str]:
        """The same options for ``python -m chaos run``."""
        return ["--nodes", str(self.nodes), "--seconds", repr(self.seconds),
                "--rate", repr(self.rate), "--producers", str(self.producers),
                "--consumers", str(self.consumers), "--batch", str(self.batch),
                "--drain-timeout", repr(self.drain_timeout),
                "--recovery-timeout", repr(self.recovery_timeout)]


def run_scenario(scenario: Scenario, options: RunOptions, *, seed: int, out: Path) -> RunOutcome:
    folder = out / f"{scenario.name}-seed{seed}"
    if scenario.netns and not netns.inside():
        return _in_namespace(scenario, options, seed=seed, out=out)
    rng = random.Random(f"{seed}-{scenario.name}")
    o = options
    try:
        more = cluster_options(scenario, rng, o.nodes)
    except Unavailable as e:
        why = f"the previous release is not available here: {e}"
        return RunOutcome(scenario.name, seed, None, folder,
                          f"SKIPPED {scenario.name} (seed {seed}): {why}", [],
                          kind=scenario.kind, skipped=why)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cluster = ChaosCluster(o.nodes, workdir=folder / "nodes", toxiproxy_url=o.toxiproxy_url,
                           node_timeout_ms=o.node_timeout_ms, appendonly=scenario.appendonly,
                           appendfsync=scenario.appendfsync, seed=seed, **more)
    spec = WorkloadSpec(rate=o.rate, producers=o.producers, consumers=o.consumers,
                        batch=o.batch, replicate=scenario.replicate,
                        retry0_share=scenario.retry0_share)
    history_path = folder / "history.jsonl"
    with cluster:
        history = HistoryWriter(history_path, scenario=scenario.name, seed=seed,
                                kind=scenario.kind,
                                nodes={n.name: n.addr for n in cluster.nodes},
                                args={"nodes": o.nodes, "seconds": o.seconds, "rate": o.rate,
                                      "producers": o.producers, "consumers": o.consumers,
                                      "batch": o.batch,
                                      "appendonly": scenario.appendonly,
                                      "appendfsync": scenario.appendfsync,
                                      "replicate": list(scenario.replicate),
                                      "proxy": o.toxiproxy_url or "chaos.proxy",
                                      "netns": netns.inside()})
        workload = Workload(cluster, history, spec, seed)
        try:
            t0 = time.monotonic()
            faults = Faults(cluster, history, deadline=t0 + o.seconds)
            workload.start()
            scenario.faults(faults, rng, t0, o.seconds)
            faults.sleep_until(o.seconds, t0)
            faults.heal()
            # producers keep going until the cluster serves again: the
            # report's time to recover
            workload.wait_recovered(time.monotonic(), o.recovery_timeout)
            cluster.wait_formed(60)
            workload.drain(o.drain_timeout)
            workload.record_leftovers()
        finally:
            workload.stop()
            for error in workload.errors:
                history.workload_error(error)
            history.close()
    if not o.keep_node_dirs:
        shutil.rmtree(folder / "nodes", ignore_errors=True)
    return _outcome(scenario, seed, folder)


def _outcome(scenario: Scenario, seed: int, folder: Path) -> RunOutcome:
    """Check a run's history and write its reports."""
    recorded = read_history(folder / "history.jsonl")
    result = check(recorded)
    write_reports(result, recorded, folder / "report.json", folder / "report.html")
    errors = [e["message"] for e in recorded.events if e["type"] == "error"]
    table = summary_table(result, recorded)
    if result.power_loss:
        table += "\n" + power_loss_lines(result)
    for error in errors:
        table += f"\n!! workload: {error}"
    return RunOutcome(scenario.name, seed, result, folder, table, errors, kind=scenario.kind)


def _in_namespace(scenario: Scenario, options: RunOptions, *, seed: int,
                  out: Path) -> RunOutcome:
    """Run the scenario again as ``python -m chaos run`` in a network
    namespace of its own (chaos/netns.py), then check what it recorded."""
    folder = out / f"{scenario.name}-seed{seed}"

    def skipped(why: str) -> RunOutcome:
        return RunOutcome(scenario.name, seed, None, folder,
                          f"SKIPPED {scenario.name} (seed {seed}): {why}", [],
                          kind=scenario.kind, skipped=why)
    if options.toxiproxy_url:
        return skipped("--toxiproxy: a server outside the run's network namespace "
                       "cannot be reached from it")
    prefix, why = netns.unshare_prefix()
    if prefix is None:
        return skipped(why)
    argv = [sys.executable, "-m", "chaos", "run", "--scenario", scenario.name,
            "--seed", str(seed), "--out", str(out), "--no-summary", *options.argv()]
    env = dict(child_env(), **{netns.INSIDE_ENV: "1"})
    proc = subprocess.run(netns.wrap(prefix, argv), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if folder.exists():
        (folder / "netns-run.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if not (folder / "history.jsonl").exists():
        raise RuntimeError(f"{scenario.name} in its network namespace wrote no history "
                           f"(exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return _outcome(scenario, seed, folder)


def run(names: list[str], options: RunOptions, *, seeds: list[int], out: Path,
        summary: bool = True) -> list[RunOutcome]:
    """Every named scenario with every seed (seed by seed), printing each
    table as it ends and, with ``summary``, rewriting ``out``'s summary
    (index.html, summary.json) after each."""
    outcomes = []
    for seed in seeds:
        for name in names:
            print(f"== {name}: {SCENARIOS[name].doc} ({options.nodes} nodes, "
                  f"{options.seconds:g} s, seed {seed})", flush=True)
            outcome = run_scenario(SCENARIOS[name], options, seed=seed, out=out)
            print(outcome.table)
            if outcome.skipped is None:
                print(f"   reports: {outcome.folder}/report.html\n", flush=True)
            outcomes.append(outcome)
            if summary:
                write_summary(outcomes, out, options)
    return outcomes


def outcomes_in(out: Path) -> list[RunOutcome]:
    """The runs whose reports are in ``out`` (each ``*/report.json``), in the
    order they started: what ``python -m chaos summary`` rebuilds the summary
    from (runs that were skipped left no report)."""
    reports = [(json.loads(path.read_text(encoding="utf-8")), path.parent)
               for path in out.glob("*/report.json")]
    reports.sort(key=lambda r: str(r[0]["meta"].get("started_at")))
    outcomes = []
    for report, folder in reports:
        meta = report["meta"]
        name = str(meta.get("scenario"))
        kind = meta.get("kind") or (SCENARIOS[name].kind if name in SCENARIOS else "network")
        outcomes.append(RunOutcome(name, meta.get("seed"), CheckResult(**report["figures"]),
                                   folder, "", report.get("workload_errors", []), kind=kind))
    return outcomes


def pick_seeds(seed: int | None, count: int) -> list[int]:
    """``count`` seeds from ``seed`` on (a random first one when None)."""
    first = seed if seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    return [first + k for k in range(count)]
