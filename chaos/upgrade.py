"""A rolling upgrade (issue 37): a cluster started as the previous release
(chaos/previous_release.py) upgraded to this one a node at a time, under the
run's workload. Each step stops the node (SIGTERM, as an operator does) and
starts this release on the same port, directory and AOF, then waits until
every node sees every other again.

What it records in the history, for the checker (chaos/checker.py
upgrade_figures):

- ``upgrade`` events: ``releases`` (which release each node runs, after each
  step: a cluster of both is in its mixed phase);
- ``upgrade`` events ``probe-add``: a job added with REPLICATE 3 on one node
  of each release during each mixed phase (queue ``upgrade-probe``, which the
  workload does not consume), with the nodes holding a copy (SHOW on every
  node) and their releases: three, or replication failed; of both releases
  (always so on three nodes), or it did not cross them;
- ``probe-held``: when the next node is stopped, each probe's holders among
  the running nodes: two at least (it survives the loss of a node);
- ``probe-acked``: at the end, each probe taken (GETJOB) and acked somewhere;
- ``malformed``: before each step and at the end, the bus messages each
  running node dropped as malformed (INFO stats): none.
"""

from __future__ import annotations

from typing import Any

from chaos.launcher import THIS_RELEASE, Node, wait_for

PROBE_QUEUE = "upgrade-probe"


def releases(f: Any) -> dict[str, str]:
    """Which release each node runs."""
    return {n.name: n.release for n in f.cluster.nodes}


def malformed(f: Any) -> None:
    """Record the bus messages each running node dropped as malformed (INFO;
    before a node stops, as its count goes with it): none, or the releases
    misread each other."""
    counts = {}
    for node in f.cluster.nodes:
        if node.is_running():
            with node.admin() as r:
                counts[node.name] = int(r.info("stats").get("malformed_bus_messages", 0))
    f.history.event("upgrade", what="malformed", counts=counts)


def upgrade(f: Any, node: Node, after_stop: Any = None) -> int:
    """Stop ``node``, start this release in its place, wait for the cluster
    to form again; ``after_stop()`` runs while it is down."""
    malformed(f)
    fault = f.history.fault_started("upgrade", node=node.name, release=node.release,
                                    to=THIS_RELEASE)
    node.stop()
    if after_stop is not None:
        after_stop()
    node.run_as(None)
    node.start()
    f.cluster.wait_formed(60)
    f.history.fault_stopped(fault)
    f.history.event("upgrade", what="releases", nodes=releases(f))
    return fault


class Probes:
    """The REPLICATE 3 jobs added during the mixed phases, checked held by
    every running node, and acked at the end."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.ids: list[str] = []

    def _holders(self, jid: str) -> list[str]:
        held = []
        for node in self.f.cluster.nodes:
            if not node.is_running():
                continue
            with node.admin() as r:
                if r.execute_command("SHOW", jid) is not None:
                    held.append(node.name)
        return held

    def add(self) -> None:
        """One probe on a node of each release (the mixed phase's)."""
        by_release: dict[str, Node] = {}
        for node in self.f.cluster.nodes:
            by_release.setdefault(node.release, node)
        for release, node in sorted(by_release.items()):
            with node.admin(10) as r:
                jid = r.execute_command("ADDJOB", PROBE_QUEUE, f"probe-{len(self.ids)}", 5000,
                                        "REPLICATE", 3, "RETRY", 30, "TTL", 3600)
            self.ids.append(jid)
            holders = self._holders(jid)
            of = releases(self.f)
            self.f.history.event("upgrade", what="probe-add", id=jid, node=node.name,
                                 release=release, holders=holders,
                                 holder_releases=sorted({of[h] for h in holders}))

    def check_held(self) -> None:
        """Each probe's holders among the running nodes while one is down:
        two at least (it survives the loss of a node)."""
        running = [n.name for n in self.f.cluster.nodes if n.is_running()]
        for jid in self.ids:
            self.f.history.event("upgrade", what="probe-held", id=jid, running=running,
                                 holders=self._holders(jid))

    def ack_all(self, timeout: float = 30.0) -> None:
        """Every probe taken from its queue and acked (wherever it is queued)."""
        left = set(self.ids)

        def taken() -> bool:
            for node in self.f.cluster.nodes:
                with node.admin() as r:
                    got = r.execute_command("GETJOB", "NOHANG", "COUNT", 100,
                                            "FROM", PROBE_QUEUE) or []
                    for _, jid, _ in got:
                        r.execute_command("ACKJOB", jid)
                        if jid in left:
                            left.discard(jid)
                            self.f.history.event("upgrade", what="probe-acked", id=jid,
                                                 node=node.name)
            return not left
        try:
            wait_for(taken, timeout, "the upgrade probes to be delivered", interval=0.2)
        except TimeoutError:
            pass        # the checker counts the probes never acked

