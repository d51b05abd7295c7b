"""Would Kubernetes accept this allocation? Asked of Kubernetes' own search, not re-derived.

`kubernetes_accepts` pins the search to the allocation: every device on the node that the
allocation does not use is marked in use, as far as that is possible without overdrawing counters
(`safe_mask`; devices on the allocation's own counter sets stay free), and the search enumerates
every solution left. The allocation is accepted when one of them is identical to it (same devices for
the same requests, same configuration, same node selector). Validity is monotone in the in-use
set, so a solution under the stricter state is a valid allocation under the real one.

This is an independent cross-check of the rule-by-rule validator (`gpudra_alloc.validate`, THE
validator the tests use): sound (an accepted allocation is one Kubernetes' own search returns,
configuration and node selector included) but strict (a valid allocation the search could never
produce in its own order is rejected) and, on pools with many interchangeable devices, slow (it
enumerates up to MAX_SOLUTIONS solutions). Share IDs are compared by presence only: the search
generates a new one for the same choice.
"""

from __future__ import annotations

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.placement.search import masked, safe_mask
from gpudra_alloc.placement.topology import result_devices
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import AllocationResult, Node, ResourceClaim

MAX_SOLUTIONS = 20_000


def kubernetes_accepts(
    allocator: Allocator,
    node: Node,
    claims: list[ResourceClaim],
    results: list[AllocationResult],
    state: AllocatedState | None = None,
) -> bool:
    base = state if state is not None else allocator.state
    chosen = result_devices(results)
    chosen_sets: set[tuple[str, str]] = set()
    for pool in allocator.pools_for(node):
        for entries in pool.device_entries():
            for entry in entries:
                if entry.id in chosen:
                    chosen_sets.update(
                        (entry.id.pool, c.counter_set) for c in entry.device.consumes_counters
                    )
    others: set[DeviceID] = set()
    for pool in allocator.pools_for(node):
        for entries in pool.device_entries():
            for entry in entries:
                if entry.id in chosen:
                    continue
                sets = {(entry.id.pool, c.counter_set) for c in entry.device.consumes_counters}
                if sets & chosen_sets:
                    continue
                others.add(entry.id)
    mask = safe_mask(allocator, node, base, others)
    wanted = _comparable(results)
    for solution in allocator.candidates(node, claims, MAX_SOLUTIONS, masked(base, mask)):
        if _comparable(solution) == wanted:
            return True
    return False


def _comparable(results: list[AllocationResult]) -> list[dict[str, object]]:
    """Results as JSON with share IDs reduced to their presence: a share ID is generated per
    allocation, the search makes a new one for the same choice."""
    out = []
    for result in results:
        doc = result.to_json()
        for r in doc["devices"]["results"]:
            if "shareID" in r:
                r["shareID"] = "*"
        out.append(doc)
    return out
