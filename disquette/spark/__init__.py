"""Disquette for PySpark: write DataFrames as jobs, stream jobs into Spark.

    from disquette.spark import partition_writer, register

    df.foreachPartition(partition_writer("127.0.0.1:7711,127.0.0.1:7712", "emails"))
    df.write.format("disquette").option("nodes", "...").option("queue", "emails") \\
        .mode("append").save()
    spark.readStream.format("disquette").option("nodes", "...").option("queues", "a,b").load()

The data source is found by Spark without any call (the top-level module
``pyspark_disquette``); ``register(spark)`` registers it explicitly.  Needs
the ``spark`` extra (``pip install 'disquette[spark]'``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .options import Connection, OptionError, WriteOptions
from .rows import SchemaError
from .writes import DisqueWriteError, write_rows

__all__ = ["DisqueWriteError", "DisquetteDataSource", "OptionError", "SchemaError",
           "partition_writer", "register"]


def partition_writer(nodes: Any, queue: str | None = None, *, body_format: str = "raw",
                     batch_size: int = 1000, timeout_ms: int = 5000,
                     asynchronous: bool = False, password: str | None = None,
                     username: str | None = None, replicate: int | None = None,
                     delay: int | None = None, retry: int | None = None,
                     ttl: int | None = None, maxlen: int | None = None,
                     connections: int = 1, **client_options: Any) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition(...)`` that adds every row as a job.

    Each task writes through the SDK's cluster-aware
    :class:`~disquette.Client` (any listed node, failover to the others),
    ``batch_size`` ADDJOBs pipelined a batch on one connection (or up to
    ``connections`` batches in flight at once, each on its own connection:
    faster with synchronous replication), and checks every reply;
    the first refused or lost one fails the task with a
    :class:`DisqueWriteError` naming the queue and the node's reply.  Rows
    map as in the data source: a ``body`` column (string or binary; or
    ``body_format="json"`` for whole rows), optional ``queue``, ``delay``,
    ``retry``, ``ttl``, ``replicate`` columns; the keyword arguments are the
    defaults.  ``foreachPartition`` has no commit step, so a retried task
    adds its rows again: use the data source for no duplicates.
    """
    defaults = {k: v for k, v in (("replicate", replicate), ("delay", delay), ("retry", retry),
                                  ("ttl", ttl)) if v is not None}
    nodes_text = nodes if isinstance(nodes, str) else ",".join(nodes)
    tls = client_options.pop("ssl", None)
    files = {k: client_options.pop(k) for k in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
             if k in client_options}
    if client_options:
        raise TypeError(f"unknown partition_writer option(s): {', '.join(sorted(client_options))}")
    if body_format not in ("raw", "json"):
        raise OptionError(f"body_format must be 'raw' or 'json', not {body_format!r}")
    opts = WriteOptions(conn=Connection(nodes_text, password, username, tls, files),
                        queue=queue, body_format=body_format, defaults=defaults,
                        timeout_ms=timeout_ms, asynchronous=asynchronous,
                        batch_size=batch_size, maxlen=maxlen, staged=False,
                        connections=connections)

    def write_partition(rows: Iterable[Any]) -> None:
        write_rows(opts, rows)

    return write_partition


def register(spark: Any) -> None:
    """Register the ``disquette`` data source with ``spark`` (not needed when
    the package is installed: Spark finds ``pyspark_disquette`` by itself)."""
    from .source import DisquetteDataSource  # optional: pyspark (the `spark` extra)

    spark.dataSource.register(DisquetteDataSource)


def __getattr__(name: str) -> Any:  # the data source class needs pyspark: import lazily
    if name == "DisquetteDataSource":
        from .source import DisquetteDataSource  # optional: pyspark (the `spark` extra)

        return DisquetteDataSource
    raise AttributeError(name)
