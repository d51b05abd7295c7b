"""Shared counters of partitionable devices during one search (the PartitionableDevices feature).

What a pool has left is computed once per search from its counter sets minus what allocated
devices consume (devices of the pool on any node); devices taken during the search are tracked
on top. As in Kubernetes, availability is keyed by pool name, a counter may go negative in the
"left" view (then nothing fits), and a device that takes counters but is then refused by a later
check keeps them for the rest of the search.
"""

from __future__ import annotations

from gpudra_alloc.pools import DeviceEntry, Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import Quantity

Counters = dict[str, dict[str, Quantity]]  # counter set -> counter -> amount


class CounterLedger:
    def __init__(self, state: AllocatedState) -> None:
        self.state = state
        self.available: dict[str, Counters] = {}
        self.consumed: dict[str, Counters] = {}

    def _left(self, pool: Pool) -> Counters:
        found = self.available.get(pool.name)
        if found is not None:
            return found
        left = {name: dict(cs.counters) for name, cs in pool.counter_sets.items()}
        for group in (pool.slices, pool.slices_not_targeting_node):
            for slice_ in group:
                for device in slice_.devices:
                    if not device.consumes_counters:
                        continue
                    if not self.state.is_allocated(
                        DeviceID(slice_.driver, slice_.pool.name, device.name)
                    ):
                        continue
                    for consumption in device.consumes_counters:
                        counters = left.get(consumption.counter_set, {})
                        for name, value in consumption.counters.items():
                            if name in counters:
                                counters[name] = counters[name] - value
        self.available[pool.name] = left
        return left

    def take(self, entry: DeviceEntry, pool: Pool) -> bool:
        """Take the device's counters; False (and nothing taken) when they do not fit."""
        left = self._left(pool)
        consumed = self.consumed.setdefault(pool.name, {})
        for consumption in entry.device.consumes_counters:
            taken = consumed.setdefault(consumption.counter_set, {})
            for name, value in consumption.counters.items():
                taken[name] = taken[name] + value if name in taken else value
        for set_name, counters in left.items():
            taken = consumed.get(set_name, {})
            for name, value in counters.items():
                used = taken.get(name)
                if (used is not None and value < used) or (used is None and value.sign < 0):
                    self.give_back(entry)
                    return False
        return True

    def give_back(self, entry: DeviceEntry) -> None:
        consumed = self.consumed.get(entry.id.pool, {})
        for consumption in entry.device.consumes_counters:
            taken = consumed.get(consumption.counter_set, {})
            for name, value in consumption.counters.items():
                if name in taken:
                    taken[name] = taken[name] - value
