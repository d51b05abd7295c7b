"""Shared counters of partitionable devices during one search (the PartitionableDevices feature).

What a pool has left is computed once per search from its counter sets minus what allocated
devices consume (devices of the pool on any node); devices taken during the search are tracked
on top. As in Kubernetes, availability is keyed by pool name, a counter may go negative in the
"left" view (then nothing fits), and a device that takes counters but is then refused by a later
check keeps them for the rest of the search.

Arithmetic is exact, as Kubernetes' (inf.Dec) is, but in integers: every amount is counted in
nano units, the finest a parsed quantity has, and only an amount that is not a whole number of
nano units (a quantity built by arithmetic) stays a `Fraction` of them; Python adds and compares
the two kinds exactly. No floats. Each device's consumption is converted once and remembered.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from fractions import Fraction

from gpudra_alloc.pools import DeviceEntry, Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import Device, Quantity, ResourceSlice

Amount = int | Fraction  # nano units: an int whenever the quantity is a whole number of them
Counters = dict[str, dict[str, Amount]]  # counter set -> counter -> amount
# A device's consumption: (counter set, ((counter, amount), ...)) in the order it is written.
Consumption = tuple[tuple[str, tuple[tuple[str, Amount], ...]], ...]

_NANO = 1_000_000_000
_MAX_CACHED = 262_144
# id(device) -> (the device, weakly, and its consumption): a reused id matches only the same
# device, and the entry goes with the device (a replaced slice's devices are not kept alive).
_CONSUMPTION: dict[int, tuple[weakref.ref[Device], Consumption]] = {}
# slice -> its counter-consuming devices with their consumption, for as long as the slice lives.
_CONSUMERS: weakref.WeakKeyDictionary[ResourceSlice, list[tuple[DeviceID, Consumption]]] = (
    weakref.WeakKeyDictionary()
)


def nanos(quantity: Quantity) -> Amount:
    """The exact amount of `quantity` in nano units (an int when it is whole)."""
    scaled = quantity.value * _NANO
    return scaled.numerator if scaled.denominator == 1 else scaled


def consumption_of(device: Device) -> Consumption:
    """What `device` takes from its pool's counter sets, in nano units (remembered per device)."""
    key = id(device)
    found = _CONSUMPTION.get(key)
    if found is not None and found[0]() is device:
        return found[1]
    converted = tuple(
        (c.counter_set, tuple((name, nanos(value)) for name, value in c.counters.items()))
        for c in device.consumes_counters
    )
    if len(_CONSUMPTION) >= _MAX_CACHED:
        _CONSUMPTION.clear()
    _CONSUMPTION[key] = (weakref.ref(device, _forget(key)), converted)
    return converted


def _forget(key: int) -> Callable[[weakref.ref[Device]], None]:
    """A callback that drops the consumption under `key` once its device is gone."""

    def forget(gone: weakref.ref[Device]) -> None:
        found = _CONSUMPTION.get(key)
        if found is not None and found[0] is gone:
            del _CONSUMPTION[key]

    return forget


def consumers_of(slice_: ResourceSlice) -> list[tuple[DeviceID, Consumption]]:
    """The devices of `slice_` that consume counters, with what they take (remembered)."""
    found = _CONSUMERS.get(slice_)
    if found is not None:
        return found
    consumers = [
        (DeviceID(slice_.driver, slice_.pool.name, device.name), consumption_of(device))
        for device in slice_.devices
        if device.consumes_counters
    ]
    _CONSUMERS[slice_] = consumers
    return consumers


class CounterLedger:
    def __init__(self, state: AllocatedState) -> None:
        self.state = state
        self.available: dict[str, Counters] = {}
        self.consumed: dict[str, Counters] = {}

    def _left(self, pool: Pool) -> Counters:
        found = self.available.get(pool.name)
        if found is not None:
            return found
        left: Counters = {
            name: {counter: nanos(value) for counter, value in cs.counters.items()}
            for name, cs in pool.counter_sets.items()
        }
        is_allocated = self.state.is_allocated
        for group in (pool.slices, pool.slices_not_targeting_node):
            for slice_ in group:
                for device_id, consumption in consumers_of(slice_):
                    if not is_allocated(device_id):
                        continue
                    for set_name, amounts in consumption:
                        counters = left.get(set_name)
                        if counters is None:
                            continue
                        for name, value in amounts:
                            if name in counters:
                                counters[name] = counters[name] - value
        self.available[pool.name] = left
        return left

    def take(self, entry: DeviceEntry, pool: Pool) -> bool:
        """Take the device's counters; False (and nothing taken) when they do not fit."""
        left = self._left(pool)
        consumed = self.consumed.setdefault(pool.name, {})
        for set_name, amounts in consumption_of(entry.device):
            taken = consumed.setdefault(set_name, {})
            for name, value in amounts:
                taken[name] = taken.get(name, 0) + value
        for set_name, counters in left.items():
            used = consumed.get(set_name)
            if used is None:
                # nothing taken from this set yet: it fits unless already overdrawn
                if any(value < 0 for value in counters.values()):
                    self.give_back(entry)
                    return False
                continue
            for name, value in counters.items():
                if value < used.get(name, 0):
                    self.give_back(entry)
                    return False
        return True

    def give_back(self, entry: DeviceEntry) -> None:
        consumed = self.consumed.get(entry.id.pool, {})
        for set_name, amounts in consumption_of(entry.device):
            taken = consumed.get(set_name, {})
            for name, value in amounts:
                if name in taken:
                    taken[name] = taken[name] - value
