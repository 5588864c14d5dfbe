"""The options of the ``disquette`` data source and of ``partition_writer``:
parsed once, on the driver, from Spark's string options (case-insensitive),
into plain values that travel to the executors with the pickled writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from disquette import Client

# ADDJOB options a row may set in a column of the same name (or the writer
# as a default, through an option of the same name).
ROW_OPTIONS = ("delay", "retry", "ttl", "replicate")
DEFAULT_BATCH = 1000
# One connection per task by default; a node answers one connection's
# synchronously replicated ADDJOBs one at a time (each waits for its copies),
# so `connections` > 1 keeps several batches in flight for speed.
DEFAULT_CONNECTIONS = 1
DEFAULT_TIMEOUT_MS = 5000

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class OptionError(ValueError):
    """An option the data source cannot use (the message names it)."""


def _get(opts: Mapping[str, str], name: str) -> str | None:
    for key, value in opts.items():  # Spark passes a case-insensitive dict; users may not
        if key.lower() == name.lower():
            return None if value is None else str(value)
    return None


def _int(opts: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = _get(opts, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, not {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(opts, name)
    if raw is None or raw == "":
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


@dataclass
class Connection:
    """How to reach the cluster: ``nodes`` (``"h:p,h:p"`` or a
    ``disque://`` URL), ``password``/``username``, and the TLS hook
    (``tls``, ``tlsCaCerts``, ``tlsCertFile``, ``tlsKeyFile``): passed to
    redis-py's SSL connection once the broker speaks TLS."""

    nodes: str
    password: str | None = None
    username: str | None = None
    tls: bool | None = None
    tls_files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> "Connection":
        nodes = _get(opts, "nodes")
        if not nodes:
            raise OptionError("option 'nodes' is required, e.g. .option('nodes', "
                              "'127.0.0.1:7711,127.0.0.1:7712')")
        files = {}
        for option, kwarg in (("tlsCaCerts", "ssl_ca_certs"), ("tlsCertFile", "ssl_certfile"),
                              ("tlsKeyFile", "ssl_keyfile")):
            value = _get(opts, option)
            if value:
                files[kwarg] = value
        tls = _get(opts, "tls")
        return cls(nodes, _get(opts, "password") or None, _get(opts, "username") or None,
                   None if tls is None else _bool(opts, "tls", False), files)

    def client(self) -> Client:
        extra: dict[str, Any] = dict(self.tls_files)
        if self.tls is not None:
            extra["ssl"] = self.tls
        # One connection at a time per client: a task writes or reads on one.
        return Client(self.nodes, password=self.password, username=self.username,
                      follow_producers=False, **extra)


@dataclass
class WriteOptions:
    """What a writer needs, parsed and checked on the driver."""

    conn: Connection
    queue: str | None
    body_format: str = "raw"            # raw: the body column; json: the whole row
    defaults: dict[str, int] = field(default_factory=dict)
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    asynchronous: bool = False
    batch_size: int = DEFAULT_BATCH
    maxlen: int | None = None
    staged: bool = True                 # tie the jobs to Spark's commit (see writes.py)
    connections: int = DEFAULT_CONNECTIONS  # batches in flight at once per task
    write_id: str | None = None         # a batch write's key for exactly once (commits.py)

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> "WriteOptions":
        body_format = (_get(opts, "bodyFormat") or "raw").lower()
        if body_format not in ("raw", "json"):
            raise OptionError(f"option 'bodyFormat' must be 'raw' or 'json', not {body_format!r}")
        defaults = {}
        for name in ROW_OPTIONS:
            value = _int(opts, name, None, minimum=1 if name in ("ttl", "replicate") else 0)
            if value is not None:
                defaults[name] = value
        return cls(
            conn=Connection.from_options(opts),
            queue=_get(opts, "queue") or None,
            body_format=body_format,
            defaults=defaults,
            timeout_ms=_int(opts, "timeoutMs", DEFAULT_TIMEOUT_MS),
            asynchronous=_bool(opts, "async", False),
            batch_size=_int(opts, "batchSize", DEFAULT_BATCH, minimum=1),
            maxlen=_int(opts, "maxlen", None, minimum=1),
            staged=_bool(opts, "staged", True),
            connections=_int(opts, "connections", DEFAULT_CONNECTIONS, minimum=1),
            write_id=_write_id(opts),
        )


def _write_id(opts: Mapping[str, str]) -> str | None:
    """``writeId``: names a batch write, so that running it again (after a
    driver crash) adds nothing twice; it needs the staged write."""
    write_id = _get(opts, "writeId") or None
    if write_id is not None and not _bool(opts, "staged", True):
        raise OptionError("option 'writeId' needs the staged write (remove staged=false)")
    return write_id


@dataclass
class ReadOptions:
    """What a reader needs: the queues and how many jobs to take."""

    conn: Connection
    queues: list[str]
    max_jobs: int = 10000               # batch read: drain at most this many
    max_per_trigger: int = 10000        # streaming: jobs per micro-batch at most
    partitions: int = 2                 # Spark partitions per batch (at most)
    body_type: str = "string"
    fetch_timeout_ms: int = 100         # how long one fetch may wait for jobs
    ack: bool = True                    # batch read: ack what was read

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> "ReadOptions":
        queues = [q.strip() for q in (_get(opts, "queues") or _get(opts, "queue") or "").split(",")
                  if q.strip()]
        if not queues:
            raise OptionError("option 'queues' is required, e.g. .option('queues', 'a,b')")
        body_type = (_get(opts, "bodyType") or "string").lower()
        if body_type not in ("string", "binary"):
            raise OptionError(f"option 'bodyType' must be 'string' or 'binary', not {body_type!r}")
        return cls(
            conn=Connection.from_options(opts),
            queues=queues,
            max_jobs=_int(opts, "maxJobs", 10000, minimum=1),
            max_per_trigger=_int(opts, "maxJobsPerTrigger", 10000, minimum=1),
            partitions=_int(opts, "numPartitions", 2, minimum=1),
            body_type=body_type,
            fetch_timeout_ms=_int(opts, "fetchTimeoutMs", 100, minimum=1),
            ack=_bool(opts, "ack", True),
        )
