"""AllocationResult (ResourceClaim.status.allocation) and its resource.k8s.io/v1 JSON form.

`to_json` writes what kube-scheduler writes: omitted optional fields are left out, quantities
use their canonical string form, and the node selector is the one the allocator computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra_api.deviceclass import DeviceConfiguration
from gpudra_api.nodeselector import NodeSelector
from gpudra_api.quantity import Quantity
from gpudra_api.resourceclaim import DeviceToleration


@dataclass(frozen=True)
class DeviceRequestAllocationResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: dict[str, Quantity] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access is not None:
            out["adminAccess"] = self.admin_access
        if self.tolerations:
            out["tolerations"] = [t.to_json() for t in self.tolerations]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {k: str(v) for k, v in sorted(self.consumed_capacity.items())}
        return out


@dataclass(frozen=True)
class DeviceAllocationConfiguration:
    source: str  # "FromClass" or "FromClaim"
    requests: tuple[str, ...]
    config: DeviceConfiguration

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.requests:
            out["requests"] = list(self.requests)
        out.update(self.config.to_json())
        return out


@dataclass(frozen=True)
class AllocationResult:
    results: tuple[DeviceRequestAllocationResult, ...]
    config: tuple[DeviceAllocationConfiguration, ...] = ()
    node_selector: NodeSelector | None = None

    def to_json(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_json() for r in self.results]}
        if self.config:
            devices["config"] = [c.to_json() for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_json()
        return out
