"""The inventory service's settings: one frozen dataclass, every field a flag and an env variable.

The fields every gpudra service has (NATS connection, credentials and TLS, stream replicas, probes,
tracing, logging) come from `gpudra_service.CommonSettings`; this module adds the inventory's own
and checks them. Precedence: flag > `GPUDRA_INVENTORY_<NAME>` > the variable all services share for
that field (`GPUDRA_NATS_URL`, `GPUDRA_NATS_TLS_*`, `GPUDRA_NATS_STREAM_REPLICAS`,
`GPUDRA_HEALTH_PORT`, `GPUDRA_LOG_LEVEL`, `OTEL_TRACES_EXPORTER`; see `gpudra_service.SHARED_ENV`)
> default. `Settings.load` validates what it read; a bad value is a `SettingsError` naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gpudra_inventory.errors import SettingsError
from gpudra_service import CommonSettings, doc

ENV_PREFIX = "GPUDRA_INVENTORY_"
MODES = ("standalone", "kubernetes")
# Below half a second, renewals (every quarter TTL) compete with the loop on a busy machine;
# above ten minutes a dead leader stalls every slice update for too long.
MIN_LEASE_TTL = 0.5
MAX_LEASE_TTL = 600.0


@dataclasses.dataclass(frozen=True)
class Settings(CommonSettings):
    """Everything the inventory service can be told; `--help` shows units and defaults."""

    ENV_PREFIX = ENV_PREFIX
    PROG = "python -m gpudra_inventory"
    DESCRIPTION = "gpudra inventory: node inventories in, ResourceSlices out."

    mode: str = field(
        default="standalone",
        metadata=doc("standalone (slices in KV only) or kubernetes (also the API)", "choice"),
    )
    kubeconfig: str = field(
        default="", metadata=doc("kubeconfig for kubernetes mode; empty: in-cluster", "path")
    )
    driver: str = field(default="gpu.nvidia.com", metadata=doc("DRA driver name", "name"))
    dynamic_mig: bool = field(
        default=True, metadata=doc("publish free MIG placements (dynamic MIG)", "bool")
    )
    heartbeat_timeout: float = field(
        default=30.0,
        metadata=doc("a node silent this long gets its devices tainted NoSchedule", "seconds"),
    )
    consumer: str = field(
        default="inventory",
        metadata=doc(
            "prefix of this process's own JetStream consumer of inventories (each replica reads "
            "all of them)",
            "name",
        ),
    )
    lease_ttl: float = field(
        default=10.0,
        metadata=doc(
            "leader lease TTL: a leader that stops renewing loses the lease this long after its "
            "last renewal, and a standby takes over about a quarter TTL later (same on every "
            "replica)",
            "seconds",
        ),
    )
    lease_holder: str = field(
        default="",
        metadata=doc(
            "this replica's name in the lease (empty: host:pid); a restarted replica with the "
            "same name takes its lease back at once (use the pod name)",
            "name",
        ),
    )

    api_resync: float = field(
        default=60.0,
        metadata=doc(
            "kubernetes mode: how often the leader compares the API's ResourceSlices with its "
            "pools and writes back what differs (the kubelet deletes a driver's slices of a node "
            "when its kubelet plugin unregisters; edits by hand); 0: never",
            "seconds",
        ),
    )
    api_repair_delay: float = field(
        default=2.0,
        metadata=doc(
            "kubernetes mode: the leader watches gpudra's ResourceSlices and writes a node's "
            "pool again this long after someone else (the kubelet, at its start) deleted its "
            "slices, instead of waiting for the resync; a node wiped again soon after waits "
            "twice as long each time, up to 5 minutes; 0: no watch (the resync repairs)",
            "seconds",
        ),
    )

    def validate(self) -> None:
        """Raise `SettingsError` for values the service cannot use (common fields first)."""
        self.validate_common()
        if self.mode not in MODES:
            raise SettingsError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.api_resync < 0:
            raise SettingsError("API resync must be >= 0 seconds (0: never)")
        if self.api_repair_delay < 0:
            raise SettingsError("API repair delay must be >= 0 seconds (0: no watch)")
        if self.heartbeat_timeout <= 0:
            raise SettingsError("heartbeat timeout must be > 0 seconds")
        if not MIN_LEASE_TTL <= self.lease_ttl <= MAX_LEASE_TTL:
            raise SettingsError(
                f"lease TTL must be between {MIN_LEASE_TTL} and {MAX_LEASE_TTL} seconds, "
                f"got {self.lease_ttl}"
            )
