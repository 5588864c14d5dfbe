"""OpenTelemetry spans for jobs: add, deliver, handle and ack, linked through
the job, when opentelemetry is installed (``pip install 'disquette[otel]'``);
nothing when it is not (the import is tried once, on first use).

The spans (messaging conventions: ``messaging.system`` "disque",
``messaging.destination.name`` the queue, ``messaging.message.id`` the id):

* ``add <queue>`` (PRODUCER): one ``add_job`` call, a child of the caller's
  current span (``add_jobs`` batches make none, nor carry a context);
* ``deliver <queue>`` (CONSUMER): the job's time in a Worker, from GETJOB to
  its outcome (``disquette.outcome``: ok, failed, dead_lettered, returned,
  handed_back, lease_lost); its parent is the producer's ``add`` span when the
  job carries its trace context, so one trace runs from producer to consumer;
* ``handle <queue>``: the handler's run, a child of ``deliver`` and the
  current span inside the handler (``def`` handlers too), error status and
  the exception when it raised;
* ``ack``: one ACKJOB (the Worker acks in batches), with a link to the
  ``deliver`` span of each job it acks.

Where the trace context travels: in the body, as an envelope the SDK writes
and strips (``TRACE_MAGIC``, the W3C ``traceparent``/``tracestate`` as a JSON
object, a newline, then the body as it was).  Not in a job field: Disque jobs
have none to spare, and an (ext) field would need every node to carry it;
the envelope works on any Disque-compatible node, C Disque included.  The
price: consumers other than this SDK (redis-cli, pydisque, the HTTP API) see
the envelope, so a producer writes it only when asked, with
``Client(tracing=True)``.  ``tracing=None`` (the default) makes spans when
opentelemetry is installed and a tracer provider is set, without touching
bodies; ``tracing=False`` makes none.
"""

from __future__ import annotations

import json
from typing import Any, Callable

TRACE_MAGIC = b"\x00disquette-trace\x00"
TRACER_NAME = "disquette"

_otel: Any = None          # the opentelemetry API, once imported; False if not installed
_tracer_cache: tuple[Any, Any] = (None, None)  # (provider, its tracer)


class _Otel:
    """The parts of the opentelemetry API the SDK uses."""

    def __init__(self) -> None:
        # Optional dependency (the `otel` extra): imported on first use only.
        from opentelemetry import propagate, trace

        self.trace, self.propagate = trace, propagate
        self.kind = trace.SpanKind
        self.status_error = trace.Status(trace.StatusCode.ERROR)


def otel() -> Any:
    """The opentelemetry API, or None when it is not installed."""
    global _otel
    if _otel is None:
        try:
            _otel = _Otel()
        except ImportError:
            _otel = False
    return _otel or None


def tracer_for(setting: bool | None) -> Any:
    """The tracer spans are made with, or None for no spans: ``setting``
    False, opentelemetry not installed, or (``setting`` None) no tracer
    provider set."""
    global _tracer_cache
    if setting is False:
        return None
    api = otel()
    if api is None:
        if setting:
            raise RuntimeError("tracing=True needs opentelemetry installed "
                               "(pip install 'disquette[otel]')")
        return None
    provider = api.trace.get_tracer_provider()
    if setting is None and isinstance(provider, api.trace.ProxyTracerProvider):
        return None  # nobody set a provider: spans would go nowhere
    cached_provider, tracer = _tracer_cache
    if cached_provider is not provider:
        tracer = provider.get_tracer(TRACER_NAME)
        _tracer_cache = (provider, tracer)
    return tracer


# -- the body envelope (no opentelemetry needed to strip it)
def wrap_body(raw: bytes, carrier: dict[str, str]) -> bytes:
    return TRACE_MAGIC + json.dumps(carrier, separators=(",", ":")).encode() + b"\n" + raw


