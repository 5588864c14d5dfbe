"""broker/commands/cluster.py: CLUSTER's subcommands, which read and change
the node table through the cluster hooks, on an in-process node."""

from __future__ import annotations


def test_node_id_and_leaving_live_in_the_node_table(inprocess):
    m = inprocess.cluster.m
    assert inprocess.call("CLUSTER", "MYID") == m.node_id.encode()
    assert inprocess.call("CLUSTER", "LEAVING", "yes") == "OK"
    assert inprocess.node.cluster.leaving() and m.leaving
    assert inprocess.call("CLUSTER", "LEAVING") == "yes"
    old = m.node_id
    inprocess.call("CLUSTER", "RESET", "HARD")
    assert inprocess.node.myself_id == m.node_id != old
