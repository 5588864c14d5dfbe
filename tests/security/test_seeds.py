"""cluster-seeds (ext): nodes join with no CLUSTER MEET typed by anyone."""

from __future__ import annotations

import pytest
import redis

from tests.harness import RawConn, cluster_info, free_port, wait_until

TIMEOUT = 1000


def reachable(n) -> str:
    return cluster_info(n).get("cluster_reachable_nodes")


def known(n) -> str:
    return cluster_info(n).get("cluster_known_nodes")


def myid(n) -> str:
    with RawConn(n.host, n.port) as r:
        return r.call("CLUSTER", "MYID").split(b"\r\n")[1].decode()


def nodes_lines(n) -> str:
    with RawConn(n.host, n.port) as r:
        return r.call("CLUSTER", "NODES").split(b"\r\n", 1)[1].decode()


def start_seeded(node_factory, ports, seeds, **directives):
    nodes = [node_factory(port=p, cluster_seeds=seeds, start=False, **directives)
             for p in ports]
    for n in nodes:
        n.start()
    return nodes


def test_three_nodes_with_the_same_seeds_form_one_cluster(node_factory):
    ports = [free_port() for _ in range(3)]
    # Names (localhost), addresses, the node itself, and a name that does
    # not resolve: all in one list, the same on every node.
    seeds = ",".join([f"localhost:{ports[0]}", f"127.0.0.1:{ports[1]}",
                      f"127.0.0.1:{ports[2]}", "no-such-node.invalid:7711"])
    nodes = start_seeded(node_factory, ports, seeds, cluster_node_timeout=TIMEOUT)
    wait_until(lambda: all(reachable(n) == "2" for n in nodes),
               message=lambda: [cluster_info(n) for n in nodes])
    assert all(known(n) == "3" for n in nodes)
    c = nodes[2].client()
    assert c.execute_command("SHOW", c.execute_command(
        "ADDJOB", "q", "x", 5000, "REPLICATE", 3))[7] == 3
    assert c.config_get("cluster-seeds") == {"cluster-seeds": seeds}
    assert "cannot resolve no-such-node.invalid" in nodes[0].log()


def test_a_node_alone_again_meets_its_seeds_again(node_factory):
    ports = [free_port() for _ in range(2)]
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    a, b = start_seeded(node_factory, ports, seeds, cluster_node_timeout=TIMEOUT)
    wait_until(lambda: reachable(a) == reachable(b) == "1")
    # CLUSTER RESET leaves a alone: it finds b again through its seeds.
    assert a.client().execute_command("CLUSTER", "RESET", "SOFT") == b"OK"
    wait_until(lambda: reachable(a) == "1" and known(a) == "2",
               message=lambda: cluster_info(a))


def test_seeds_set_at_run_time(node_factory):
    a, b = node_factory(cluster_node_timeout=TIMEOUT), node_factory(cluster_node_timeout=TIMEOUT)
    assert a.client().config_set("cluster-seeds", f"127.0.0.1:{b.port}")
    wait_until(lambda: reachable(a) == reachable(b) == "1")
    with pytest.raises(redis.ResponseError, match="invalid seed 'nope'"):
        a.client().config_set("cluster-seeds", "nope")
    with pytest.raises(redis.ResponseError, match="port out of range"):
        a.client().config_set("cluster-seeds", "h:70000")


def test_nodes_restarted_at_new_addresses_find_each_other_again(node_factory):
    """As when every pod of a StatefulSet restarts with a new IP: each node
    knows the others (nodes.conf) at addresses nobody listens on any more; the
    seeds (the same names, now resolving elsewhere) bring them together as the
    same nodes at their new addresses."""
    ports = [free_port() for _ in range(2)]
    nodes = start_seeded(node_factory, ports, ",".join(f"127.0.0.1:{p}" for p in ports),
                         cluster_node_timeout=TIMEOUT)
    wait_until(lambda: all(reachable(n) == "1" for n in nodes))
    ids = [myid(n) for n in nodes]
    for n in nodes:
        n.terminate()
    new_seeds = ",".join(f"127.0.0.2:{p}" for p in ports)
    for n in nodes:
        n.args += ["--bind", "127.0.0.2", "--cluster-seeds", new_seeds]
        n.host = "127.0.0.2"
        n.start()
    wait_until(lambda: all(reachable(n) == "1" for n in nodes),
               message=lambda: [nodes_lines(n) for n in nodes])
    assert [myid(n) for n in nodes] == ids
    assert all(known(n) == "2" for n in nodes)
    assert f"{ids[1]} 127.0.0.2:{ports[1]} " in nodes_lines(nodes[0])
    assert f"{ids[0]} 127.0.0.2:{ports[0]} " in nodes_lines(nodes[1])
