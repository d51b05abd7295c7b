from __future__ import annotations

import json
from pathlib import Path

from gpudra_kubelet_plugin.telemetry import SERVICE_NAME, build_provider


def test_none_builds_nothing() -> None:
    assert build_provider("none") is None


def test_console_writes_one_json_line_per_span(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    built = build_provider("console", file=str(path))
    assert built is not None
    provider, shutdown = built
    try:
        with provider.get_tracer("t").start_as_current_span("prepare claim"):
            pass
    finally:
        shutdown()
    (line,) = path.read_text().splitlines()
    span = json.loads(line)
    assert span["name"] == "prepare claim"
    assert span["resource"]["attributes"]["service.name"] == SERVICE_NAME


def test_otlp_builds_a_batching_provider() -> None:
    built = build_provider("otlp", endpoint="http://127.0.0.1:9/v1/traces")
    assert built is not None
    built[1]()
