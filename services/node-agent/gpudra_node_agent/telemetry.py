"""Tracing for the agent: one global TracerProvider with the chosen exporter, or none.

`none` keeps OpenTelemetry's no-op tracer (trace context is still propagated when a caller's is
present); `console` writes finished spans as JSON lines (to `trace_file` or stdout); `otlp` sends
OTLP/HTTP to the SDK's configured endpoint (OTEL_EXPORTER_OTLP_* variables). Returns the shutdown
function that flushes pending spans.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

EXPORTERS = ("none", "console", "otlp")


def _line(span: ReadableSpan) -> str:
    return json.dumps(json.loads(span.to_json()), separators=(",", ":")) + "\n"


def setup_tracing(exporter: str, file: str = "") -> Callable[[], None]:
    if exporter == "none":
        return lambda: None
    provider = TracerProvider(resource=Resource.create({"service.name": "gpudra-node-agent"}))
    out: IO[str] | None = None
    span_exporter: SpanExporter
    if exporter == "console":
        out = open(file, "a", encoding="utf-8") if file else None  # noqa: SIM115 - closed below
        span_exporter = (
            ConsoleSpanExporter(out=out, formatter=_line)
            if out
            else ConsoleSpanExporter(formatter=_line)
        )
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)

    def shutdown() -> None:
        provider.shutdown()
        if out is not None:
            out.close()

    return shutdown
