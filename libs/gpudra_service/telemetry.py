"""OpenTelemetry tracing for a service: one global TracerProvider with the chosen exporter.

`none` installs nothing (the API's no-op tracer; trace context is still propagated); `console`
writes each finished span as one JSON line (to `file`, or stdout) as it ends, so a process killed
later has lost none of them — the cross-service tests read these lines; `otlp` sends OTLP/HTTP to
`endpoint` (or wherever the standard `OTEL_EXPORTER_OTLP_*` variables say). The returned callable
flushes and shuts the provider down.
"""

from __future__ import annotations

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

from gpudra_service.errors import SettingsError


def _one_line(span: ReadableSpan) -> str:
    # The SDK's own JSON without indentation is already one line: encoding it once (instead of
    # pretty-printing, parsing and encoding again) halves what every span costs its service.
    return str(span.to_json(indent=None)) + "\n"


def setup_tracing(
    service: str, exporter: str, endpoint: str = "", file: str = ""
) -> Callable[[], None]:
    """Install the provider for `service`; returns the shutdown function."""
    if exporter == "none":
        return lambda: None
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    out: IO[str] | None = None
    span_exporter: SpanExporter
    if exporter == "console":
        out = open(file, "a", encoding="utf-8") if file else None  # noqa: SIM115 - closed below
        span_exporter = (
            ConsoleSpanExporter(out=out, formatter=_one_line)
            if out is not None
            else ConsoleSpanExporter(formatter=_one_line)
        )
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    else:
        raise SettingsError(f"unknown trace exporter {exporter!r}")
    trace.set_tracer_provider(provider)

    def shutdown() -> None:
        provider.shutdown()
        if out is not None:
            out.close()

    return shutdown
