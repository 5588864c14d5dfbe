"""The ``disquette`` PySpark data source (``pyspark.sql.datasource``).

Where Spark runs each piece (PySpark 4.3):

* ``DataSource(options)``, ``writer()``/``streamWriter()``, ``reader()``
  and ``streamReader()`` run on the driver, in a Python worker; writers and
  readers are pickled and shipped with their options;
* ``write(rows)`` and ``read(partition)`` run in the executors' Python
  workers, once per task attempt (again for a retried or speculative one);
* ``commit``/``abort`` of a writer run on the driver with the commit
  messages of the successful tasks; a stream reader lives in one long-lived
  driver-side process that Spark asks for offsets, partitions and commits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
    DataSourceWriter, InputPartition, WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import (
    BinaryType, IntegerType, StringType, StructField, StructType,
)

from disquette import DisqueError

from . import commits, reads
from .commits import CommitKey
from .options import OptionError, ReadOptions, WriteOptions
from .rows import check_schema
from .writes import DisqueWriteError, StagedJobs, abort_jobs, release_jobs, write_rows

log = logging.getLogger("disquette.spark")

NAME = "disquette"
# Local properties Spark gives the tasks of a micro-batch (MicroBatchExecution):
# the query's id, kept across restarts from its checkpoint, and the batch id.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def read_schema(body_type: str) -> StructType:
    return StructType([
        StructField("queue", StringType(), False),
        StructField("id", StringType(), False),
        StructField("body", BinaryType() if body_type == "binary" else StringType(), True),
        StructField("nacks", IntegerType(), False),
        StructField("additional_deliveries", IntegerType(), False),
    ])


@dataclass
class JobsMessage(WriterCommitMessage):
    """A write task's commit message: the jobs it added."""

    jobs: StagedJobs
    key: CommitKey | None = None    # the write's commit record (commits.py), if keyed
    skipped: bool = False           # that record existed: the task wrote nothing


class JobsPartition(InputPartition):
    """A slice of fetched jobs, carried to the executor as rows (so a
    retried task reads exactly the same rows), plus where to ack them."""

    def __init__(self, rows: list[tuple], node_of: dict[str, str], ack: bool) -> None:
        super().__init__(len(rows))
        self.rows = rows
        self.node_of = node_of
        self.ack = ack


