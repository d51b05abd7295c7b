"""The claim-writer's settings: one frozen dataclass, every field a flag and an env variable.

The fields every gpudra service has (NATS connection, credentials and TLS, stream replicas, probes,
tracing, logging) come from `gpudra_service.CommonSettings`; this module adds the claim-writer's
own and checks them. Precedence: flag > `GPUDRA_CLAIM_WRITER_<NAME>` > the variable all services
share for that field (`GPUDRA_NATS_URL`, `GPUDRA_NATS_TLS_*`, `GPUDRA_NATS_STREAM_REPLICAS`,
`GPUDRA_HEALTH_PORT`, `GPUDRA_LOG_LEVEL`, `OTEL_TRACES_EXPORTER`; see `gpudra_service.SHARED_ENV`)
> default. `Settings.load` validates what it read; a bad value is a `SettingsError` naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gpudra_claim_writer.errors import SettingsError
from gpudra_service import CommonSettings, doc

ENV_PREFIX = "GPUDRA_CLAIM_WRITER_"
MODES = ("standalone", "kubernetes")


@dataclasses.dataclass(frozen=True)
class Settings(CommonSettings):
    """Everything the claim-writer can be told; `--help` shows units and defaults."""

    ENV_PREFIX = ENV_PREFIX
    PROG = "python -m gpudra_claim_writer"
    DESCRIPTION = (
        "gpudra claim-writer: claims in, claim events out; decisions in, claim status out."
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
    record_events: bool = field(
        default=True,
        metadata=doc(
            "kubernetes mode: record Events (FailedAllocation, Allocated) on claims", "bool"
        ),
    )
    record_consumers: bool = field(
        default=True,
        metadata=doc(
            "standalone mode: add pods to their claims' reservedFor, release when the last goes",
            "bool",
        ),
    )
    mirror_classes: bool = field(
        default=True,
        metadata=doc(
            "kubernetes mode: mirror the cluster's DeviceClasses into the allocator's KV bucket",
            "bool",
        ),
    )

    def validate(self) -> None:
        """Raise `SettingsError` for values the service cannot use (common fields first)."""
        self.validate_common()
        if self.mode not in MODES:
            raise SettingsError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.watch_timeout <= 0:
            raise SettingsError("watch timeout must be > 0 seconds")
