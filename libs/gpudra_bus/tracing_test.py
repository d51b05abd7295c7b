from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from gpudra_bus import subjects, tracing


@pytest.fixture
def exporter_tracer() -> Iterator[tuple[InMemorySpanExporter, Tracer]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider.get_tracer("test")
    provider.shutdown()


def test_consumer_span_is_child_of_producer_span(
    exporter_tracer: tuple[InMemorySpanExporter, Tracer]
) -> None:
    exporter, tracer = exporter_tracer
    subject = subjects.claims("default", "c1")
    with tracing.publish_span(subject, size=12, tracer=tracer):
        headers = tracing.inject({"Gpudra-Schema": "x;v=1"})
    assert headers["Gpudra-Schema"] == "x;v=1"
    assert headers["traceparent"].startswith("00-")
    with tracing.process_span(subject, headers, size=12, consumer="allocator", tracer=tracer):
        pass
    producer, consumer = exporter.get_finished_spans()
    assert producer.kind is SpanKind.PRODUCER
    assert consumer.kind is SpanKind.CONSUMER
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id
    assert producer.name == "publish gpudra.claims.>"
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.system"] == "nats"
    assert consumer.attributes["messaging.destination.name"] == subject
    assert consumer.attributes["messaging.operation.type"] == "process"
    assert consumer.attributes["messaging.consumer.group.name"] == "allocator"
    assert consumer.attributes["messaging.message.body.size"] == 12


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(None, id="none"),
        pytest.param({}, id="empty"),
        pytest.param({"traceparent": "garbage"}, id="garbage"),
        pytest.param({"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}, id="zero-ids"),
    ],
)
def test_missing_or_bad_context_starts_a_new_trace(
    exporter_tracer: tuple[InMemorySpanExporter, Tracer], headers: Any
) -> None:
    exporter, tracer = exporter_tracer
    with tracing.process_span("not-a-gpudra-subject", headers, tracer=tracer):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert span.name == "process not-a-gpudra-subject"


def test_extract_is_case_insensitive(exporter_tracer: tuple[InMemorySpanExporter, Tracer]) -> None:
    _, tracer = exporter_tracer
    with tracer.start_as_current_span("x") as span:
        headers = tracing.inject()
    ctx = tracing.extract({"TraceParent": headers["traceparent"]})
    assert (
        trace.get_current_span(ctx).get_span_context().trace_id == span.get_span_context().trace_id
    )
