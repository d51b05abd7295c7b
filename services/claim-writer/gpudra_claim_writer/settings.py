"""The claim-writer's settings: one frozen dataclass, every field a flag and an env variable.

Precedence: flag > `GPUDRA_CLAIM_WRITER_<NAME>` (and `GPUDRA_NATS_URL` for the NATS URL) > default.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import field

from gpudra_claim_writer import _settings_loader as loader
from gpudra_claim_writer._settings_loader import doc
from gpudra_claim_writer.errors import SettingsError

ENV_PREFIX = "GPUDRA_CLAIM_WRITER_"
MODES = ("standalone", "kubernetes")
TRACE_EXPORTERS = ("none", "console", "otlp")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the claim-writer can be told; `--help` shows units and defaults."""

    nats_url: str = field(
        default="nats://127.0.0.1:4222", metadata=doc("NATS server URL(s), comma-separated", "URL")
    )
    mode: str = field(
        default="standalone",
        metadata=doc("standalone (claims in NATS KV) or kubernetes (the API server)", "choice"),
    )
    kubeconfig: str = field(
        default="", metadata=doc("kubeconfig for kubernetes mode; empty: in-cluster", "path")
    )
    namespace: str = field(
        default="", metadata=doc("watch claims of this namespace only; empty: all", "namespace")
    )
    consumer: str = field(
        default="claim-writer", metadata=doc("durable JetStream consumer of decisions", "name")
    )
    watch_timeout: float = field(
        default=10.0,
        metadata=doc(
            "a watch idle this long is ended and resumed (bounds recovery after an outage)",
            "seconds",
        ),
    )
    gate_pods: bool = field(
        default=True,
        metadata=doc("lift the gpudra.io/allocation scheduling gate of pods", "bool"),
    )
    health_port: int = field(
        default=8080, metadata=doc("HTTP port of /healthz and /readyz; 0 picks one", "port")
    )
    health_host: str = field(
        default="0.0.0.0", metadata=doc("address the health server binds", "address")
    )
    trace_exporter: str = field(
        default="none", metadata=doc(f"trace exporter: {', '.join(TRACE_EXPORTERS)}", "choice")
    )
    trace_endpoint: str = field(
        default="", metadata=doc("OTLP/HTTP traces endpoint; empty: SDK default", "URL")
    )
    trace_file: str = field(
        default="", metadata=doc("console exporter writes JSON lines here; empty: stdout", "path")
    )
    log_level: str = field(default="INFO", metadata=doc("logging level", "level"))

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
            "python -m gpudra_claim_writer",
            "gpudra claim-writer: claims in, claim events out; decisions in, claim status out.",
        )
        settings = loader.load(
            cls, ENV_PREFIX, parser, argv, os.environ if environ is None else environ
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.mode not in MODES:
            raise SettingsError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.trace_exporter not in TRACE_EXPORTERS:
            raise SettingsError(f"trace exporter must be one of {TRACE_EXPORTERS}")
        if not self.nats_servers:
            raise SettingsError("no NATS URL given")
        if self.watch_timeout <= 0:
            raise SettingsError("watch timeout must be > 0 seconds")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"health port {self.health_port} is not a TCP port")
