from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from gpudra_cli.standalone.errors import StartError
from gpudra_cli.standalone.fleet import Node
from gpudra_cli.standalone.services import (
    AGENT_READY,
    CONTROL_READY,
    PLUGIN_READY,
    NodeDirs,
    child_env,
    control_plane,
    kubelet_plugin,
    node_agent,
)


def test_node_dirs_refuse_paths_too_long_for_unix_sockets() -> None:
    # A short directory of our own: pytest's tmp_path may itself be too deep for a socket.
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="g") as short:
        dirs = NodeDirs.of(Path(short), "n").create()
        assert dirs.registry.is_dir()
        assert dirs.plugins.is_dir()
    with pytest.raises(StartError, match="too deep for Unix sockets"):
        NodeDirs.of(Path("/tmp") / ("x" * 120), "node-a")


@pytest.mark.parametrize(
    ("endpoint", "exporter"),
    [pytest.param("http://127.0.0.1:1", "otlp", id="tracing"), pytest.param("", None, id="off")],
)
def test_child_env(endpoint: str, exporter: str | None) -> None:
    env = child_env("nats://127.0.0.1:4222", endpoint)
    assert env["GPUDRA_NATS_URL"] == "nats://127.0.0.1:4222"
    assert env.get("OTEL_TRACES_EXPORTER") == exporter
    assert env["PYTHONPATH"]


def test_every_service_gets_its_flags() -> None:
    node = Node("l4-pcie-0", "l4-pcie")
    dirs = NodeDirs.of(Path("/run"), node.name)  # not created: only the flags are checked
    specs = [
        *control_plane("nats://x", {}, tracing=False),
        node_agent(node, "nats://x", {}, tracing=True),
        kubelet_plugin(node, dirs, "nats://x", {}, tracing=True),
    ]
    assert [s.module for s in specs] == [
        "gpudra_inventory",
        "gpudra_allocator",
        "gpudra_claim_writer",
        "gpudra_node_agent",
        "gpudra_kubelet_plugin",
    ]
    for spec in specs:
        args = list(spec.args)
        assert args[args.index("--nats-url") + 1] == "nats://x"
        assert args[args.index("--health-port") + 1] == "0"
    assert "simulator:l4-pcie" in specs[-1].args
    assert str(dirs.registry) in specs[-1].args
    assert specs[0].args[specs[0].args.index("--trace-exporter") + 1] == "none"
    # The inventory's lease holder survives a restart by the supervisor (not host:pid).
    assert specs[0].args[specs[0].args.index("--lease-holder") + 1] == "standalone-inventory"


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        pytest.param(CONTROL_READY, "INFO gpudra_allocator: health server on port 41235", id="ctl"),
        pytest.param(
            AGENT_READY, "node-agent for l4-pcie-0 started (simulator profile l4-pcie)", id="agent"
        ),
        pytest.param(
            PLUGIN_READY, "kubelet plugin gpu.nvidia.com serving on node l4-pcie-0", id="plugin"
        ),
    ],
)
def test_readiness_lines_match_what_the_services_print(pattern: object, line: str) -> None:
    assert pattern.search(line)  # type: ignore[attr-defined]
