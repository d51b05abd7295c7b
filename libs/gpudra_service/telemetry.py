"""OpenTelemetry tracing for a service: one global TracerProvider with the chosen exporter.

`none` installs nothing (the API's no-op tracer; trace context is still propagated); `console`
writes each finished span as one JSON line (to `file`, or stdout) as it ends, so a process killed
later has lost none of them — the cross-service tests read these lines; `otlp` sends OTLP/HTTP to
`endpoint` (or wherever the standard `OTEL_EXPORTER_OTLP_*` variables say). The returned callable
flushes and shuts the provider down. A console `file` that cannot be opened is a `SettingsError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.util import ns_to_iso_str
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id

from gpudra_service.errors import SettingsError

_RESOURCES: dict[int, tuple[Resource, Any]] = {}


def _context(context: SpanContext) -> dict[str, str]:
    return {
        "trace_id": f"0x{format_trace_id(context.trace_id)}",
        "span_id": f"0x{format_span_id(context.span_id)}",
        "trace_state": repr(context.trace_state),
    }


def _resource(resource: Resource) -> Any:
    # A process has one resource; its JSON is the same for every span, so it is built once.
    known = _RESOURCES.get(id(resource))
    if known is None or known[0] is not resource:
        known = _RESOURCES[id(resource)] = (resource, json.loads(resource.to_json()))
    return known[1]


def span_document(span: ReadableSpan) -> dict[str, Any]:
    """What `ReadableSpan.to_json` writes, as a dict, without re-encoding the resource."""
    status: dict[str, str] = {"status_code": str(span.status.status_code.name)}
    if span.status.description:
        status["description"] = span.status.description
    return {
        "name": span.name,
        "context": _context(span.context) if span.context else None,
        "kind": str(span.kind),
        "parent_id": f"0x{format_span_id(span.parent.span_id)}" if span.parent else None,
        "start_time": ns_to_iso_str(span.start_time) if span.start_time else None,
        "end_time": ns_to_iso_str(span.end_time) if span.end_time else None,
        "status": status,
        "attributes": dict(span.attributes or {}),
        "events": [
            {
                "name": e.name,
                "timestamp": ns_to_iso_str(e.timestamp),
                "attributes": dict(e.attributes or {}),
            }
            for e in span.events
        ],
        "links": [
            {"context": _context(link.context), "attributes": dict(link.attributes or {})}
            for link in span.links
        ],
        "resource": _resource(span.resource),
    }


def _one_line(span: ReadableSpan) -> str:
    # Encoded once, compactly: pretty-printing, parsing and encoding again (and the resource's
    # JSON with every span) was a large share of what a span cost its service.
    return json.dumps(span_document(span), separators=(",", ":")) + "\n"


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
        try:
            out = open(file, "a", encoding="utf-8") if file else None  # noqa: SIM115 - closed below
        except OSError as exc:
            raise SettingsError(f"trace file {file!r} cannot be opened: {exc}") from exc
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
