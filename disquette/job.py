"""A job as a consumer sees it (one entry of a GETJOB or QPEEK reply)."""

from __future__ import annotations

from typing import Any

from .errors import LeaseLost
from .tracing import TRACE_MAGIC, split_body

# A body not decoded yet (``Job.body`` decodes it on first use: a handler that
# reads only ``raw``, or nothing, costs no decoding).
_UNDECODED: Any = object()


def text(value: Any) -> str:
    """A reply's bulk string as ``str`` (queue names and ids are binary safe:
    undecodable bytes survive the round trip through surrogateescape)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


class Job:
    """A job received from a node.

    ``id``, ``queue``; ``body`` (decoded by the client's serializer, or the raw
    bytes when it cannot be decoded) and ``raw`` (the bytes as stored);
    ``nacks`` and ``additional_deliveries`` (``None`` unless fetched
    WITHCOUNTERS, which ``get_jobs`` does by default); ``node``, the
    ``host:port`` that delivered it.  ``lease_lost`` becomes True when the
    Worker learns the job is no longer its own (see :class:`LeaseLost`);
    ``trace_context`` holds the producer's trace context when the body
    carried one (``disquette.tracing``), else None.

    ``ack()``, ``fast_ack()``, ``nack()`` and ``working()`` go to the node that
    delivered the job (another one if it is unreachable); with an
    :class:`~disquette.AsyncClient` they return awaitables.
    """

    # received() below sets these too, without __init__: keep the two in step.
    __slots__ = ("id", "queue", "_body", "raw", "nacks", "additional_deliveries", "node",
                 "_client", "_serializer", "lease_lost", "trace_context")

    def __init__(self, id: str, queue: str, body: Any, raw: bytes, nacks: int | None = None,
                 additional_deliveries: int | None = None, node: str | None = None,
                 client: Any = None, serializer: Any = None,
                 trace_context: dict[str, str] | None = None) -> None:
        self.id = id
        self.queue = queue
        self._body = body
        self.raw = raw
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries
        self.node = node
        self._client = client
        self._serializer = serializer
        self.lease_lost = False
        self.trace_context = trace_context

    @property
    def body(self) -> Any:
        """The body decoded by the client's serializer (on first use), or the
        raw bytes when it cannot be decoded."""
        body = self._body
        if body is _UNDECODED:
            body = self._body = self._serializer.decode(self.raw)
        return body

    @body.setter
    def body(self, value: Any) -> None:
        self._body = value

    @property
    def attempts(self) -> int:
        """This delivery's number: nacks + additional deliveries + 1 (1 when
        the counters were not fetched)."""
        return (self.nacks or 0) + (self.additional_deliveries or 0) + 1

    @property
    def node_prefix(self) -> str:
        """The first 8 hex chars of the id of the node that created the job."""
        return self.id[2:10]

    def ack(self) -> Any:
        return self._client.ack_job(self.id, node=self.node)

    def fast_ack(self) -> Any:
        return self._client.fast_ack(self.id, node=self.node)

    def nack(self) -> Any:
        return self._client.nack_job(self.id, node=self.node)

    def working(self) -> Any:
        """WORKING: postpone the next delivery by the job's RETRY; returns the
        RETRY seconds (raises TooLateError once half the TTL has elapsed).
        Under a Worker: raises :class:`LeaseLost` once the lease is lost."""
        if self.lease_lost:
            raise LeaseLost(self.id, "lost earlier")
        return self._client.working(self.id, node=self.node)

    def __repr__(self) -> str:
        return f"<Job {self.id} queue={self.queue!r} attempts={self.attempts} node={self.node}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


_new_job = object.__new__


def received(entries: list[Any], node: str | None, client: Any, serializer: Any) -> list[Job]:
    """The jobs of a GETJOB ... WITHCOUNTERS reply, whose entries are all
    ``[queue, id, body, "nacks", n, "additional-deliveries", n]``.

    The Worker's hot loop, per job: each Job gets the fields ``__init__``
    gives it, set here without the call (a third of the cost); a queue name
    is decoded once per run of jobs from it, and bodies on first use
    (``Job.body``)."""
    jobs: list[Job] = []
    append = jobs.append
    queue_raw: Any = None
    queue = ""
    for queue_now, job_id, raw, _, nacks, _, additional in entries:
        if queue_now != queue_raw:
            queue_raw, queue = queue_now, text(queue_now)
        carried = None
        # A producer's trace context (tracing.py); its first byte, NUL, is
        # compared first: a third of the cost for the other bodies.
        if raw and raw[0] == 0 and raw.startswith(TRACE_MAGIC):
            raw, carried = split_body(raw)
        job = _new_job(Job)
        job.id = job_id.decode("utf-8", "surrogateescape")
        job.queue = queue
        job._body = _UNDECODED
        job.raw = raw
        job.nacks = nacks
        job.additional_deliveries = additional
        job.node = node
        job._client = client
        job._serializer = serializer
        job.lease_lost = False
        job.trace_context = carried
        append(job)
    return jobs
