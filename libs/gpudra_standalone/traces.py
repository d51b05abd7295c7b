"""Collects the spans gpudra's services export, and shows one trace as a tree.

Standalone mode runs every service as its own process, so "the in-process exporter" of the demo is
an OTLP/HTTP receiver inside the CLI process: each service exports to it with the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf` settings, exactly as it
would export to a collector in a cluster. Promises: spans are kept in arrival order; a malformed
request gets HTTP 400 and changes nothing; `write_otlp_json` writes every request received as one
OTLP JSON document (the collector's file-exporter shape: `{"resourceSpans": [...]}`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    start_ns: int
    end_ns: int
    attributes: dict[str, str]

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _attr_value(value: object) -> str:
    # AnyValue: exactly one field is set; render it as text.
    for name in ("string_value", "int_value", "double_value", "bool_value"):
        if value.HasField(name):  # type: ignore[attr-defined]
            return str(getattr(value, name))
    return ""


def spans_of(request: ExportTraceServiceRequest) -> list[Span]:
    out: list[Span] = []
    for rs in request.resource_spans:
        service = next(
            (_attr_value(a.value) for a in rs.resource.attributes if a.key == "service.name"),
            "unknown",
        )
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        name=s.name,
                        service=service,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes={a.key: _attr_value(a.value) for a in s.attributes},
                    )
                )
    return out


class _Handler(BaseHTTPRequestHandler):
    collector: TraceCollector  # set on the per-collector subclass

    def do_POST(self) -> None:  # (the stdlib's spelling)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message = ExportTraceServiceRequest()
        try:
            message.ParseFromString(body)
        except DecodeError:
            self.send_error(400, "not an OTLP ExportTraceServiceRequest")
            return
        self.collector.add(message)
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the demo's output is the span tree, not an access log


@dataclass
class TraceCollector:
    """An OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf) on a loopback port.

    It serves from its own thread, so exporters in this process (which block while they export)
    and in child processes can both reach it whatever the caller's event loop is doing.
    """

    spans: list[Span] = field(default_factory=list)
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    endpoint: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, message: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests.append(message)
            self.spans.extend(spans_of(message))

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        handler = type("Handler", (_Handler,), {"collector": self})
        self._server = ThreadingHTTPServer((host, port), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="otlp").start()
        self.endpoint = f"http://{host}:{self._server.server_address[1]}"
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def write_otlp_json(self, path: Path) -> None:
        merged = ExportTraceServiceRequest()
        with self._lock:
            for request in self.requests:
                merged.resource_spans.extend(request.resource_spans)
        doc = json_format.MessageToDict(merged)
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def render_tree(spans: Iterable[Span]) -> list[str]:
    """One line per span, children indented under parents, siblings in start order:
    `name [service] +offset ms, duration ms`."""
    spans = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    if not spans:
        return []
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for s in spans:
        children.setdefault(s.parent_id if s.parent_id in ids else "", []).append(s)
    t0 = spans[0].start_ns
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            offset = (s.start_ns - t0) / 1e6
            lines.append(
                f"{'  ' * depth}{s.name} [{s.service}] +{offset:.1f} ms, {s.duration_ms:.2f} ms"
            )
            walk(s.span_id, depth + 1)

    walk("", 0)
    return lines


def services_in(spans: Iterable[Span]) -> set[str]:
    return {s.service for s in spans}
