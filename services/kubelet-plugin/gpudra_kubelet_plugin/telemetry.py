"""Tracing setup for the process: one global TracerProvider with the chosen exporter.

`none` leaves OpenTelemetry's no-op tracer; `console` writes every finished span as one JSON line
(to `trace_file`, or stderr) as soon as it ends, so a killed process loses none; `otlp` batches to
OTLP/HTTP at `trace_endpoint` (empty: the SDK's `OTEL_EXPORTER_OTLP_*` settings). The returned
function flushes and shuts the provider down.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import IO

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

EXPORTERS = ("none", "console", "otlp")
SERVICE_NAME = "gpudra-kubelet-plugin"


def _json_line(span: ReadableSpan) -> str:
    return json.dumps(json.loads(span.to_json()), separators=(",", ":")) + "\n"


def setup_tracing(exporter: str, endpoint: str = "", file: str = "") -> Callable[[], None]:
    """Install the provider globally; returns its shutdown."""
    built = build_provider(exporter, endpoint, file)
    if built is None:
        return lambda: None
    provider, shutdown = built
    trace.set_tracer_provider(provider)
    return shutdown


def build_provider(
    exporter: str, endpoint: str = "", file: str = ""
) -> tuple[TracerProvider, Callable[[], None]] | None:
    """The provider for `exporter` (None for `none`) and its shutdown, not yet installed."""
    if exporter == "none":
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    out: IO[str] | None = None
    if exporter == "console":
        out = open(file, "a", encoding="utf-8") if file else None  # noqa: SIM115 - closed below
        console = ConsoleSpanExporter(out=out or sys.stderr, formatter=_json_line)
        provider.add_span_processor(SimpleSpanProcessor(console))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(otlp))

    def shutdown() -> None:
        provider.shutdown()
        if out is not None:
            out.close()

    return provider, shutdown
