"""What is already in use: exclusively allocated devices, shares, and consumed capacity.

`AllocatedState` mirrors Kubernetes' scheduler view: a device allocated without admin access is
in use; a share of a multi-allocatable device is a (device, shareID) pair whose consumed capacity
adds up per device. Admin-access allocations do not mark devices as in use.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpudra_api import AllocationResult, Quantity


class DeviceID(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class InUseDevices(set[DeviceID]):
    """The set of exclusively allocated devices, counting its changes.

    `removals` grows whenever a device leaves the set and `pool_version[(driver, pool)]` whenever
    the set changes for that pool, so that callers may cache what they derive from it (a node is
    full) and know when to look again, however the set is changed: every mutating method of
    `set` (add, discard, remove, pop, clear, the four `*_update` methods and `|=`, `-=`, `&=`,
    `^=`) goes through `add`/`discard` here. Only `set.<method>(s, ...)` called on the base class
    skips the counters; `placement.search.masked` does that on a fresh set on purpose."""

    def __init__(self, items: Iterable[DeviceID] = ()) -> None:
        super().__init__()
        self.removals = 0
        self.pool_version: dict[tuple[str, str], int] = {}
        # (driver, pool) of every removal, in order: who may have become freer since a point
        self.removal_log: list[tuple[str, str]] = []
        for item in items:
            self.add(item)

    def _touch(self, device: DeviceID) -> None:
        key = (device.driver, device.pool)
        self.pool_version[key] = self.pool_version.get(key, 0) + 1

    def add(self, device: DeviceID) -> None:
        if device not in self:
            super().add(device)
            self._touch(device)

    def discard(self, device: DeviceID) -> None:
        if device in self:
            super().discard(device)
            self.removals += 1
            self.removal_log.append((device.driver, device.pool))
            self._touch(device)

    def remove(self, device: DeviceID) -> None:
        if device not in self:
            raise KeyError(device)
        self.discard(device)

    def update(self, *others: Iterable[DeviceID]) -> None:
        for other in others:
            for device in other:
                self.add(device)

    def difference_update(self, *others: Iterable[Any]) -> None:
        for other in others:
            for device in other:
                self.discard(device)

    def pop(self) -> DeviceID:
        if not self:
            raise KeyError("pop from an empty set")
        device = next(iter(self))
        self.discard(device)
        return device

    def clear(self) -> None:
        for device in list(self):
            self.discard(device)

    def intersection_update(self, *others: Iterable[Any]) -> None:
        keep = set(self)
        for other in others:
            keep.intersection_update(other)
        for device in [d for d in self if d not in keep]:
            self.discard(device)

    def symmetric_difference_update(self, other: Iterable[DeviceID]) -> None:
        for device in set(other):
            if device in self:
                self.discard(device)
            else:
                self.add(device)

    def __ior__(self, other: AbstractSet[Any]) -> InUseDevices:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __isub__(self, other: AbstractSet[Any]) -> InUseDevices:  # type: ignore[misc]
        self.difference_update(other)
        return self

    def __iand__(self, other: AbstractSet[Any]) -> InUseDevices:  # type: ignore[misc]
        self.intersection_update(other)
        return self

    def __ixor__(self, other: AbstractSet[Any]) -> InUseDevices:  # type: ignore[override,misc]
        self.symmetric_difference_update(other)
        return self


@dataclass
class AllocatedState:
    devices: set[DeviceID] = field(default_factory=InUseDevices)
    shared: set[tuple[DeviceID, str]] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)
    _shares: dict[DeviceID, int] = field(default_factory=dict, repr=False)
    # Bumped whenever a share or capacity stops being in use (see `releases`).
    _released: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.devices, InUseDevices):
            self.devices = InUseDevices(self.devices)
        for device, _ in self.shared:
            self._shares[device] = self._shares.get(device, 0) + 1

    def add_share(self, device: DeviceID, share_id: str) -> None:
        if (device, share_id) not in self.shared:
            self.shared.add((device, share_id))
            self._shares[device] = self._shares.get(device, 0) + 1

    def remove_share(self, device: DeviceID, share_id: str) -> None:
        if (device, share_id) in self.shared:
            self.shared.discard((device, share_id))
            self._released += 1
            left = self._shares[device] - 1
            if left:
                self._shares[device] = left
            else:
                del self._shares[device]

    @property
    def releases(self) -> int:
        """Grows whenever anything stops being in use; lets callers cache "this node is full"."""
        devices = self.devices
        removals = devices.removals if isinstance(devices, InUseDevices) else 0
        return removals + self._released

    def pool_version(self, driver: str, pool: str) -> int:
        """Changes whenever the exclusively allocated devices of this pool change."""
        devices = self.devices
        if isinstance(devices, InUseDevices):
            return devices.pool_version.get((driver, pool), 0)
        return len(devices)

    def is_allocated(self, device: DeviceID) -> bool:
        """Kubernetes' IsDeviceAllocated: exclusively, or by any share or consumed capacity."""
        return device in self.devices or device in self.capacity or device in self._shares

    def add_capacity(self, device: DeviceID, consumed: dict[str, Quantity]) -> None:
        total = self.capacity.setdefault(device, {})
        for name, value in consumed.items():
            total[name] = total[name] + value if name in total else value

    def remove_capacity(self, device: DeviceID, consumed: dict[str, Quantity]) -> None:
        """Kubernetes' `ConsumedCapacityCollection.Remove`, which kube-scheduler's tracker of
        allocated devices applies when a claim goes: the entry goes once every quantity in it is
        zero, even while a share that consumed zero remains (a state rebuilt from that share keeps
        a zero entry, so the next share skips the counters there; Kubernetes has the same history
        dependence between a running and a restarted scheduler, `state_test.py` pins both)."""
        total = self.capacity.get(device)
        if total is None:
            return
        self._released += 1
        for name, value in consumed.items():
            if name in total:
                total[name] = total[name] - value
        if all(v.is_zero for v in total.values()):
            del self.capacity[device]

    def apply(self, results: Iterable[AllocationResult]) -> None:
        """Record allocations as in use, as kube-scheduler gathers them from allocated claims:
        an admin-access result is not in use at all (a shared one neither), and a share adds
        consumed capacity only when it has some (no empty entry: Kubernetes' aggregated
        capacity gets none, so the next share of the device checks its counters again)."""
        for result in results:
            for r in result.results:
                if r.admin_access:
                    continue
                device = DeviceID(r.driver, r.pool, r.device)
                if r.share_id is not None:
                    self.add_share(device, r.share_id)
                    if r.consumed_capacity:
                        self.add_capacity(device, r.consumed_capacity)
                else:
                    self.devices.add(device)

    def release(self, results: Iterable[AllocationResult]) -> None:
        """Undo `apply` for allocations that are no longer in use."""
        for result in results:
            for r in result.results:
                if r.admin_access:
                    continue
                device = DeviceID(r.driver, r.pool, r.device)
                if r.share_id is not None:
                    self.remove_share(device, r.share_id)
                    if r.consumed_capacity:
                        self.remove_capacity(device, r.consumed_capacity)
                else:
                    self.devices.discard(device)
