"""The command lines of gpudra's services in standalone mode, one `ServiceSpec` per process.

Every service talks to the embedded NATS, binds its health server to a free loopback port, and
exports its spans over OTLP/HTTP to the CLI's collector when one is given (the SDK's batch delay is
shortened so a short demo loses none). Readiness is the log line each service's `main` prints once
it serves. Node processes keep their kubelet directories (registry, plugins, CDI) under the run
directory; `NodeDirs` names them, short enough for Unix socket paths.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from gpudra_cli.standalone.errors import StartError
from gpudra_cli.standalone.fleet import Node
from gpudra_standalone import ServiceSpec

DRIVER = "gpu.nvidia.com"
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included
CONTROL_READY = re.compile(r"health server on port \d+")
AGENT_READY = re.compile(r"node-agent for \S+ started")
PLUGIN_READY = re.compile(r"kubelet plugin \S+ serving on node")


@dataclass(frozen=True)
class NodeDirs:
    registry: Path
    plugins: Path
    cdi: Path

    @classmethod
    def of(cls, run_dir: Path, node: str) -> NodeDirs:
        base = run_dir / "nodes" / node
        dirs = cls(base / "registry", base / "plugins", base / "cdi")
        socket = dirs.plugins / DRIVER / "dra.sock"
        if len(str(socket)) > MAX_SOCKET_PATH:
            raise StartError(
                f"run directory {run_dir} is too deep for Unix sockets ({socket} is longer than "
                f"{MAX_SOCKET_PATH} bytes); choose a shorter --store-dir"
            )
        return dirs

    def create(self) -> NodeDirs:
        for path in (self.registry, self.plugins, self.cdi):
            path.mkdir(parents=True, exist_ok=True)
        return self


def child_env(nats_url: str, otlp_endpoint: str) -> dict[str, str]:
    """Environment of every service: this interpreter's import path, NATS, tracing."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONWARNINGS": "ignore",
        "GPUDRA_NATS_URL": nats_url,
        "GPUDRA_LOG_LEVEL": os.environ.get("GPUDRA_LOG_LEVEL", "INFO"),
    }
    if otlp_endpoint:
        env.update(
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp_endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_BSP_SCHEDULE_DELAY="200",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
        )
    return env


def _common(nats_url: str, tracing: bool) -> tuple[str, ...]:
    return (
        "--nats-url",
        nats_url,
        "--health-host",
        "127.0.0.1",
        "--health-port",
        "0",
        "--trace-exporter",
        "otlp" if tracing else "none",
    )


def control_plane(nats_url: str, env: dict[str, str], tracing: bool) -> list[ServiceSpec]:
    common = _common(nats_url, tracing)
    return [
        ServiceSpec(
            "inventory",
            "gpudra_inventory",
            # A stable lease holder: an inventory the supervisor restarts after a crash takes
            # its lease back at once instead of waiting out the old process's TTL.
            (*common, "--heartbeat-timeout", "120", "--lease-holder", "standalone-inventory"),
            env,
            CONTROL_READY,
        ),
        ServiceSpec(
            "allocator",
            "gpudra_allocator",
            (*common, "--replica-id", "allocator-0", "--retry-interval", "1", "--ack-wait", "5"),
            env,
            CONTROL_READY,
        ),
        ServiceSpec(
            "claim-writer",
            "gpudra_claim_writer",
            (*common, "--watch-timeout", "5"),
            env,
            CONTROL_READY,
        ),
    ]


def node_agent(node: Node, nats_url: str, env: dict[str, str], tracing: bool) -> ServiceSpec:
    return ServiceSpec(
        f"node-agent-{node.name}",
        "gpudra_node_agent",
        (
            *_common(nats_url, tracing),
            "--node-name",
            node.name,
            "--simulator-profile",
            node.profile,
            "--utilization-interval",
            "1",
            "--heartbeat-interval",
            "10",
        ),
        env,
        AGENT_READY,
    )


def kubelet_plugin(
    node: Node, dirs: NodeDirs, nats_url: str, env: dict[str, str], tracing: bool
) -> ServiceSpec:
    return ServiceSpec(
        f"kubelet-plugin-{node.name}",
        "gpudra_kubelet_plugin",
        (
            *_common(nats_url, tracing),
            "--node-name",
            node.name,
            "--driver-name",
            DRIVER,
            "--device-source",
            f"simulator:{node.profile}",
            "--registry-dir",
            str(dirs.registry),
            "--plugins-dir",
            str(dirs.plugins),
            "--cdi-dir",
            str(dirs.cdi),
            "--mig-minors-file",
            str(dirs.plugins / "no-mig-minors"),
        ),
        env,
        PLUGIN_READY,
    )
