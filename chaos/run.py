"""``python -m chaos run``: start a cluster behind proxies, run the workload
through a scenario's faults, heal, drain, check, report.

A run of one scenario writes, in its own folder under ``--out``
(``<scenario>-seed<N>/``): ``history.jsonl`` (every call and fault, as it
happened), ``report.json`` and ``report.html`` (the verdict and the timeline),
and the nodes' logs. The same ``--seed`` draws the same faults at the same
offsets and the same workload choices (what the network and the scheduler do
with them still varies, as in any real cluster).
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.checker import CheckResult, check
from chaos.history import HistoryWriter, read_history
from chaos.launcher import ChaosCluster
from chaos.report import summary_table, write_reports
from chaos.scenarios import SCENARIOS, Faults, Scenario, cluster_options
from chaos.workload import Workload, WorkloadSpec


@dataclass
class RunOutcome:
    scenario: str
    seed: int
    result: CheckResult
    folder: Path
    table: str
    workload_errors: list[str]

    @property
    def valid(self) -> bool:
        return self.result.valid and not self.workload_errors


def run_scenario(scenario: Scenario, *, nodes: int, seconds: float, seed: int, out: Path,
                 toxiproxy_url: str | None = None, rate: float = 40.0,
                 drain_timeout: float = 60.0, node_timeout_ms: int = 2000,
                 keep_node_dirs: bool = False) -> RunOutcome:
    folder = out / f"{scenario.name}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = random.Random(f"{seed}-{scenario.name}")
    cluster = ChaosCluster(nodes, workdir=folder / "nodes", toxiproxy_url=toxiproxy_url,
                           node_timeout_ms=node_timeout_ms, appendonly=scenario.appendonly,
                           appendfsync=scenario.appendfsync, seed=seed,
                           **cluster_options(scenario, rng, nodes))
    spec = WorkloadSpec(rate=rate, replicate=scenario.replicate,
                        retry0_share=scenario.retry0_share)
    history_path = folder / "history.jsonl"
    with cluster:
        history = HistoryWriter(history_path, scenario=scenario.name, seed=seed,
                                nodes={n.name: n.addr for n in cluster.nodes},
                                args={"nodes": nodes, "seconds": seconds, "rate": rate,
                                      "appendonly": scenario.appendonly,
                                      "appendfsync": scenario.appendfsync,
                                      "replicate": list(scenario.replicate),
                                      "proxy": toxiproxy_url or "chaos.proxy"})
        workload = Workload(cluster, history, spec, seed)
        try:
            t0 = time.monotonic()
            faults = Faults(cluster, history, deadline=t0 + seconds)
            workload.start()
            scenario.faults(faults, rng, t0, seconds)
            faults.sleep_until(seconds, t0)
            workload.stop_producing()
            faults.heal()
            cluster.wait_formed(60)
            workload.drain(drain_timeout)
            workload.record_leftovers()
        finally:
            workload.stop()
            history.close()
    if not keep_node_dirs:
        shutil.rmtree(folder / "nodes", ignore_errors=True)
    recorded = read_history(history_path)
    result = check(recorded)
    write_reports(result, recorded, folder / "report.json", folder / "report.html")
    table = summary_table(result, recorded)
    for error in workload.errors:
        table += f"\n!! workload: {error}"
    return RunOutcome(scenario.name, seed, result, folder, table, workload.errors)


def run(names: list[str], *, nodes: int, seconds: float, seed: int | None, out: Path,
        toxiproxy_url: str | None = None, rate: float = 40.0,
        drain_timeout: float = 60.0) -> list[RunOutcome]:
    """Every named scenario in turn, printing each table as it ends."""
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    outcomes = []
    for name in names:
        print(f"== {name}: {SCENARIOS[name].doc} ({nodes} nodes, {seconds:g} s, seed {seed})",
              flush=True)
        outcome = run_scenario(SCENARIOS[name], nodes=nodes, seconds=seconds, seed=seed,
                               out=out, toxiproxy_url=toxiproxy_url, rate=rate,
                               drain_timeout=drain_timeout)
        print(outcome.table)
        print(f"   reports: {outcome.folder}/report.html\n", flush=True)
        outcomes.append(outcome)
    return outcomes
