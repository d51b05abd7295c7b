"""The `device` variable of DRA selectors, as the allocator hands it to compiled expressions.

A `DeviceView` is built once per device and never copied per evaluation: attribute and capacity
maps are keyed by domain, then by the short name (`productName`), exactly as the CEL expression
`device.attributes["gpu.nvidia.com"].productName` addresses them. Attribute values are `bool`,
`int`, `str`, `Semver`, or a `tuple` of one of those (a list-typed attribute).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver

__all__ = ["AttributeValue", "DeviceView"]

ScalarAttribute = bool | int | str | Semver
AttributeValue = ScalarAttribute | tuple[ScalarAttribute, ...]


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of one device."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool = False