def split_body(raw: bytes) -> tuple[bytes, dict[str, str] | None]:
    """``(body as written, carried context)`` of a stored body that starts
    with TRACE_MAGIC; the body unchanged and None if it is not an envelope."""
    start = len(TRACE_MAGIC)
    end = raw.find(b"\n", start)
    if end < 0:
        return raw, None
    try:
        carrier = json.loads(raw[start:end])
    except ValueError:
        return raw, None
    if not isinstance(carrier, dict):
        return raw, None
    return raw[end + 1:], {str(k): str(v) for k, v in carrier.items()}


# -- producers
def _attributes(queue: str, operation: str) -> dict[str, Any]:
    return {"messaging.system": "disque", "messaging.destination.name": queue,
            "messaging.operation.type": operation}


def traced_add(run: Callable[[Any], Any], req: Any, queue: str, setting: bool | None) -> Any:
    """``run(req)`` (an ADDJOB) inside an ``add`` span, the span's context
    carried in the body when ``setting`` is True.  ``run`` is the client's:
    a value (Client) or an awaitable (AsyncClient)."""
    tracer = tracer_for(setting)
    if tracer is None:
        return run(req)
    api = otel()
    span = tracer.start_span(f"add {queue}", kind=api.kind.PRODUCER,
                             attributes=_attributes(queue, "send"))
    if setting:
        carrier: dict[str, str] = {}
        api.propagate.inject(carrier, context=api.trace.set_span_in_context(span))
        if carrier:
            args = req.args
            req = req._replace(args=(args[0], args[1], wrap_body(args[2], carrier), *args[3:]))
    try:
        result = run(req)
    except BaseException as e:
        _end(span, e)
        raise
    if hasattr(result, "__await__"):
        return _await_add(result, span)
    _end(span, None, result)
    return result


async def _await_add(result: Any, span: Any) -> Any:
    try:
        job_id = await result
    except BaseException as e:
        _end(span, e)
        raise
    _end(span, None, job_id)
    return job_id


def _end(span: Any, error: BaseException | None, job_id: Any = None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(otel().status_error)
    elif job_id is not None:
        span.set_attribute("messaging.message.id", str(job_id))
    span.end()


# -- the Worker
def start_deliver(tracer: Any, job: Any) -> Any:
    """The ``deliver`` span of a job just received (its parent: the
    producer's ``add`` span when the job carries its context)."""
    api = otel()
    parent = api.propagate.extract(job.trace_context) if job.trace_context else None
    attrs = _attributes(job.queue, "receive")
    attrs.update({"messaging.message.id": job.id, "disquette.attempts": job.attempts,
                  "disquette.nacks": job.nacks or 0,
                  "disquette.additional_deliveries": job.additional_deliveries or 0})
    return tracer.start_span(f"deliver {job.queue}", context=parent, kind=api.kind.CONSUMER,
                             attributes=attrs)


def handle_span(tracer: Any, deliver: Any, job: Any) -> Any:
    """A context manager: the ``handle`` span, current while it is open."""
    api = otel()
    return tracer.start_as_current_span(
        f"handle {job.queue}", context=api.trace.set_span_in_context(deliver),
        attributes=_attributes(job.queue, "process"))


def current_context(span: Any) -> Any:
    """A context manager making ``span`` current (dead letters added while
    it is open are its children)."""
    return otel().trace.use_span(span, end_on_exit=False)


def end_deliver(span: Any, outcome: str) -> None:
    span.set_attribute("disquette.outcome", outcome)
    span.end()


def start_ack(tracer: Any, command: str, delivered: list[Any]) -> Any:
    """The span of one ACKJOB/FASTACK, linked to each acked job's
    ``deliver`` span (``delivered``: their span contexts)."""
    api = otel()
    return tracer.start_span("ack", kind=api.kind.CLIENT,
                             links=[api.trace.Link(ctx) for ctx in delivered],
                             attributes={"messaging.system": "disque",
                                         "messaging.operation.type": "settle",
                                         "messaging.operation.name": command,
                                         "messaging.batch.message_count": len(delivered)})


def end_ack(span: Any, error: BaseException | None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(otel().status_error)
    span.end()
