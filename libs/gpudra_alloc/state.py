"""What is already in use: exclusively allocated devices, shares, and consumed capacity.

`AllocatedState` mirrors Kubernetes' scheduler view: a device allocated without admin access is
in use; a share of a multi-allocatable device is a (device, shareID) pair whose consumed capacity
adds up per device. Admin-access allocations do not mark devices as in use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from gpudra_api import AllocationResult, Quantity


class DeviceID(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass
class AllocatedState:
    devices: set[DeviceID] = field(default_factory=set)
    shared: set[tuple[DeviceID, str]] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)
    _shares: dict[DeviceID, int] = field(default_factory=dict, repr=False)
    # Bumped whenever something stops being in use; lets callers cache "this node is full".
    releases: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        for device, _ in self.shared:
            self._shares[device] = self._shares.get(device, 0) + 1

    def add_share(self, device: DeviceID, share_id: str) -> None:
        if (device, share_id) not in self.shared:
            self.shared.add((device, share_id))
            self._shares[device] = self._shares.get(device, 0) + 1

    def remove_share(self, device: DeviceID, share_id: str) -> None:
        if (device, share_id) in self.shared:
            self.shared.discard((device, share_id))
            self.releases += 1
            left = self._shares[device] - 1
            if left:
                self._shares[device] = left
            else:
                del self._shares[device]

    def is_allocated(self, device: DeviceID) -> bool:
        """Kubernetes' IsDeviceAllocated: exclusively, or by any share or consumed capacity."""
        return device in self.devices or device in self.capacity or device in self._shares

    def add_capacity(self, device: DeviceID, consumed: dict[str, Quantity]) -> None:
        total = self.capacity.setdefault(device, {})
        for name, value in consumed.items():
            total[name] = total[name] + value if name in total else value

    def remove_capacity(self, device: DeviceID, consumed: dict[str, Quantity]) -> None:
        total = self.capacity.get(device)
        if total is None:
            return
        self.releases += 1
        for name, value in consumed.items():
            if name in total:
                total[name] = total[name] - value
        if all(v.is_zero for v in total.values()):
            del self.capacity[device]

    def apply(self, results: Iterable[AllocationResult]) -> None:
        """Record allocations as in use (what a scheduler does after it writes them)."""
        for result in results:
            for r in result.results:
                device = DeviceID(r.driver, r.pool, r.device)
                if r.share_id is not None:
                    self.add_share(device, r.share_id)
                    self.add_capacity(device, r.consumed_capacity or {})
                elif not r.admin_access:
                    self.devices.add(device)

    def release(self, results: Iterable[AllocationResult]) -> None:
        """Undo `apply` for allocations that are no longer in use.

        Remove devices through here (not from `devices` directly): `releases` must move."""
        for result in results:
            for r in result.results:
                device = DeviceID(r.driver, r.pool, r.device)
                if r.share_id is not None:
                    self.remove_share(device, r.share_id)
                    self.remove_capacity(device, r.consumed_capacity or {})
                elif not r.admin_access:
                    self.devices.discard(device)
                    self.releases += 1
