"""The CLI's own spans (service `gpudra-cli`), exported to the standalone system's collector.

The CLI plays the kubelet in standalone mode, so its prepare call is part of a claim's life: the
span is opened under the claim-writer's `write claim status` span of that claim (found among the
collected spans), and its W3C context is what the kubelet plugin continues (see `prepare`). The
provider is private to the CLI (never the global one), exports synchronously to a loopback
collector and is shut down by `close`.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, Tracer

from gpudra_standalone import Span

SERVICE = "gpudra-cli"


class CliTracing:
    def __init__(self, endpoint: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=5)
        self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer: Tracer = self.provider.get_tracer("gpudra_cli")

    def close(self) -> None:
        self.provider.shutdown()


def context_of(span: Span | None) -> Context:
    """A context whose parent is `span` (a collected span of another process); empty for None."""
    if span is None:
        return Context()
    parent = SpanContext(
        trace_id=int(span.trace_id, 16),
        span_id=int(span.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent), Context())
