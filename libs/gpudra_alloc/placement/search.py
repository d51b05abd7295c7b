"""Running the allocator's per-node search under a stricter in-use state.

Placement never picks devices itself: it asks `Allocator` (Kubernetes' search) for solutions,
sometimes with extra devices marked in use (a *mask*) to steer the search towards one NVLink
domain or onto partitioned GPUs. That is sound: a device set that is a valid allocation while
more devices are in use is valid with fewer in use (exclusive use, counters and capacity only
ever shrink what fits), so every solution is one Kubernetes' allocator accepts on the real state.
"""

from __future__ import annotations

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import AllocationResult, Node, ResourceClaim


def masked(state: AllocatedState, mask: set[DeviceID]) -> AllocatedState:
    """A copy of `state` with the `mask` devices also in use."""
    copy = AllocatedState(
        devices=state.devices | mask,
        shared=set(state.shared),
        capacity={k: dict(v) for k, v in state.capacity.items()},
    )
    return copy


def safe_mask(
    allocator: Allocator, node: Node, state: AllocatedState, wanted: set[DeviceID]
) -> set[DeviceID]:
    """The part of `wanted` that can be marked in use without overdrawing a counter set.

    Kubernetes' search refuses every counter-consuming device of a pool as soon as any counter
    of the pool is overdrawn, so a mask must never take a counter twice. Devices without
    counters are kept; a counter set is masked only when all of its devices are wanted and none
    of its counters is in use, and then through the one device that takes the whole set (a full
    GPU); other counter-consuming devices are left out of the mask (still free)."""
    out: set[DeviceID] = set()
    by_set: dict[tuple[str, str], list[tuple[DeviceID, frozenset[str]]]] = {}
    totals: dict[tuple[str, str], frozenset[str]] = {}
    for pool in allocator.pools_for(node):
        for name, counter_set in pool.counter_sets.items():
            totals[(pool.name, name)] = frozenset(counter_set.counters)
        for entries in pool.device_entries():
            for entry in entries:
                consumes = entry.device.consumes_counters
                if not consumes:
                    if entry.id in wanted:
                        out.add(entry.id)
                    continue
                for c in consumes:
                    by_set.setdefault((entry.id.pool, c.counter_set), []).append(
                        (entry.id, frozenset(c.counters))
                    )
    for key, members in by_set.items():
        if not all(device in wanted for device, _ in members):
            continue
        if any(state.is_allocated(device) for device, _ in members):
            continue
        whole = [device for device, names in members if names == totals.get(key)]
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
