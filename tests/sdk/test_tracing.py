"""OpenTelemetry spans for add, deliver, handle and ack, linked through the
job, read back from the SDK's in-memory exporter; nothing without
opentelemetry."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from disquette import Client, Worker
from tests.harness import REPO_ROOT

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider (one per process: set here unless a
    test set one before), exporting to memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def named(exporter: InMemorySpanExporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_one_trace_from_producer_to_ack(kind, dnode, spans):
    producer = Client(dnode.addr, tracing=True)  # carries the context in the body
    with trace.get_tracer("signup-app").start_as_current_span("signup") as root:
        jid = producer.add_job("emails", {"to": 42})
    inside: list = []

    if kind == "def":
        def handler(job):
            inside.append((trace.get_current_span().get_span_context(), job.body))
    else:
        async def handler(job):
            inside.append((trace.get_current_span().get_span_context(), job.body))

    Worker(Client(dnode.addr), "emails", handler).run_until_empty(timeout=60)
    s = named(spans)
    (add,), (deliver,), (handle,), (ack,) = (s["add emails"], s["deliver emails"],
                                            s["handle emails"], s["ack"])
    trace_id = root.get_span_context().trace_id
    assert add.parent.span_id == root.get_span_context().span_id
    assert add.kind == trace.SpanKind.PRODUCER and add.attributes["messaging.message.id"] == jid
    # The worker's spans continue the producer's trace, through the job.
    assert deliver.parent.span_id == add.context.span_id and deliver.context.trace_id == trace_id
    assert deliver.kind == trace.SpanKind.CONSUMER
    assert deliver.attributes["messaging.message.id"] == jid
    assert deliver.attributes["disquette.outcome"] == "ok"
    assert handle.parent.span_id == deliver.context.span_id
    assert inside == [(handle.context, {"to": 42})]  # current in the handler; body as sent
    assert [link.context.span_id for link in ack.links] == [deliver.context.span_id]


def test_failure_and_dead_letter_spans(dnode, spans):
    c = Client(dnode.addr, tracing=True)
    c.add_job("emails", {"to": 0})

    def handler(job):
        raise ValueError("no such mailbox")

    Worker(c, "emails", handler, max_attempts=1).run_until_empty(timeout=60)
    s = named(spans)
    (deliver,), (handle,) = s["deliver emails"], s["handle emails"]
    assert handle.status.status_code == StatusCode.ERROR
    assert handle.events[0].attributes["exception.type"] == "ValueError"
    assert deliver.attributes["disquette.outcome"] == "dead_lettered"
    (dead_add,) = s["add emails:dead"]  # the dead letter, added inside the delivery
    assert dead_add.parent.span_id == deliver.context.span_id


def test_envelope_is_only_written_when_asked(dnode, spans):
    raw = redis.Redis.from_url(f"redis://{dnode.addr}")
    plain = Client(dnode.addr)  # tracing=None: spans, bodies untouched
    plain.add_job("a", {"n": 1})
    assert raw.execute_command("QPEEK", "a", 1)[0][2] == b'{"n":1}'
    assert [x.name for x in spans.get_finished_spans()] == ["add a"]
    Client(dnode.addr, tracing=True).add_job("b", {"n": 2})
    stored = raw.execute_command("QPEEK", "b", 1)[0][2]
    assert stored.startswith(b"\x00disquette-trace\x00{\"traceparent\":")
    (job,) = plain.get_jobs("b", nohang=True)  # the SDK strips it
    assert (job.body, job.raw, sorted(job.trace_context)) == ({"n": 2}, b'{"n":2}',
                                                              ["traceparent"])
    assert plain.show(job.id)["body"] == {"n": 2}
    spans.clear()
    Client(dnode.addr, tracing=False).add_job("c", 3)
    assert spans.get_finished_spans() == ()


def test_nothing_without_opentelemetry(dnode):
    """Not installed: no spans, no envelope, no error; and importing the SDK
    imports none of opentelemetry (when installed, redis-py 8 imports its
    metrics API on its own)."""
    script = f"""
import sys
import redis
before = set(sys.modules)
import disquette
assert not [m for m in set(sys.modules) - before if m.startswith("opentelemetry")]
for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[name]
sys.modules["opentelemetry"] = None  # as if not installed
from disquette import Client, Worker, tracing
c = Client("{dnode.addr}")
jid = c.add_job("q", b"plain")
Worker(c, "q", lambda job: None).run_until_empty(timeout=60)
assert tracing.otel() is None and c.show(jid) is None
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
