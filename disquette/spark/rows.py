"""Rows to jobs: which column is the body, which columns set per-row ADDJOB
options, checked against the DataFrame's schema before anything is written.

Columns: ``body`` (string or binary; with ``bodyFormat=json`` the whole row
is the body, as a JSON object), and optionally ``queue`` (string) and
``delay``, ``retry``, ``ttl``, ``replicate`` (integers; null means the
writer's default).
"""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any, Iterable, Iterator

from .options import ROW_OPTIONS, OptionError, WriteOptions

_INT_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")


class SchemaError(ValueError):
    """The DataFrame's columns cannot be written as jobs (the message says why)."""


def _type_name(data_type: Any) -> str:
    return type(data_type).__name__


def check_schema(schema: Any, opts: WriteOptions) -> None:
    """Refuse, before any task runs, a DataFrame the writer cannot map."""
    fields = {f.name.lower(): f for f in schema.fields}
    if opts.body_format == "raw":
        body = fields.get("body")
        if body is None:
            raise SchemaError(
                f"no 'body' column (columns: {', '.join(schema.fieldNames()) or 'none'}); "
                "add one (string or binary) or set .option('bodyFormat', 'json') to send "
                "whole rows as JSON")
        if _type_name(body.dataType) not in ("StringType", "BinaryType"):
            raise SchemaError(f"column 'body' must be string or binary, not "
                              f"{body.dataType.simpleString()}")
    queue = fields.get("queue")
    if queue is not None and _type_name(queue.dataType) != "StringType":
        raise SchemaError(f"column 'queue' must be a string, not {queue.dataType.simpleString()}")
    if queue is None and not opts.queue:
        raise OptionError("no queue: set .option('queue', 'name') or add a 'queue' column")
    for name in ROW_OPTIONS:
        f = fields.get(name)
        if f is not None and _type_name(f.dataType) not in _INT_TYPES:
            raise SchemaError(f"column {name!r} must be an integer, not "
                              f"{f.dataType.simpleString()}")


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _as_dict(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _as_dict(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_as_dict(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_dict(v) for k, v in value.items()}
    return value


class RowMapper:
    """Turns rows into ``add_jobs`` items ``(queue, body, options)``.

    Column positions are looked up once, from the first row's field names,
    so rows may come from ``foreachPartition`` (no schema at hand) or from a
    data source writer (schema checked on the driver already)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self._fields: tuple | None = None

    def _locate(self, row: Any) -> None:
        names = [n.lower() for n in (getattr(row, "__fields__", None) or [])]
        index = {n: i for i, n in enumerate(names)}
        self._body = index.get("body")
        self._queue = index.get("queue")
        self._options = [(name, index[name]) for name in ROW_OPTIONS if name in index]
        self._names = getattr(row, "__fields__", None)
        if self.opts.body_format == "raw" and self._body is None:
            raise SchemaError(f"no 'body' column in row {row!r}; add one (string or binary) or "
                              "use bodyFormat='json'")
        if self._queue is None and not self.opts.queue:
            raise OptionError("no queue: pass queue=... or add a 'queue' column")
        self._fields = tuple(names)

    def item(self, row: Any) -> tuple[str, bytes, dict[str, Any]]:
        if self._fields is None:
            self._locate(row)
        if self.opts.body_format == "json":
            body = json.dumps(_as_dict(row), default=_json_default,
                              separators=(",", ":"), ensure_ascii=False).encode()
        else:
            body = row[self._body]
            if isinstance(body, str):
                body = body.encode()
            elif isinstance(body, (bytes, bytearray, memoryview)):
                body = bytes(body)
            elif body is None:
                raise SchemaError(f"row {row!r} has a null body")
            else:
                raise SchemaError(f"column 'body' must be string or binary, not "
                                  f"{type(body).__name__} (row {row!r})")
        queue = self.opts.queue
        if self._queue is not None and row[self._queue] is not None:
            queue = row[self._queue]
        if not queue:
            raise SchemaError(f"row {row!r} has no queue (null 'queue' and no 'queue' option)")
        options = dict(self.opts.defaults)
        for name, i in self._options:
            value = row[i]
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SchemaError(f"column {name!r} must be an integer, not "
                                      f"{type(value).__name__} (row {row!r})")
                options[name] = value
        return queue, body, options

    def items(self, rows: Iterable[Any]) -> Iterator[tuple[str, bytes, dict[str, Any]]]:
        for row in rows:
            yield self.item(row)
