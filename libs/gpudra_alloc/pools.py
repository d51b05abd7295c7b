"""Pools as Kubernetes' allocator sees them from one node.

`gather_pools` keeps, per (driver, pool), only the highest generation among the slices that are
relevant for the node, marks a pool incomplete when not all of its slices are present and invalid
when its contents contradict each other (duplicate device names, unknown counters), and orders
pools by (driver, name), pools with binding conditions last; slices are ordered by name. This is
the order in which first-fit tries devices.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.features import Features
from gpudra_alloc.state import DeviceID
from gpudra_api import CounterSet, Device, Node, NodeSelector, ResourceSlice


class DeviceEntry:
    """One device of one indexed slice, with the per-generation caches that go with it."""

    __slots__ = ("_slice", "device", "id", "matches", "pool_key", "view")

    def __init__(self, device: Device, slice_: ResourceSlice) -> None:
        self.device = device
        # weak: `_ENTRIES` keeps the entries by their slice, and a value that held its key
        # would keep every slice ever read (and its entries) alive, one more per slice change
        self._slice = weakref.ref(slice_)
        self.id = DeviceID(slice_.driver, slice_.pool.name, device.name)
        self.pool_key = (slice_.driver, slice_.pool.name)
        self.view: Any = None  # the CEL view, built on first use
        # selector results by expression; a cached exception is re-raised
        self.matches: dict[str, bool | Exception] = {}

    @property
    def slice(self) -> ResourceSlice:
        """The slice of the device (whoever holds an entry holds its pool, hence its slice)."""
        slice_ = self._slice()
        if slice_ is None:
            raise ReferenceError(f"the slice of device {self.id} is gone")
        return slice_


_ENTRIES: weakref.WeakKeyDictionary[ResourceSlice, list[DeviceEntry]] = weakref.WeakKeyDictionary()


def entries_of(slice_: ResourceSlice) -> list[DeviceEntry]:
    """The device entries of a slice; the same objects for as long as the slice lives."""
    entries = _ENTRIES.get(slice_)
    if entries is None:
        entries = [DeviceEntry(d, slice_) for d in slice_.devices]
        _ENTRIES[slice_] = entries
    return entries


@dataclass
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)
    slices_not_targeting_node: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, CounterSet] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    def device_entries(self) -> list[list[DeviceEntry]]:
        return [entries_of(s) for s in self.slices]


def node_matches(
    node: Node, node_name: str | None, all_nodes: bool | None, selector: NodeSelector | None
) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return selector.matches(node)
    return False


def gather_pools(
    slices_for_node: list[ResourceSlice],
    node: Node,
    features: Features,
    all_slices: list[ResourceSlice],
) -> list[Pool]:
    found: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices_for_node:
        if not features.partitionable_devices and (
            s.per_device_node_selection is not None or s.shared_counters
        ):
            continue
        if s.node_name or s.all_nodes or s.node_selector is not None:
            relevant = node_matches(node, s.node_name, s.all_nodes, s.node_selector)
        elif s.per_device_node_selection:
            relevant = any(
                node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices
            )
        else:
            continue
        if relevant:
            _add_slice(found, s)

    plain: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, name), pool_slices in found.items():
        generation = pool_slices[0].pool.generation
        wanted = pool_slices[0].pool.resource_slice_count
        everything: list[ResourceSlice] | None = None
        if len(pool_slices) != wanted:
            obsolete, everything = _slices_in_pool(all_slices, driver, name, generation)
            if obsolete:
                continue
            if len(everything) != wanted:
                plain.append(Pool(driver, name, incomplete=True))
                continue
        pool = _build_pool(driver, name, pool_slices, features, everything)
        if _has_binding_conditions(pool):
            with_binding.append(pool)
        else:
            plain.append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return plain + with_binding


def _add_slice(found: dict[tuple[str, str], list[ResourceSlice]], s: ResourceSlice) -> None:
    key = (s.driver, s.pool.name)
    current = found.get(key)
    if current is None or s.pool.generation > current[0].pool.generation:
        found[key] = [s]
    elif s.pool.generation == current[0].pool.generation:
        current.append(s)


def _slices_in_pool(
    all_slices: list[ResourceSlice], driver: str, name: str, generation: int
) -> tuple[bool, list[ResourceSlice]]:
    out = []
    for s in all_slices:
        if s.driver != driver or s.pool.name != name:
            continue
        if s.pool.generation > generation:
            return True, []
        if s.pool.generation == generation:
            out.append(s)
    return False, out


def _build_pool(
    driver: str,
    name: str,
    pool_slices: list[ResourceSlice],
    features: Features,
    everything: list[ResourceSlice] | None,
) -> Pool:
    pool_slices = sorted(pool_slices, key=lambda s: s.name)
    device_slices: list[ResourceSlice] = []
    counter_slices: list[ResourceSlice] = []
    not_targeting: list[ResourceSlice] = []
    for s in pool_slices:
        (
            counter_slices
            if features.partitionable_devices and s.shared_counters
            else device_slices
        ).append(s)
    if everything is not None and len(everything) > len(pool_slices):
        targeting = {id(s) for s in pool_slices}
        for s in everything:
            if id(s) in targeting:
                continue
            if features.partitionable_devices and s.shared_counters:
                counter_slices.append(s)
            else:
                not_targeting.append(s)
    names: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in names:
                return Pool(
                    driver, name, invalid=True, invalid_reason=f"duplicate device name {d.name}"
                )
            names.add(d.name)
    if not features.partitionable_devices:
        return Pool(driver, name, slices=device_slices)
    counter_sets: dict[str, CounterSet] = {}
    for s in counter_slices:
        for cs in s.shared_counters:
            if cs.name in counter_sets:
                return Pool(
                    driver,
                    name,
                    invalid=True,
                    invalid_reason=f"duplicate counter set name {cs.name}",
                )
            counter_sets[cs.name] = cs
    for group in (device_slices, not_targeting):
        reason = _check_consumption(counter_sets, group)
        if reason:
            return Pool(driver, name, invalid=True, invalid_reason=reason)
    return Pool(
        driver,
        name,
        slices=device_slices,
        slices_not_targeting_node=not_targeting,
        counter_sets=counter_sets,
    )


def _check_consumption(counter_sets: dict[str, CounterSet], slices: list[ResourceSlice]) -> str:
    for s in slices:
        for d in s.devices:
            for consumption in d.consumes_counters:
                cs = counter_sets.get(consumption.counter_set)
                if cs is None:
                    return f"counter set {consumption.counter_set} not found"
                for counter in consumption.counters:
                    if counter not in cs.counters:
                        return f"counter {counter} not found in counter set {cs.name}"
    return ""


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.binding_conditions for s in pool.slices for d in s.devices)