def _split(fetched: reads.Fetched, parts: int, ack: bool) -> list[JobsPartition]:
    rows = fetched.rows
    if not rows:
        return []
    n = max(1, min(parts, len(rows)))
    size = -(-len(rows) // n)
    out = []
    for i in range(0, len(rows), size):
        chunk = rows[i:i + size]
        out.append(JobsPartition(chunk, {r[1]: fetched.node_of[r[1]] for r in chunk}, ack))
    return out


def _ids_of(messages: Sequence[Any], staged_only: bool) -> list[str]:
    ids: list[str] = []
    for m in messages:
        if isinstance(m, JobsMessage):
            ids += m.jobs.staged if staged_only else m.jobs.all_ids()
    return ids


# -- writing ------------------------------------------------------------------

def _stream_key() -> CommitKey | None:
    """The micro-batch a streaming write task belongs to."""
    ctx = TaskContext.get()
    if ctx is None:
        return None
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return CommitKey.stream(query, int(batch)) if query and batch else None


def _key_of(messages: Sequence[Any]) -> CommitKey | None:
    keys = {m.key for m in messages if isinstance(m, JobsMessage) and m.key is not None}
    if len(keys) > 1:
        raise DisqueWriteError(f"disquette: one commit for several writes: {sorted(keys, key=str)}")
    return keys.pop() if keys else None


class _Writer:
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def _key(self) -> CommitKey | None:
        """The key of the write's commit record (None: not kept exactly once)."""
        return CommitKey.write(self.opts.write_id) if self.opts.write_id else None

    def write(self, iterator: Iterator[Any]) -> JobsMessage:
        key = self._key() if self.opts.staged else None
        with self.opts.conn.client() as client:
            if key is not None and commits.recorded(client, key):
                return JobsMessage(StagedJobs(), key, skipped=True)
            return JobsMessage(write_rows(self.opts, iterator, client=client), key)

    def _commit(self, messages: Sequence[Any]) -> None:
        if not self.opts.staged:
            return
        key = _key_of(messages)
        if key is None:
            release_jobs(self.opts.conn, _ids_of(messages, staged_only=True))
        else:
            commits.commit_release(self.opts, key, _ids_of(messages, staged_only=True),
                                   _ids_of(messages, staged_only=False),
                                   any(isinstance(m, JobsMessage) and m.skipped
                                       for m in messages))

    def _abort(self, messages: Sequence[Any]) -> None:
        added = _ids_of(messages, staged_only=False)
        abort_jobs(self.opts.conn, added)
        key = _key_of(messages)
        if key is not None and added:
            commits.abort_release(self.opts, key, added)


class DisquetteWriter(_Writer, DataSourceWriter):
    """Batch write (``df.write.format("disquette")``)."""

    def commit(self, messages: list[Any]) -> None:
        self._commit(messages)

    def abort(self, messages: list[Any]) -> None:
        self._abort(messages)


class DisquetteStreamWriter(_Writer, DataSourceStreamWriter):
    """Streaming write (``df.writeStream.format("disquette")``): each
    micro-batch is committed or aborted as a batch write is, exactly once
    across driver restarts (its commit record is keyed by the query id and
    the batch id: commits.py)."""

    def _key(self) -> CommitKey | None:
        return _stream_key()

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._commit(messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._abort(messages)


# -- reading ------------------------------------------------------------------

def _read(partition: JobsPartition, conn: Any) -> Iterator[tuple]:
    yield from partition.rows
    if partition.ack and partition.rows:
        with conn.client() as client:
            groups: dict[str, list[str]] = {}
            for jid, node in partition.node_of.items():
                groups.setdefault(node, []).append(jid)
            reads.ack(client, groups)


class DisquetteReader(DataSourceReader):
    """Batch read: takes up to ``maxJobs`` jobs when Spark plans the query,
    acks each partition's jobs once its task has read them all."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with self.opts.conn.client() as client:
            fetched = reads.fetch(client, self.opts.queues, self.opts.max_jobs,
                                  self.opts.body_type, self.opts.fetch_timeout_ms)
        return _split(fetched, self.opts.partitions, self.opts.ack) or [
            JobsPartition([], {}, False)]

    def read(self, partition: JobsPartition) -> Iterator[tuple]:
        return _read(partition, self.opts.conn)


class DisquetteStreamReader(DataSourceStreamReader):
    """Streaming read.  Offsets are ``{"seq": n, "ids": {node: [job ids]}}``:
    ``latestOffset`` takes a micro-batch of jobs (kept alive with WORKING),
    ``partitions`` hands them to the tasks inside the partitions, and the
    jobs are acked once Spark has committed the micro-batch (see docs/spark.md)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: Any = None
        self._keepalive: reads.KeepAlive | None = None
        self._batches: dict[int, reads.Fetched] = {}
        self._seq = 0
        self._replanned: set[int] = set()   # batches re-run after a restart, served empty

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.opts.conn.client()
            self._keepalive = reads.KeepAlive(self._client)
        return self._client

    def initialOffset(self) -> dict:
        return {"seq": 0, "ids": {}}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.opts.max_per_trigger)

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        # Spark asks for the next offsets only once the micro-batch that
        # ended at ``start`` is in its commit log: its jobs are done.
        self._ack_through(start)
        want = self.opts.max_per_trigger
        if limit is not None and hasattr(limit, "maxRows"):
            want = min(want, int(limit.maxRows))
        fetched = reads.fetch(self.client, self.opts.queues, want, self.opts.body_type,
                              self.opts.fetch_timeout_ms)
        if not fetched.rows:
            return start
        self._keepalive.add(fetched.node_of)
        self._seq = max(self._seq, int(start.get("seq", 0))) + 1
        self._batches[self._seq] = fetched
        return {"seq": self._seq, "ids": fetched.by_node()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start.get("seq", 0)), int(end.get("seq", 0))
        out: list[InputPartition] = []
        for seq in range(lo + 1, hi + 1):
            fetched = self._batches.get(seq)
            if fetched is None:
                # A micro-batch planned before a restart: its jobs were never
                # acked, so the cluster delivers them again (RETRY).
                self._replanned.add(seq)
                continue
            out += _split(fetched, self.opts.partitions, ack=False)
        return out

    def read(self, partition: JobsPartition) -> Iterator[tuple]:
        return iter(partition.rows)

    def commit(self, end: dict) -> None:
        self._ack_through(end)

    def _ack_through(self, end: dict) -> None:
        seq = int(end.get("seq", 0))
        groups: dict[str, list[str]] = {}
        for s in sorted(k for k in self._batches if k <= seq):
            for node, ids in self._batches.pop(s).by_node().items():
                groups.setdefault(node, []).extend(ids)
        if seq and seq not in self._replanned and seq > self._seq:
            # Committed by an earlier run of this query (before a restart).
            for node, ids in (end.get("ids") or {}).items():
                groups.setdefault(node, []).extend(ids)
        self._seq = max(self._seq, seq)
        if groups:
            self._keepalive_discard(groups)
            reads.ack(self.client, groups)

    def _keepalive_discard(self, groups: dict[str, list[str]]) -> None:
        if self._keepalive is not None:
            for ids in groups.values():
                self._keepalive.discard(ids)

    def stop(self) -> None:
        if self._keepalive is not None:
            self._keepalive.stop()
        if self._client is not None:
            self._client.close()


# -- the data source ----------------------------------------------------------

class DisquetteDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("disquette")``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return read_schema(ReadOptions.from_options(self.options).body_type)

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise OptionError("disquette: only mode('append') is supported (jobs are added, a "
                              "queue is never overwritten)")
        opts = WriteOptions.from_options(self.options)
        check_schema(schema, opts)
        try:
            with opts.conn.client() as client:
                client.ping()
        except DisqueError as e:
            raise DisqueWriteError(f"disquette: cannot reach any node of {opts.conn.nodes!r}: "
                                   f"{e}") from e
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> DisquetteWriter:
        return DisquetteWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DisquetteStreamWriter:
        opts = self._write_options(schema, overwrite)
        if opts.write_id:
            raise OptionError("disquette: option 'writeId' is for batch writes (a streaming "
                              "write is kept exactly once by its query id and batch id)")
        return DisquetteStreamWriter(opts)

    def reader(self, schema: StructType) -> DisquetteReader:
        return DisquetteReader(ReadOptions.from_options(self.options))

    def streamReader(self, schema: StructType) -> DisquetteStreamReader:
        return DisquetteStreamReader(ReadOptions.from_options(self.options))
