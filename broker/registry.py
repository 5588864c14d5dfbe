# compiled: mypyc (setup.py builds each module whose first line this is)
"""The jobs and queues of one node, as broker/lifecycle.py changes them: the
job registry (job id -> Job, in shards), its accounting, the timer wheel, the
queues, the records for the AOF, the counters, and what job ids and times are
made of. The Node (broker/node.py) is a Registry with its clients, commands
and housekeeping around it; the lifecycle is typed against this class, below
both, so neither imports the other for its types.
"""

from __future__ import annotations

from mypy_extensions import i64

from broker.cluster_hooks import ClusterHooks
from broker.idempotency import IdempotencyKeys
from broker.job import SHARDS, HolderLists, Job, JobIds, job_shard, random_node_id
from broker.queue import Queue
from broker.timers import TimerWheel


class Registry:
    def __init__(self, rng, node_id: str | None, now: int) -> None:
        self.rng = rng                      # random.Random
        self.ids = JobIds(rng)
        self.jitter_state: i64 = rng.getrandbits(31)     # lifecycle.jitter's sequence
        # Our node id, which job ids carry: the broker's one copy of it. The
        # cluster's node table holds it (cluster/membership.py); the cluster
        # layer sets it here at start and when CLUSTER RESET HARD changes it.
        self.myself_id: str = node_id or random_node_id(rng)
        self.job_shards: list[dict] = [{} for _ in range(SHARDS)]
        # The jobs' holder lists, each shared by every job with those holders
        # (broker/job.py).
        self.holders = HolderLists()
        self.job_count = 0
        self.jobs_memory = 0
        self.queues: dict[bytes, Queue] = {}
        self.ready_queues: list[Queue] = []  # got jobs while clients were blocked on them
        self.timers = TimerWheel(now)
        # (ext) ADDJOB ... IDEMPOTENCY: (queue, key) -> job id, for the job's TTL
        self.idempotency: IdempotencyKeys = IdempotencyKeys()
        # Persistence: records for the AOF while `persist` is on (the shell turns
        # it on with the AOF).
        self.persist = False
        self.records: list = []
        # aof-history (ext): also record deliveries, NACKs, requeues, expirations.
        self.persist_history = False
        # The cluster layer (cluster/cluster.py sets itself here); the null
        # object until then: a node without a cluster bus.
        self.cluster: ClusterHooks = ClusterHooks()
        self._ctime_ms: i64 = 0
        self._ctime_seq: i64 = 0
        # shared_time's two entries: (seconds, now) -> now + seconds * 1000
        self._memo_s0 = self._memo_s1 = -1
        self._memo_now0 = self._memo_now1 = 0
        self._memo_t0 = self._memo_t1 = 0
        # INFO stats' counters, in INFO's order (Node.stats_now adds the typed
        # ones the Node moves on every command).
        self.stats = {
            "total_connections_received": 0,
            "total_commands_processed": 0,
            "rejected_connections": 0,
            "expired_jobs": 0,
            "evicted_jobs": 0,
            "evicted_queues": 0,
            "requeued_jobs": 0,
            "total_net_input_bytes": 0,
            "total_net_output_bytes": 0,
            "internal_errors": 0,
            "malformed_bus_messages": 0,
        }

    def get_job(self, jid: bytes) -> Job | None:
        return self.job_shards[job_shard(jid)].get(jid)

    def iter_jobs(self):
        for shard in self.job_shards:
            yield from shard.values()

    def is_registered(self, job: Job) -> bool:
        return self.job_shards[job_shard(job.id)].get(job.id) is job

    def new_ctime(self, now: i64) -> i64:
        """ms * 1e6 + a per-ms counter, so jobs created in one ms keep their order."""
        if now == self._ctime_ms:
            self._ctime_seq += 1
        else:
            self._ctime_ms = now
            self._ctime_seq = 0
        return now * 1_000_000 + self._ctime_seq

    def shared_time(self, now: int, seconds: int) -> int:
        """now + seconds, reusing the int object for equal inputs: a million jobs
        created in a burst share a handful of expire and requeue times (memory per
        job in the pure build). Two entries, as ADDJOB asks for its TTL and then
        its RETRY: a single one would miss every time."""
        if seconds == self._memo_s0 and now == self._memo_now0:
            return self._memo_t0
        if seconds == self._memo_s1 and now == self._memo_now1:
            return self._memo_t1
        t = now + seconds * 1000
        self._memo_s1, self._memo_now1, self._memo_t1 = \
            self._memo_s0, self._memo_now0, self._memo_t0
        self._memo_s0, self._memo_now0, self._memo_t0 = seconds, now, t
        return t

    def take_records(self) -> list:
        """The AOF records produced since the last call (the shell writes them)."""
        records, self.records = self.records, []
        return records
