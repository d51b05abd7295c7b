from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.telemetry import setup_tracing


def test_console_exporter_writes_one_json_line_per_span(tmp_path: Path) -> None:
    # The global provider can be set once per process, so this runs in a child process.
    out = tmp_path / "spans.jsonl"
    code = textwrap.dedent(
        f"""
        from opentelemetry import trace
        from gpudra_service.telemetry import setup_tracing
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
