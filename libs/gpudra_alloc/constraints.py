"""matchAttribute and distinctAttribute constraints across the devices of one claim.

Constraints are monotonic: once a device cannot be added, adding more never helps, so the
search prunes there. With ListTypeAttributes, values compare as sets (match: a common element
across all devices; distinct: pairwise disjoint); without it, scalars compare by kind and value.
"""

from __future__ import annotations

from gpudra_alloc.state import DeviceID
from gpudra_api import Device, DeviceAttribute, DeviceConstraint


def lookup_attribute(device: Device, device_id: DeviceID, name: str) -> DeviceAttribute | None:
    attr = device.attributes.get(name)
    if attr is not None:
        return attr
    domain, sep, ident = name.partition("/")
    if not sep or domain != device_id.driver:
        return None
    return device.attributes.get(ident)


def _as_set(attr: DeviceAttribute) -> tuple[str, frozenset[object]]:
    return attr.kind, frozenset(attr.values)


class Constraint:
    """One claim constraint during one search; `add`/`remove` are strictly paired."""

    def __init__(self, spec: DeviceConstraint, list_types: bool) -> None:
        self.request_names = frozenset(spec.requests)
        self.match = spec.match_attribute is not None
        self.attribute = spec.match_attribute or spec.distinct_attribute or ""
        self.list_types = list_types
        self.count = 0
        self.first: DeviceAttribute | None = None
        self.intersection: tuple[str, frozenset[object]] | None = None
        self.seen: dict[str, DeviceAttribute] = {}

    def applies(self, request: str, subrequest: str) -> bool:
        if not self.request_names:
            return True
        if request in self.request_names:
            return True
        return bool(subrequest) and f"{request}/{subrequest}" in self.request_names

    def add(self, request: str, subrequest: str, device: Device, device_id: DeviceID) -> bool:
        if not self.applies(request, subrequest):
            return True
        attr = lookup_attribute(device, device_id, self.attribute)
        if attr is None:
            return False
        if self.match:
            return self._add_match(attr)
        return self._add_distinct(request, attr)

    def remove(self, request: str, subrequest: str) -> None:
        if not self.applies(request, subrequest):
            return
        # As in Kubernetes, removing a device does not widen a match intersection again; it
        # restarts only when the last device is gone.
        if not self.match:
            self.seen.pop(request, None)
        self.count -= 1

    def _add_match(self, attr: DeviceAttribute) -> bool:
        if self.list_types:
            new = _as_set(attr)
            if self.count == 0:
                merged = new
            else:
                assert self.intersection is not None
                kind, values = self.intersection
                if kind != new[0] or not values & new[1]:
                    return False
                merged = (kind, values & new[1])
            self.intersection = merged
            self.count += 1
            return True
        if self.count == 0:
            self.first = attr  # Kubernetes takes any first value, even a list
        else:
            assert self.first is not None
            # Without ListTypeAttributes a list value never equals anything.
            if attr.is_list or self.first.is_list or attr.kind != self.first.kind:
                return False
            if attr.scalar != self.first.scalar:
                return False
        self.count += 1
        return True

    def _add_distinct(self, request: str, attr: DeviceAttribute) -> bool:
        if self.count > 0:
            if self.list_types:
                kind, values = _as_set(attr)
                for other in self.seen.values():
                    other_kind, other_values = _as_set(other)
                    if other_kind == kind and values & other_values:
                        return False
            else:
                if attr.is_list:
                    return False
                for other in self.seen.values():
                    if (
                        not other.is_list
                        and other.kind == attr.kind
                        and other.scalar == attr.scalar
                    ):
                        return False
        self.seen[request] = attr
        self.count += 1
        return True
