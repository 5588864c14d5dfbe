"""GET /metrics: a prometheus-client Collector that reads the Node when
Prometheus scrapes (nothing is counted twice: the figures are the ones INFO,
QSTAT and CLUSTER INFO show).

Per-queue series are capped (``MAX_QUEUE_SERIES``): the longest queues (then
by name) get labels, ``disquette_queues`` counts them all and
``disquette_queue_series_dropped`` says how many were left out. Jobs by state
walk the job table (about 50 ms per million jobs, once per scrape).
"""

from __future__ import annotations

from collections import Counter

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
)
from prometheus_client.registry import CollectorRegistry

from broker.job import STATE_NAMES
from broker.queue import PAUSED_IN, PAUSED_OUT
from cluster.cluster import Cluster

MAX_QUEUE_SERIES = 200
# Histogram buckets (seconds) from the powers-of-two slots the node keeps:
# slot b counts durations under 2**b ns; every other power from 2**10 ns (1 us)
# to 2**34 ns (17 s).
BUCKET_BITS = range(10, 35, 2)
# INFO stats -> counter names (without the _total prometheus-client adds).
STAT_NAMES = {
    "total_connections_received": "connections_received",
    "total_commands_processed": "commands_processed",
    "total_net_input_bytes": "net_input_bytes",
    "total_net_output_bytes": "net_output_bytes",
}
# Per-queue series: (family, name, help, value of a queue at time now).
QUEUE_SERIES = (
    (GaugeMetricFamily, "disquette_queue_length", "Queued jobs (QLEN).",
     lambda q, now: len(q.jobs)),
    (CounterMetricFamily, "disquette_queue_jobs_in",
     "Jobs queued into the queue (QSTAT jobs-in).", lambda q, now: q.jobs_in),
    (CounterMetricFamily, "disquette_queue_jobs_out",
     "Jobs taken from the queue (QSTAT jobs-out).", lambda q, now: q.jobs_out),
    (GaugeMetricFamily, "disquette_queue_import_rate",
     "Jobs per second imported from other nodes (QSTAT import-rate).",
     lambda q, now: q.import_rate(now)),
    (GaugeMetricFamily, "disquette_queue_blocked_clients",
     "Clients blocked on the queue (QSTAT blocked).", lambda q, now: len(q.blocked)),
)


def _histogram(slots, offset: int, total_ns: int) -> tuple[list, float]:
    """Cumulative (le, count) buckets and the sum in seconds, from slot counts
    ``slots[offset + bit_length]``."""
    buckets = []
    cumulative, done = 0, offset
    for b in BUCKET_BITS:
        cumulative += sum(slots[done:offset + b + 1])
        done = offset + b + 1
        buckets.append((repr((1 << b) / 1e9), cumulative))
    buckets.append(("+Inf", sum(slots[offset:])))
    return buckets, total_ns / 1e9


