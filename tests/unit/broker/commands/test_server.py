"""broker/commands/server.py: INFO, CONFIG on an in-process node (LATENCY:
test_server_latency.py)."""

from __future__ import annotations


def test_info_lists_the_error_counters_and_the_aof_off(inprocess):
    info = inprocess.call("INFO", "stats", "persistence")     # verbatim text
    for field in ("internal_errors:0", "malformed_bus_messages:0", "aof_enabled:0",
                  "aof_state:off", "aof_fsync_policy:everysec"):
        assert field + "\r\n" in info


def test_config_set_takes_one_route_to_the_cluster(inprocess):
    assert inprocess.call("CONFIG", "SET", "cluster-node-timeout", 1234) == "OK"
    assert inprocess.cluster.m.node_timeout == 1234
    inprocess.call("CONFIG", "SET", "cluster-announce-ip", "10.1.2.3")
    assert inprocess.cluster.m.myself.ip == "10.1.2.3"
    assert "10.1.2.3" in inprocess.saved_nodes_conf


def test_config_get_is_a_map_under_resp3(inprocess):
    assert inprocess.resp("CONFIG", "GET", "port", proto=3) == \
        b"%1\r\n$4\r\nport\r\n$4\r\n7711\r\n"
