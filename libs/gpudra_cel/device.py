"""The `device` variable of DRA selectors, as the allocator hands it to compiled expressions.

A `DeviceView` is built once per device and never copied per evaluation: attribute and capacity
maps are keyed by domain, then by the short name (`productName`), exactly as the CEL expression
`device.attributes["gpu.nvidia.com"].productName` addresses them. Attribute values are `bool`,
`int`, `str`, `Semver`, or a `tuple` of one of those (a list-typed attribute).

Compiled selectors read the fields directly. Where the type checker has lost track of the device
(`dyn(device)`, a list of mixed values), it is what Kubernetes hands CEL: a map of its four
fields (`driver`, `allowMultipleAllocations`, `attributes`, `capacity`), any other key being
"no such key", and the two maps of maps yielding an empty map for an unknown domain.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.values import DefaultingMap

__all__ = ["AttributeValue", "DeviceView"]

ScalarAttribute = bool | int | str | Semver
AttributeValue = ScalarAttribute | tuple[ScalarAttribute, ...]


@dataclass(frozen=True, slots=True)
class DeviceView(Mapping[str, object]):
    """What a selector sees of one device (also, as a `Mapping`, the map CEL sees)."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool = False

    def __getitem__(self, key: str) -> object:
        if key == "driver":
            return self.driver
        if key == "allowMultipleAllocations":
            return self.allow_multiple_allocations
        if key == "attributes":
            return DefaultingMap(self.attributes)
        if key == "capacity":
            return DefaultingMap(self.capacity)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)


_KEYS = ("driver", "allowMultipleAllocations", "attributes", "capacity")
