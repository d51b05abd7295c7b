"""Running the allocator's per-node search under a stricter in-use state.

Placement never picks devices itself: it asks `Allocator` (Kubernetes' search) for solutions,
sometimes with extra devices marked in use (a *mask*) to steer the search towards one NVLink
domain or onto partitioned GPUs. That is sound: a device set that is a valid allocation while
more devices are in use is valid with fewer in use (exclusive use, counters and capacity only
ever shrink what fits), so every solution is one Kubernetes' allocator accepts on the real state.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.pools import Pool
from gpudra_alloc.state import AllocatedState, DeviceID, InUseDevices
from gpudra_api import AllocationResult, Node, ResourceClaim


def masked(state: AllocatedState, mask: set[DeviceID]) -> AllocatedState:
    """A copy of `state` with the `mask` devices also in use.

    The copy's in-use set is filled in one step (C speed: a state copy costs little even with
    thousands of devices in use); its change counters start from zero, as for any new set."""
    devices = InUseDevices()
    set.update(devices, state.devices)
    set.update(devices, mask)
    return AllocatedState(
        devices=devices,
        shared=set(state.shared),
        capacity={k: dict(v) for k, v in state.capacity.items()},
    )


@dataclass
class _Layout:
    """What `safe_mask` needs of a node's pools, computed once per pools object."""

    # The pools, weakly: a reused id matches only the same pools (then the layout is the same),
    # and the cache keeps no replaced pools (nor their slices) alive; it forgets the layout
    # when the first of them goes.
    pools: tuple[weakref.ref[Pool], ...]
    devices: frozenset[DeviceID]
    plain: frozenset[DeviceID]  # devices that consume no counters
    # (pool, counter set) -> its devices and the counters each takes; the full set's names
    by_set: dict[tuple[str, str], list[tuple[DeviceID, frozenset[str]]]]
    totals: dict[tuple[str, str], frozenset[str]]


_LAYOUTS: dict[int, _Layout] = {}
_MAX_LAYOUTS = 65_536


def _layout(pools: list[Pool]) -> _Layout:
    key = id(pools)
    found = _LAYOUTS.get(key)
    if (
        found is not None
        and len(found.pools) == len(pools)
        and all(ref() is pool for ref, pool in zip(found.pools, pools, strict=True))
    ):
        return found
    devices: set[DeviceID] = set()
    plain: set[DeviceID] = set()
    by_set: dict[tuple[str, str], list[tuple[DeviceID, frozenset[str]]]] = {}
    totals: dict[tuple[str, str], frozenset[str]] = {}
    for pool in pools:
        for name, counter_set in pool.counter_sets.items():
            totals[(pool.name, name)] = frozenset(counter_set.counters)
        for entries in pool.device_entries():
            for entry in entries:
                devices.add(entry.id)
                consumes = entry.device.consumes_counters
                if not consumes:
                    plain.add(entry.id)
                    continue
                for c in consumes:
                    by_set.setdefault((entry.id.pool, c.counter_set), []).append(
                        (entry.id, frozenset(c.counters))
                    )
    if len(_LAYOUTS) >= _MAX_LAYOUTS:
        _LAYOUTS.clear()
    refs = tuple(
        weakref.ref(pool, _forget(key)) if index == 0 else weakref.ref(pool)
        for index, pool in enumerate(pools)
    )
    layout = _Layout(refs, frozenset(devices), frozenset(plain), by_set, totals)
    if refs:  # no pools: nothing to forget it by (and nothing to compute)
        _LAYOUTS[key] = layout
    return layout


def _forget(key: int) -> Callable[[weakref.ref[Pool]], None]:
    """A callback that drops the layout under `key` once its first pool is gone."""

    def forget(gone: weakref.ref[Pool]) -> None:
        found = _LAYOUTS.get(key)
        if found is not None and found.pools[0] is gone:
            del _LAYOUTS[key]

    return forget


def safe_mask(
    allocator: Allocator, node: Node, state: AllocatedState, wanted: set[DeviceID]
) -> set[DeviceID]:
    """The part of `wanted` that can be marked in use without overdrawing a counter set.

    Kubernetes' search refuses every counter-consuming device of a pool as soon as any counter
    of the pool is overdrawn, so a mask must never take a counter twice. Devices without
    counters are kept; a counter set is masked only when all of its devices are wanted and none
    of its counters is in use, and then through the one device that takes the whole set (a full
    GPU); other counter-consuming devices are left out of the mask (still free)."""
    layout = _layout(allocator.pools_for(node))
    if layout.devices.isdisjoint(wanted):
        return set()
    out = set(layout.plain.intersection(wanted))
    for key, members in layout.by_set.items():
        if not all(device in wanted for device, _ in members):
            continue
        if any(state.is_allocated(device) for device, _ in members):
            continue
        whole = [device for device, names in members if names == layout.totals.get(key)]
        if whole:
            out.add(whole[0])
    return out


def copy_state(state: AllocatedState) -> AllocatedState:
    return masked(state, set())


def solutions(
    allocator: Allocator,
    node: Node,
    claims: list[ResourceClaim],
    state: AllocatedState,
    limit: int,
) -> list[list[AllocationResult]]:
    """Up to `limit` solutions on `node` under `state`, in Kubernetes' order."""
    if limit <= 1:
        outcome = allocator.allocate(node, claims, state)
        return [outcome.results] if outcome.results is not None else []
    return list(allocator.candidates(node, claims, limit, state))