class NodeCollector:
    """Everything about one node, read at scrape time. ``aof()`` returns the
    AOF writer (server/aof.py) or None."""

    def __init__(self, node, aof=lambda: None) -> None:
        self.node = node
        self.aof = aof

    def describe(self):
        return []       # no fixed set: read everything at collect time

    def collect(self):
        node = self.node
        now = node.clock()
        yield from self.jobs(node)
        yield from self.queues(node, now)
        yield from self.commands(node)
        yield from self.clients_and_memory(node)
        yield from self.cluster(node)
        yield from self.persistence(node)

    # ----------------------------------------------------------------- jobs
    def jobs(self, node):
        yield GaugeMetricFamily("disquette_registered_jobs",
                                "Jobs this node holds (INFO registered_jobs).",
                                value=node.job_count)
        by_state = Counter(j.state for shard in node.job_shards for j in shard.values())
        g = GaugeMetricFamily("disquette_jobs", "Jobs this node holds, by state.",
                              labels=["state"])
        for i, name in enumerate(STATE_NAMES):
            g.add_metric([name.decode()], by_state.get(i, 0))
        yield g

    # --------------------------------------------------------------- queues
    def queues(self, node, now: int):
        queues = list(node.queues.values())
        yield GaugeMetricFamily("disquette_queues", "Queues on this node (INFO registered_queues).",
                                value=len(queues))
        if len(queues) > MAX_QUEUE_SERIES:
            queues.sort(key=lambda q: (-len(q.jobs), q.name))
            dropped = len(queues) - MAX_QUEUE_SERIES
            queues = queues[:MAX_QUEUE_SERIES]
        else:
            dropped = 0
        yield GaugeMetricFamily("disquette_queue_series_dropped",
                                f"Queues left out of the per-queue series (at most "
                                f"{MAX_QUEUE_SERIES} queues, the longest, get labels).",
                                value=dropped)
        families = [(kind(name, doc, labels=["queue"]), value)
                    for kind, name, doc, value in QUEUE_SERIES]
        paused = GaugeMetricFamily("disquette_queue_paused",
                                   "1 when the queue is paused in that direction.",
                                   labels=["queue", "direction"])
        for q in queues:
            name = [q.name.decode("utf-8", "replace")]
            for family, value in families:
                family.add_metric(name, value(q, now))
            paused.add_metric(name + ["in"], int(bool(q.flags & PAUSED_IN)))
            paused.add_metric(name + ["out"], int(bool(q.flags & PAUSED_OUT)))
        yield from (family for family, _ in families)
        yield paused

    # ------------------------------------------------------------- commands
    def commands(self, node):
        calls = CounterMetricFamily("disquette_commands",
                                    "Commands run, by command (INFO commandstats calls).",
                                    labels=["command"])
        latency = HistogramMetricFamily(
            "disquette_command_duration_seconds",
            "Time spent running commands in the node (INFO commandstats usec), by command.",
            labels=["command"])
        for name, st in sorted(node.cmdstats().items()):
            label = [name.decode()]
            calls.add_metric(label, st.calls)
            buckets, total = _histogram(st.latency, 0, st.ns)
            latency.add_metric(label, buckets, total)
        yield calls
        yield latency
        for key, value in node.stats_now().items():
            yield CounterMetricFamily(f"disquette_{STAT_NAMES.get(key, key)}",
                                      f"INFO stats {key}.", value=value)

    # ------------------------------------------------------ clients, memory
    def clients_and_memory(self, node):
        yield GaugeMetricFamily("disquette_connected_clients",
                                "Client connections, HTTP requests in progress included "
                                "(INFO connected_clients).", value=len(node.clients))
        yield GaugeMetricFamily("disquette_blocked_clients",
                                "Clients blocked in GETJOB (INFO blocked_clients).",
                                value=node.blocked_count)
        yield GaugeMetricFamily("disquette_memory_used_bytes",
                                "Memory accounted for jobs and queues (INFO used_memory).",
                                value=node.used_memory())
        yield GaugeMetricFamily("disquette_memory_rss_bytes",
                                "Resident set size of the process (INFO used_memory_rss).",
                                value=node.host.rss())
        yield GaugeMetricFamily("disquette_maxmemory_bytes", "maxmemory.",
                                value=node.config.maxmemory)
        yield GaugeMetricFamily("disquette_memory_warning_level",
                                "0 ok, 1 over 75% (external replication), 2 over 95% "
                                "(evicting), 3 full (INFO mem_warning_level).",
                                value=node.memory_level())

    # -------------------------------------------------------------- cluster
    def cluster(self, node):
        c = node.cluster
        if not isinstance(c, Cluster):     # a bare Node: no node table to show
            return
        info = c.m.cluster_info()
        yield GaugeMetricFamily("disquette_cluster_known_nodes",
                                "Known nodes, this one included (CLUSTER INFO).",
                                value=info["cluster_known_nodes"])
        yield GaugeMetricFamily("disquette_cluster_reachable_nodes",
                                "Other nodes reachable (CLUSTER INFO).",
                                value=info["cluster_reachable_nodes"])
        yield GaugeMetricFamily("disquette_cluster_failing_nodes",
                                "Known nodes flagged PFAIL or FAIL.",
                                value=sum(1 for n in c.m.nodes.values() if n.failing))
        yield CounterMetricFamily("disquette_bus_messages_sent",
                                  "Cluster bus messages sent (cluster_stats_messages_sent).",
                                  value=info["cluster_stats_messages_sent"])
        yield CounterMetricFamily("disquette_bus_messages_received",
                                  "Cluster bus messages received "
                                  "(cluster_stats_messages_received).",
                                  value=info["cluster_stats_messages_received"])
        prio = GaugeMetricFamily("disquette_cluster_node_priority",
                                 "HELLO priority of each known node: 1 ok, 5 no link, "
                                 "10 PFAIL, 100 FAIL or leaving.", labels=["node", "address"])
        for node_id, ip, port, priority in c.m.hello_entries():
            prio.add_metric([node_id, f"{ip}:{port}"], priority)
        yield prio

    # ---------------------------------------------------------- persistence
    def persistence(self, node):
        yield GaugeMetricFamily("disquette_loading", "1 while the AOF is loading.",
                                value=int(node.loading))
        aof = self.aof()
        fields = dict(node.host.aof_info() or ())
        yield GaugeMetricFamily("disquette_aof_enabled", "1 when the AOF is on (INFO aof_enabled).",
                                value=fields.get("aof_enabled", 0))
        state = GaugeMetricFamily("disquette_aof_state", "INFO aof_state (1 for the current one).",
                                  labels=["state"])
        current = fields.get("aof_state", "off")
        for s in ("on", "off", "wait_rewrite"):
            state.add_metric([s], int(s == current))
        yield state
        yield GaugeMetricFamily("disquette_aof_last_write_ok",
                                "0 while writes to the AOF fail (MISCONF).",
                                value=int(node.aof_error is None))
        if aof is None:
            return
        yield GaugeMetricFamily("disquette_aof_current_size_bytes", "INFO aof_current_size.",
                                value=fields.get("aof_current_size", 0))
        yield GaugeMetricFamily("disquette_aof_rewrite_in_progress",
                                "INFO aof_rewrite_in_progress.",
                                value=fields.get("aof_rewrite_in_progress", 0))
        buckets, total = _histogram(aof.fsync_latency, 0, aof.fsync_ns)
        h = HistogramMetricFamily("disquette_aof_fsync_duration_seconds",
                                  "AOF fsync latency (INFO aof_fsyncs, aof_fsync_usec).")
        h.add_metric([], buckets, total)
        yield h


def registry_for(node, aof=lambda: None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, aof))
    return registry
