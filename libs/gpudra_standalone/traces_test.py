from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from gpudra_standalone.traces import Span, TraceCollector, render_tree


def _provider(service: str, endpoint: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    )
    return provider


def test_receives_real_otlp_exports_across_services(tmp_path: Path) -> None:
    collector = TraceCollector()
    endpoint = collector.start()
    try:
        writer = _provider("claim-writer", endpoint)
        allocator = _provider("allocator", endpoint)
        with writer.get_tracer("t").start_as_current_span("intake default/a") as root:
            ctx = trace.set_span_in_context(root)
            with allocator.get_tracer("t").start_as_current_span("allocate", context=ctx):
                pass
        writer.shutdown()
        allocator.shutdown()
        trace_id = format(root.get_span_context().trace_id, "032x")
        spans = collector.trace(trace_id)
        assert {s.service for s in spans} == {"claim-writer", "allocator"}
        lines = render_tree(spans)
        assert lines[0].startswith("intake default/a [claim-writer]")
        assert lines[1].startswith("  allocate [allocator]")
        out = tmp_path / "traces.json"
        collector.write_otlp_json(out)
        assert len(json.loads(out.read_text())["resourceSpans"]) == 2
    finally:
        collector.stop()


def test_malformed_request_is_rejected_and_changes_nothing() -> None:
    collector = TraceCollector()
    endpoint = collector.start()
    try:
        req = urllib.request.Request(f"{endpoint}/v1/traces", data=b"\xff\xff not protobuf")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=5)
        assert info.value.code == 400
        assert collector.spans == []
    finally:
        collector.stop()


def test_orphans_render_at_top_level() -> None:
    spans = [
        Span("t", "b", "a", "child", "x", 2_000_000, 3_000_000, {}),
        Span("t", "c", "missing", "orphan", "y", 1_000_000, 4_000_000, {}),
    ]
    assert render_tree(spans) == [
        "orphan [y] +0.0 ms, 3.00 ms",
        "child [x] +1.0 ms, 1.00 ms",
    ]
