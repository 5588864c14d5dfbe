"""The AOF writer over a simulated disk (cluster/sim.py ``SimDisk``), for the
simulator's broker nodes (server/inprocess.py, server/sim_node.py).

The same records and encoding as the file writer (server/aof.py), and the same
policy object (broker/aof_policy.py) deciding when to fsync, when to rewrite,
which jobs a rewrite keeps and what a failed write does: the seeds test what
production decides. Only the I/O differs: writes and fsyncs happen at once,
and a rewrite replaces the disk's contents in one step.
"""

from __future__ import annotations

from broker import aof_format as fmt
from broker.aof_policy import AOFPolicy


class ProcessExit(BaseException):
    """The node's process exits on the spot (what server/aof.py does with
    os._exit when a write fails under appendfsync always): nothing after it runs,
    no held reply or bus message leaves."""


class DiskAOF:
    def __init__(self, node, config, disk, clock, policy: AOFPolicy | None = None) -> None:
        self.node = node
        self.disk = disk
        self.clock = clock
        self.policy = policy if policy is not None else AOFPolicy(config)
        self.pending: list = []         # records (broker/records.py), in order
        self.unsynced = False
        self.last_fsync = clock()
        self.current_size = self.base_size = len(disk.image())
        self.rewrites = 0

    def append(self, records: list) -> None:
        self.pending.extend(records)

    def flush(self) -> None:
        """Write what is pending, then fsync and rewrite as the policy says.
        Raises ProcessExit when a failed write must stop the process."""
        policy = self.policy
        if self.pending:
            items, self.pending = self.pending, []
            data = fmt.encode_items(items)
            if self.node.persist_history:       # aof-history: a time mark first
                data = fmt.encode_time(self.clock()) + data
            try:
                self.disk.write(data, [i.id for i in items if i.__class__ is not tuple])
            except OSError as e:
                self.pending = items + self.pending     # written again by the next flush
                if policy.write_failed(self.node, e.strerror or str(e)):
                    self.disk.fatal = True
                    raise ProcessExit(self.node.aof_error) from None
                return
            policy.write_succeeded(self.node)
            self.current_size += len(data)
            self.unsynced = True
        now = self.clock()
        if self.unsynced and (policy.fsync_before_replies(rewriting=False)
                              or policy.fsync_due(now, self.last_fsync, rewriting=False)):
            self.disk.fsync()
            self.unsynced = False
            self.last_fsync = now
        if policy.rewrite_due(self.current_size, self.base_size):
            self.rewrite(now)

    def rewrite(self, now: int) -> None:
        """The file's contents become the jobs the policy keeps (fsynced and
        swapped in atomically, as the file writer's rewrite)."""
        jobs = []
        for shard in self.node.job_shards:
            jobs += self.policy.live_jobs(shard.values(), now)
        data = fmt.encode_jobs(jobs) if jobs else b""
        self.disk.replace(data, [j.id for j in jobs])
        self.current_size = self.base_size = len(self.disk.image())
        self.unsynced = False
        self.rewrites += 1
