"""The node-agent's settings: one frozen dataclass; every field is a flag and an env variable.

Precedence: flag > `GPUDRA_NODE_AGENT_<NAME>` > a few conventional fallbacks (`NODE_NAME` from the
downward API, `GPUDRA_NATS_URL`) > default. `Settings.load` validates what it read and raises
`SettingsError` with one readable line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from gpudra_node_agent.errors import SettingsError

ENV_PREFIX = "GPUDRA_NODE_AGENT_"
#: Conventional environment variables read when the prefixed one is absent.
FALLBACK_ENV = {
    "node_name": "NODE_NAME",
    "nats_url": "GPUDRA_NATS_URL",
    "nats_tls_ca": "GPUDRA_NATS_TLS_CA",
    "nats_tls_cert": "GPUDRA_NATS_TLS_CERT",
    "nats_tls_key": "GPUDRA_NATS_TLS_KEY",
    "stream_replicas": "GPUDRA_NATS_STREAM_REPLICAS",
    "health_port": "GPUDRA_HEALTH_PORT",
    "log_level": "GPUDRA_LOG_LEVEL",
    "trace_exporter": "OTEL_TRACES_EXPORTER",
}
TRACE_EXPORTERS = ("none", "console", "otlp")


def doc(help_text: str, unit: str = "") -> dict[str, str]:
    return {"help": help_text, "unit": unit}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the node-agent can be told; `--help` shows each field's unit and default."""

    node_name: str = field(
        default="", metadata=doc("this node's name (DNS subdomain); empty: the host name", "name")
    )
    nats_url: str = field(
        default="nats://127.0.0.1:4222", metadata=doc("NATS server URL(s), comma-separated", "URL")
    )
    nats_creds: str = field(
        default="", metadata=doc("NATS credentials file (JWT + NKey); empty: none", "path")
    )
    nats_tls_ca: str = field(default="", metadata=doc("CA bundle to verify NATS TLS", "path"))
    nats_tls_cert: str = field(default="", metadata=doc("client certificate for NATS mTLS", "path"))
    nats_tls_key: str = field(default="", metadata=doc("client key for NATS mTLS", "path"))
    simulator_profile: str = field(
        default="",
        metadata=doc("run this simulator profile instead of NVML (`gpudra profiles`)", "name"),
    )
    fallback_profile: str = field(
        default="",
        metadata=doc("simulator profile to run when the NVML library is missing", "name"),
    )
    simulator_faults: str = field(
        default="",
        metadata=doc("YAML fault script for the simulator (XID at T, lost GPU, ECC)", "path"),
    )
    poll_interval: float = field(
        default=2.0, metadata=doc("health (XID, ECC, lost GPU) polling period", "seconds")
    )
    discovery_interval: float = field(
        default=30.0, metadata=doc("full rediscovery period (also after health changes)", "seconds")
    )
    heartbeat_interval: float = field(
        default=15.0, metadata=doc("republish an unchanged inventory this often", "seconds")
    )
    utilization_interval: float = field(
        default=10.0, metadata=doc("utilisation sampling period; 0 disables", "seconds")
    )
    xid_hold: float = field(
        default=300.0,
        metadata=doc("an XID condition clears after this long without another", "seconds"),
    )
    stream_replicas: int = field(
        default=1, metadata=doc("JetStream replicas of the inventory stream if it must be created")
    )
    health_port: int = field(
        default=8080, metadata=doc("HTTP port of /healthz and /readyz; 0 picks a free one", "port")
    )
    health_host: str = field(default="0.0.0.0", metadata=doc("address the health server binds"))
    trace_exporter: str = field(
        default="none", metadata=doc(f"trace exporter: {', '.join(TRACE_EXPORTERS)}", "choice")
    )
    trace_file: str = field(
        default="", metadata=doc("console exporter writes JSON lines here; empty: stdout", "path")
    )
    log_level: str = field(default="INFO", metadata=doc("logging level", "level"))

    @property
    def node(self) -> str:
        return self.node_name or socket.gethostname().lower()

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]

    def validate(self) -> Settings:
        for name in ("poll_interval", "discovery_interval", "heartbeat_interval"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name.replace('_', '-')} must be > 0 seconds")
        if self.utilization_interval < 0 or self.xid_hold < 0:
            raise SettingsError("utilization-interval and xid-hold must not be negative")
        if not self.nats_servers:
            raise SettingsError("no NATS URL given")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"health-port {self.health_port} is not a TCP port")
        if self.stream_replicas < 1:
            raise SettingsError("stream-replicas must be >= 1")
        if self.trace_exporter not in TRACE_EXPORTERS:
            raise SettingsError(f"trace-exporter must be one of {', '.join(TRACE_EXPORTERS)}")
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise SettingsError(f"log-level {self.log_level!r} is not a logging level")
        if bool(self.nats_tls_cert) != bool(self.nats_tls_key):
            raise SettingsError("nats-tls-cert and nats-tls-key go together")
        return self

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog="python -m gpudra_node_agent",
            description="gpudra node-agent: publishes this node's GPUs, their health and use.",
        )
        for f in dataclasses.fields(cls):
            env = ENV_PREFIX + f.name.upper()
            unit = f" [{f.metadata['unit']}]" if f.metadata.get("unit") else ""
            parser.add_argument(
                "--" + f.name.replace("_", "-"),
                dest=f.name,
                default=None,
                help=f"{f.metadata['help']}{unit} (env {env}; default {f.default!r})",
            )
        return parser

    @classmethod
    def load(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        env = os.environ if environ is None else environ
        args = cls.parser().parse_args(argv)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = getattr(args, f.name)
            if raw is None:
                raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None and f.name in FALLBACK_ENV:
                raw = env.get(FALLBACK_ENV[f.name])
            if raw is None:
                continue
            kind: type[Any] = type(f.default)
            try:
                values[f.name] = kind(raw)
            except ValueError as exc:
                raise SettingsError(
                    f"{f.name.replace('_', '-')}: {raw!r} is not a {kind.__name__}"
                ) from exc
        return cls(**values).validate()
