"""The ``disquette-aof`` PySpark data source: the job history in AOF files as
a DataFrame (batch reads).

    spark.read.format("disquette-aof").load("/var/lib/disquette")      # a data dir
    spark.read.format("disquette-aof").load(["n1/disque.aof", "n2/*.aof"])

The driver lists the files and splits them into ranges of whole records
(disquette/spark/aof_files.py); each task decodes one range into Arrow
batches (disquette/spark/aof_rows.py). Options: ``onDamage`` (``fail``, the
default: a damaged record fails the read naming the file and the offset;
``skip``: it becomes a ``damaged`` row and the read goes on),
``partitionBytes`` (default 64 MB), ``bodyType`` (``string`` or ``binary``).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from .aof_files import FileRange, plan
from .aof_rows import arrow_schema, read_range
from .options import OptionError, _get, _int

NAME = "disquette-aof"
DEFAULT_PARTITION_BYTES = 64 << 20


class AOFReadOptions:
    """The read's options, parsed on the driver."""

    def __init__(self, opts: Mapping[str, str]) -> None:
        self.paths = _paths(opts)
        self.partition_bytes = _int(opts, "partitionBytes", DEFAULT_PARTITION_BYTES, minimum=1)
        on_damage = (_get(opts, "onDamage") or "fail").lower()
        if on_damage not in ("fail", "skip"):
            raise OptionError(f"option 'onDamage' must be 'fail' or 'skip', not {on_damage!r}")
        self.skip_damage = on_damage == "skip"
        body_type = (_get(opts, "bodyType") or "string").lower()
        if body_type not in ("string", "binary"):
            raise OptionError(f"option 'bodyType' must be 'string' or 'binary', not {body_type!r}")
        self.binary_body = body_type == "binary"


def _paths(opts: Mapping[str, str]) -> list[str]:
    # load(path) passes "path"; load([p1, p2]) passes "paths" as a JSON list.
    raw = _get(opts, "paths")
    paths = json.loads(raw) if raw else []
    one = _get(opts, "path")
    if one:
        paths.append(one)
    if not paths:
        raise OptionError("disquette-aof: give the AOF files to read: .load(path) (a node's "
                          "data directory, an .aof file or a glob, or a list of them)")
    return [str(p) for p in paths]


class AOFPartition(InputPartition):
    def __init__(self, fr: FileRange) -> None:
        super().__init__(f"{fr.path}:{fr.start}-{fr.end}")
        self.range = fr


class AOFReader(DataSourceReader):
    def __init__(self, opts: AOFReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan(self.opts.paths, self.opts.partition_bytes, self.opts.skip_damage)
        return [AOFPartition(fr) for fr in ranges]

    def read(self, partition: AOFPartition) -> Iterator[Any]:
        return read_range(partition.range, self.opts.binary_body, self.opts.skip_damage)


class AOFDataSource(DataSource):
    """``spark.read.format("disquette-aof").load(path)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return from_arrow_schema(arrow_schema(AOFReadOptions(self.options).binary_body))

    def reader(self, schema: StructType) -> AOFReader:
        return AOFReader(AOFReadOptions(self.options))
