from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from gpudra_service.errors import SettingsError
from gpudra_service.telemetry import _one_line, setup_tracing, span_document


def test_console_exporter_writes_one_json_line_per_span(tmp_path: Path) -> None:
    # The global provider can be set once per process, so this runs in a child process.
    out = tmp_path / "spans.jsonl"
    code = textwrap.dedent(
        f"""
        from opentelemetry import trace
        from gpudra_service.telemetry import _one_line, setup_tracing, span_document
        shutdown = setup_tracing("allocator", "console", file={str(out)!r})
        with trace.get_tracer("t").start_as_current_span("allocate default/a"):
            pass
        shutdown()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": ":".join(sys.path)})
    (line,) = out.read_text().splitlines()
    span = json.loads(line)
    assert span["name"] == "allocate default/a"
    assert span["resource"]["attributes"]["service.name"] == "allocator"


def test_none_installs_nothing() -> None:
    setup_tracing("x", "none")()


def test_unknown_exporter_is_an_error() -> None:
    with pytest.raises(SettingsError):
        setup_tracing("x", "jaeger")


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param("root", id="root-span"),
        pytest.param("child", id="child-with-events-links-status"),
    ],
)
def test_span_lines_say_what_the_sdk_says(shape: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "allocator"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent", attributes={"a": 1, "b": "two"}) as parent:
        if shape == "child":
            with tracer.start_as_current_span(
                "child", kind=SpanKind.CONSUMER, links=[Link(parent.get_span_context(), {"l": 1})]
            ) as child:
                child.add_event("seen", {"n": 3})
                child.set_status(Status(StatusCode.ERROR, "broken"))
    for span in exporter.get_finished_spans():
        assert span_document(span) == json.loads(span.to_json())
        assert json.loads(_one_line(span)) == json.loads(span.to_json())
        assert _one_line(span).count("\n") == 1
