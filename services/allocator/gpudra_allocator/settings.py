"""The allocator's settings: one frozen dataclass, every field a flag and an environment variable.

The fields every gpudra service has (NATS connection, credentials and TLS, stream replicas, probes,
tracing, logging) come from `gpudra_service.CommonSettings`; this module adds the allocator's own
and checks them. Precedence: flag > `GPUDRA_ALLOCATOR_<NAME>` > the variable all services share for
that field (`GPUDRA_NATS_URL`, `GPUDRA_NATS_TLS_*`, `GPUDRA_NATS_STREAM_REPLICAS`,
`GPUDRA_HEALTH_PORT`, `GPUDRA_LOG_LEVEL`, `OTEL_TRACES_EXPORTER`; see `gpudra_service.SHARED_ENV`)
> default. `Settings.load` validates what it read; a value no component could use is a
`SettingsError`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import field

from gpudra_allocator.errors import SettingsError
from gpudra_service import CommonSettings, doc

ENV_PREFIX = "GPUDRA_ALLOCATOR_"
POLICIES = ("topology", "first-fit")


@dataclasses.dataclass(frozen=True)
class Settings(CommonSettings):
    """Everything the allocator can be told; `--help` shows each field's unit and default."""

    ENV_PREFIX = ENV_PREFIX
    PROG = "python -m gpudra_allocator"
    DESCRIPTION = "gpudra allocator: turns claim events into reserved, announced allocations."

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
            "claims held for retry (unschedulable, or a CEL selector failing on a device) are "
            "retried at least this often (and on every change)",
            "seconds",
        ),
    )
    max_waiting: int = field(
        default=10000, metadata=doc("unschedulable claims held for retry at most", "claims")
    )
    warmup_delay: float = field(
        default=0.03,
        metadata=doc(
            "after the slices or classes change, rebuild the per-node state once they have been "
            "quiet this long, off the claim path; 0: the first claim after a change rebuilds it",
            "seconds",
        ),
    )

    # The whole-domain reserve of the `topology` policy (docs/PLACEMENT.md); first-fit ignores it.
    reserve: int = field(
        default=0,
        metadata=doc(
            "topology policy only: keep up to this many whole large NVLink domains (8+ GPUs) for "
            "8-GPU claims, as many as such pods wait here (at least --reserve-floor); a smaller "
            "claim that would split one waits instead. 0: off (scoring only)",
            "domains",
        ),
    )
    reserve_floor: int = field(
        default=0,
        metadata=doc(
            "topology policy only: domains the reserve keeps even when no 8-GPU pod waits "
            "(an arriving one finds a whole domain ready); at most --reserve",
            "domains",
        ),
    )
    mig_homes: int = field(
        default=1,
        metadata=doc(
            "topology policy with a reserve only: MIG-capable large domains kept for MIG slices "
            "instead of being held whole; 0: the reserve never holds a MIG-capable domain",
            "domains",
        ),
    )

    @property
    def replica(self) -> str:
        return self.replica_id or f"{socket.gethostname()}-{os.getpid()}"

    def validate(self) -> None:
        """Raise `SettingsError` for values no component could use (common fields first)."""
        self.validate_common()
        if self.policy not in POLICIES:
            raise SettingsError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.ack_wait <= 0 or self.retry_interval <= 0:
            raise SettingsError("ack wait and retry interval must be > 0 seconds")
        if self.warmup_delay < 0:
            raise SettingsError("warm-up delay must be >= 0 seconds")
        if self.batch < 1 or self.max_waiting < 1 or self.concurrency < 1:
            raise SettingsError("batch, concurrency and max waiting must be >= 1")
        if self.reserve < 0 or self.reserve_floor < 0 or self.mig_homes < 0:
            raise SettingsError(
                f"reserve, reserve floor and MIG homes must be >= 0 domains, got reserve="
                f"{self.reserve}, reserve-floor={self.reserve_floor}, mig-homes={self.mig_homes}"
            )
        if self.reserve_floor > self.reserve:
            raise SettingsError(
                f"reserve floor ({self.reserve_floor}) must be at most the reserve "
                f"({self.reserve} domains): the floor is the part of the reserve always held"
            )
        if not self.consumer.replace("-", "").replace("_", "").isalnum():
            raise SettingsError(f"consumer name {self.consumer!r} must be alphanumeric with - or _")
