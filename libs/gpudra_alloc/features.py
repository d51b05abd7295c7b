"""The optional allocator features, switched as Kubernetes' feature gates switch them.

Names are spelled as Kubernetes' structured allocator spells them. Without an explicit list,
Kubernetes 1.37's defaults apply: everything on except `ListTypeAttributes`. `cel_options()` is
the CEL environment the gates declare (`ConsumableCapacity`: `device.allowMultipleAllocations`;
`ListTypeAttributes`: `includes()` and iterating attribute values).

Every feature set is answered as Kubernetes' `experimental` allocator answers it (its
`incubating` one answers the same while ListTypeAttributes is off). Kubernetes picks its
`stable` allocator instead when ConsumableCapacity, DeviceBindingAndStatus and
ListTypeAttributes are all off; that one ignores capacity requests (no "feature is disabled"
error), refuses a distinctAttribute constraint ("empty constraint"), does not pin a device that
binds to its node, and sorts neither pools nor slices (pools come in Go map order). gpudra does
not follow it there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from gpudra_alloc.errors import ProblemError
from gpudra_cel import CelOptions


@dataclass(frozen=True)
class Features:
    admin_access: bool = True
    consumable_capacity: bool = True
    device_binding_and_status: bool = True
    device_taints: bool = True
    list_type_attributes: bool = False
    partitionable_devices: bool = True
    prioritized_list: bool = True

    @staticmethod
    def from_names(names: Iterable[str]) -> Features:
        """Exactly the named features on, all others off."""
        wanted = set(names)
        unknown = wanted - set(FEATURE_NAMES)
        if unknown:
            raise ProblemError(
                f"unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURE_NAMES)}"
            )
        return Features(**{attr: name in wanted for name, attr in FEATURE_NAMES.items()})

    def names(self) -> list[str]:
        return [name for name, attr in FEATURE_NAMES.items() if getattr(self, attr)]

    def cel_options(self) -> CelOptions:
        """The CEL environment these gates declare for selectors."""
        return CelOptions(
            consumable_capacity=self.consumable_capacity,
            list_type_attributes=self.list_type_attributes,
        )


FEATURE_NAMES: dict[str, str] = {
    "AdminAccess": "admin_access",
    "ConsumableCapacity": "consumable_capacity",
    "DeviceBindingAndStatus": "device_binding_and_status",
    "DeviceTaints": "device_taints",
    "ListTypeAttributes": "list_type_attributes",
    "PartitionableDevices": "partitionable_devices",
    "PrioritizedList": "prioritized_list",
}

assert set(FEATURE_NAMES.values()) == {f.name for f in fields(Features)}
