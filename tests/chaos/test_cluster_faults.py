"""Faults on a real cluster: three broker processes whose bus links pass
through the fault proxy (``cluster-bus-route``, chaos/launcher.py), cut and
healed with chaos/scenarios.py's verbs, seen the way an operator sees them
(CLUSTER NODES, ADDJOB's NOREPL)."""

from __future__ import annotations

import time

import pytest
import redis

from chaos.history import HistoryWriter
from chaos.launcher import ChaosCluster
from chaos.scenarios import Faults
from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, wait_until

pytestmark = pytest.mark.xdist_group("chaos-cluster")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ChaosCluster(3, workdir=tmp_path_factory.mktemp("chaos-cluster"), seed=5,
                     node_timeout_ms=1000)
    with c:
        yield c


@pytest.fixture
def faults(cluster, tmp_path):
    history = HistoryWriter(tmp_path / "h.jsonl")
    f = Faults(cluster, history, deadline=time.monotonic() + 3600)
    yield f
    f.heal()
    cluster.wait_formed(30)
    wait_until(lambda: all(flags(cluster, n.name, m.name) == "connected"
                           for n in cluster.nodes for m in cluster.nodes if n is not m),
               message="links back after healing")
    history.close()


def flags(cluster: ChaosCluster, at: str, about: str) -> str:
    """How node ``at`` sees node ``about``: its CLUSTER NODES flags, or
    "connected" when it has none and the link is up."""
    node, other = cluster.node(at), cluster.node(about)
    with node.admin() as r:
        lines = r.execute_command("CLUSTER", "NODES").splitlines()
    for line in lines:
        fields = line.split()
        if fields[1].endswith(f":{other.port}"):
            if fields[2] == "noflags" and fields[-1] == "connected":
                return "connected"
            return fields[2] + " " + fields[-1]
    return "unknown"


def test_routes_are_a_directive(cluster):
    n1 = cluster.node("n1")
    with n1.admin() as r:
        routes = r.config_get("cluster-bus-route")["cluster-bus-route"]
        assert sorted(routes.split(",")) == sorted(
            f"127.0.0.1:{peer.bus_port}={cluster.link('n1', peer.name).listen}"
            for peer in cluster.nodes if peer is not n1)
        with pytest.raises(redis.ResponseError, match="invalid route 'nonsense'"):
            r.config_set("cluster-bus-route", "nonsense")
        assert r.config_get("cluster-bus-route")["cluster-bus-route"] == routes


def test_a_partition_cuts_the_bus_and_healing_restores_it(cluster, faults):
    faults.partition(["n1"], ["n2", "n3"])
    wait_until(lambda: "pfail" in flags(cluster, "n2", "n1") or "fail" in flags(cluster, "n2", "n1"),
               message="n2 to flag n1 once the proxies cut it off")
    with cluster.node("n2").admin(WAIT_TIMEOUT) as r:
        with pytest.raises(redis.ResponseError, match="NOREPL"):
            r.execute_command("ADDJOB", "q", "x", 500, "REPLICATE", 3)
        assert r.execute_command("ADDJOB", "q", "y", NODE_WAIT_MS, "REPLICATE", 2)
    faults.heal()
    wait_until(lambda: flags(cluster, "n2", "n1") == "connected",
               message="n2 to see n1 again after healing")
    with cluster.node("n2").admin() as r:
        wait_until(lambda: r.execute_command("ADDJOB", "q", "z", 2000, "REPLICATE", 3),
                   ignore=redis.ResponseError)


def test_a_one_way_cut_silences_one_node_only(cluster, faults):
    faults.one_way([("n3", "n1"), ("n3", "n2")])
    wait_until(lambda: "pfail" in flags(cluster, "n1", "n3") or "fail" in flags(cluster, "n1", "n3"),
               message="n1 to stop hearing from n3")
    # n1 and n2 still hear each other: the cut is n3's outbound traffic only.
    assert flags(cluster, "n1", "n2") == "connected"
    with cluster.node("n1").admin(WAIT_TIMEOUT) as r:
        assert r.execute_command("ADDJOB", "q", "a", NODE_WAIT_MS, "REPLICATE", 2)
