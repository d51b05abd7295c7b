"""The allocator's settings: one frozen dataclass, every field a flag and an environment variable.

Precedence: flag > `GPUDRA_ALLOCATOR_<NAME>` (and `GPUDRA_NATS_URL` for the NATS URL) > default.
`Settings.load` validates what it read; a value no component could use is a `SettingsError`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import field

from gpudra_allocator import _settings_loader as loader
from gpudra_allocator._settings_loader import doc
from gpudra_allocator.errors import SettingsError

ENV_PREFIX = "GPUDRA_ALLOCATOR_"
POLICIES = ("topology", "first-fit")
TRACE_EXPORTERS = ("none", "console", "otlp")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the allocator can be told; `--help` shows each field's unit and default."""

    nats_url: str = field(
        default="nats://127.0.0.1:4222", metadata=doc("NATS server URL(s), comma-separated", "URL")
    )
    replica_id: str = field(
        default="", metadata=doc("this replica's name in decisions; empty: <host>-<pid>")
    )
    policy: str = field(
        default="topology", metadata=doc(f"placement policy: {' or '.join(POLICIES)}", "choice")
    )
    device_classes: str = field(
        default="",
        metadata=doc(
            "YAML file of DeviceClasses; empty: the built-in gpu/mig/nvlink classes", "path"
        ),
    )
    consumer: str = field(
        default="allocator", metadata=doc("durable JetStream consumer shared by replicas", "name")
    )
    ack_wait: float = field(
        default=10.0,
        metadata=doc("how long a claim event may stay unacknowledged before redelivery", "seconds"),
    )
    concurrency: int = field(
        default=16, metadata=doc("claim events handled at once by this replica", "events")
    )
    batch: int = field(default=64, metadata=doc("claim events fetched per pull", "messages"))
    retry_interval: float = field(
        default=5.0,
        metadata=doc(
            "unschedulable claims are retried at least this often (and on every change)", "seconds"
        ),
    )
    max_waiting: int = field(
        default=10000, metadata=doc("unschedulable claims held for retry at most", "claims")
    )
    health_port: int = field(
        default=8080, metadata=doc("HTTP port of /healthz and /readyz; 0 picks a free one", "port")
    )
    health_host: str = field(
        default="0.0.0.0", metadata=doc("address the health server binds", "address")
    )
    trace_exporter: str = field(
        default="none", metadata=doc(f"trace exporter: {', '.join(TRACE_EXPORTERS)}", "choice")
    )
    trace_endpoint: str = field(
        default="", metadata=doc("OTLP/HTTP traces endpoint; empty: the SDK default", "URL")
    )
    trace_file: str = field(
        default="", metadata=doc("console exporter writes JSON lines here; empty: stdout", "path")
    )
    log_level: str = field(
        default="INFO", metadata=doc("logging level (DEBUG, INFO, WARNING, ERROR)", "level")
    )

    @property
    def replica(self) -> str:
        return self.replica_id or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]

    @classmethod
    def load(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        parser = loader.build_parser(
            cls,
            ENV_PREFIX,
            "python -m gpudra_allocator",
            "gpudra allocator: turns claim events into reserved, announced allocations.",
        )
        settings = loader.load(
            cls, ENV_PREFIX, parser, argv, os.environ if environ is None else environ
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise SettingsError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.trace_exporter not in TRACE_EXPORTERS:
            raise SettingsError(
                f"trace exporter must be one of {TRACE_EXPORTERS}, got {self.trace_exporter!r}"
            )
        if not self.nats_servers:
            raise SettingsError("no NATS URL given")
        if self.ack_wait <= 0 or self.retry_interval <= 0:
            raise SettingsError("ack wait and retry interval must be > 0 seconds")
        if self.batch < 1 or self.max_waiting < 1 or self.concurrency < 1:
            raise SettingsError("batch, concurrency and max waiting must be >= 1")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"health port {self.health_port} is not a TCP port")
        if not self.consumer.replace("-", "").replace("_", "").isalnum():
            raise SettingsError(f"consumer name {self.consumer!r} must be alphanumeric with - or _")
