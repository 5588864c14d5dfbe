"""GET /metrics: prometheus-client's own parser reads it, and its values are
the ones INFO, QSTAT and CLUSTER INFO give on the same node."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import NODE_WAIT_MS, wait_until
from tests.http.conftest import start_http_node


def parse_info(node) -> dict[str, str]:
    with node.raw() as r:
        text = r.call("INFO", "all").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


async def scrape(http) -> dict:
    """{(name, labels as a sorted tuple): value} of every sample."""
    async with http.get("/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def metric(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


async def test_metrics_agree_with_info(hnode, http):
    c = hnode.client()
    ids = [c.execute_command("ADDJOB", "m", f"j{i}", 0, "RETRY", 60) for i in range(5)]
    c.execute_command("ADDJOB", "other", "x", 0)
    c.execute_command("GETJOB", "COUNT", 2, "FROM", "m")
    c.execute_command("ACKJOB", ids[0])       # one node: gone at once
    c.execute_command("PAUSE", "other", "out")
    blocker = hnode.client()
    blocker_conn = blocker.connection_pool.get_connection()
    blocker_conn.send_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "empty")
    wait_until(lambda: parse_info(hnode)["blocked_clients"].strip() == "1")
    # c and the blocked client remain (the raw connections above are closing).
    wait_until(lambda: c.info("clients")["connected_clients"] == 2)
    info = {k: str(v) for k, v in c.info("all").items()}
    cmdstat_addjob = c.info("commandstats")["cmdstat_addjob"]
    samples = await scrape(http)
    assert metric(samples, "disquette_registered_jobs") == int(info["registered_jobs"]) == 5
    assert sum(metric(samples, "disquette_jobs", state=s)
               for s in ("wait-repl", "active", "queued", "acked")) == 5
    assert metric(samples, "disquette_jobs", state="active") == 1
    assert metric(samples, "disquette_jobs", state="queued") == 4
    assert metric(samples, "disquette_queues") == int(info["registered_queues"]) == 3
    assert metric(samples, "disquette_connected_clients") == int(info["connected_clients"])
    assert metric(samples, "disquette_blocked_clients") == int(info["blocked_clients"]) == 1
    assert metric(samples, "disquette_memory_used_bytes") == int(info["used_memory"])
    assert metric(samples, "disquette_maxmemory_bytes") == int(info["maxmemory"])
    # Per queue: QSTAT's figures.
    qstat = c.execute_command("QSTAT", "m")
    q = {qstat[i].decode(): qstat[i + 1] for i in range(0, len(qstat), 2)}
    assert metric(samples, "disquette_queue_length", queue="m") == q["len"] == 3
    assert metric(samples, "disquette_queue_jobs_in_total", queue="m") == q["jobs-in"] == 5
    assert metric(samples, "disquette_queue_jobs_out_total", queue="m") == q["jobs-out"] == 2
    assert metric(samples, "disquette_queue_blocked_clients", queue="empty") == 1
    assert metric(samples, "disquette_queue_paused", queue="other", direction="out") == 1
    assert metric(samples, "disquette_queue_paused", queue="other", direction="in") == 0
    # Commands: INFO commandstats (taken before the scrape: it ran no command).
    calls, usec = cmdstat_addjob["calls"], cmdstat_addjob["usec"]
    assert metric(samples, "disquette_commands_total", command="addjob") == calls == 6
    assert metric(samples, "disquette_command_duration_seconds_count", command="addjob") == 6
    assert abs(metric(samples, "disquette_command_duration_seconds_sum", command="addjob")
               - usec / 1e6) < 1e-5
    assert metric(samples, "disquette_command_duration_seconds_bucket", command="addjob",
                  le="+Inf") == 6
    assert metric(samples, "disquette_commands_processed_total") == \
        int(info["total_commands_processed"]) + 2       # + the two INFOs themselves
    assert metric(samples, "disquette_connections_received_total") == \
        int(info["total_connections_received"])
    assert metric(samples, "disquette_cluster_known_nodes") == 1
    assert metric(samples, "disquette_aof_enabled") == int(info["aof_enabled"]) == 0
    assert metric(samples, "disquette_aof_state", state="off") == 1
    assert metric(samples, "disquette_loading") == 0
    blocker_conn.disconnect()


async def test_metrics_aof_and_cluster(node_factory):
    a = start_http_node(node_factory, appendonly="yes", appendfsync="always")
    b = node_factory()
    with a.raw() as r:
        assert r.call("CLUSTER", "MEET", "127.0.0.1", b.port) == b"+OK\r\n"
    ca = a.client()
    wait_until(lambda: b"cluster_reachable_nodes:1" in ca.execute_command("CLUSTER", "INFO"))
    for i in range(10):
        ca.execute_command("ADDJOB", "q", f"j{i}", 0, "REPLICATE", 2)
    async with aiohttp.ClientSession(a.http_url) as http:
        info = {k: v.strip() for k, v in parse_info(a).items()}
        cluster = dict(line.split(":", 1) for line in
                       ca.execute_command("CLUSTER", "INFO").decode().split() if ":" in line)
        samples = await scrape(http)
    assert metric(samples, "disquette_aof_enabled") == 1
    assert metric(samples, "disquette_aof_state", state="on") == 1
    assert metric(samples, "disquette_aof_current_size_bytes") == int(info["aof_current_size"])
    fsyncs = int(info["aof_fsyncs"])
    assert fsyncs >= 10     # appendfsync always: at least one per ADDJOB turn
    assert metric(samples, "disquette_aof_fsync_duration_seconds_count") >= fsyncs
    assert metric(samples, "disquette_aof_fsync_duration_seconds_sum") > 0
    assert metric(samples, "disquette_cluster_known_nodes") == 2
    assert metric(samples, "disquette_cluster_reachable_nodes") == 1
    assert metric(samples, "disquette_cluster_failing_nodes") == 0
    assert metric(samples, "disquette_bus_messages_sent_total") >= \
        int(cluster["cluster_stats_messages_sent"]) > 0
    assert metric(samples, "disquette_bus_messages_received_total") >= \
        int(cluster["cluster_stats_messages_received"]) > 0
    myid = ca.execute_command("CLUSTER", "MYID").decode()
    assert metric(samples, "disquette_cluster_node_priority", node=myid,
                  address=f"127.0.0.1:{a.port}") == 1


async def test_queue_series_are_capped(hnode, http):
    c = hnode.client()
    pipe = c.pipeline(transaction=False)
    for i in range(205):
        pipe.execute_command("ADDJOB", f"q{i:03d}", "x", 0)
    pipe.execute_command("ADDJOB", "q204", "y", 0)   # the longest queue is kept
    pipe.execute_command("ADDJOB", "q204", "z", 0)
    pipe.execute()
    samples = await scrape(http)
    lengths = {dict(k[1])["queue"]: v for k, v in samples.items()
               if k[0] == "disquette_queue_length"}
    assert len(lengths) == 200 and lengths["q204"] == 3
    assert metric(samples, "disquette_queues") == 205
    assert metric(samples, "disquette_queue_series_dropped") == 5
