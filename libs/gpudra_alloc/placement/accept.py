"""Would Kubernetes accept this allocation? Asked of Kubernetes' own search, not re-derived.

`kubernetes_accepts` pins the search to the allocation: every device on the node that the
allocation does not use is marked in use, as far as that is possible without overdrawing counters
(`safe_mask`; devices on the allocation's own counter sets stay free), and the search enumerates
every solution left. The allocation is accepted when one of them is identical to it (same devices for
the same requests, same configuration, same node selector). Validity is monotone in the in-use
set, so a solution under the stricter state is a valid allocation under the real one.

`validate_allocation` is THE validator (tests check every topology allocation with it, contract
and replay included): cheap structural checks with precise messages first (one result per claim,
request names of the claim, devices on the node's usable pools, no exclusive device twice or
already in use), then `kubernetes_accepts`. It returns the problems found; empty means Kubernetes
would accept the allocation. It is sound (an accepted allocation is one Kubernetes' own search
returns) but strict: a valid allocation Kubernetes' search could never produce in its own order
(e.g. devices of one request listed in another order) is rejected.
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
    wanted = [r.to_json() for r in results]
    for solution in allocator.candidates(node, claims, MAX_SOLUTIONS, masked(base, mask)):
        if [r.to_json() for r in solution] == wanted:
            return True
    return False


def validate_allocation(
    allocator: Allocator,
    node: Node,
    claims: list[ResourceClaim],
    results: list[AllocationResult],
    state: AllocatedState | None = None,
) -> list[str]:
    """What is wrong with `results` for `claims` on `node` under `state` (None: the allocator's
    own); empty when Kubernetes would accept the allocation."""
    base = state if state is not None else allocator.state
    if len(results) != len(claims):
        return [f"{len(results)} allocation results for {len(claims)} claims"]
    usable: set[DeviceID] = set()
    for pool in allocator.pools_for(node):
        if pool.incomplete or pool.invalid:
            continue
        for entries in pool.device_entries():
            usable.update(entry.id for entry in entries)
    problems: list[str] = []
    taken: set[DeviceID] = set()
    for claim, result in zip(claims, results, strict=True):
        names = {r.name for r in claim.requests}
        names.update(f"{r.name}/{sub.name}" for r in claim.requests for sub in r.first_available)
        for r in result.results:
            device = DeviceID(r.driver, r.pool, r.device)
            where = f"claim {claim.key} request {r.request}: device {r.driver}/{r.pool}/{r.device}"
            if r.request not in names:
                problems.append(f"claim {claim.key}: no request named {r.request}")
            if device not in usable:
                problems.append(f"{where} is not in a usable pool on node {node.name}")
                continue
            if r.admin_access or r.share_id is not None:
                continue
            if device in taken:
                problems.append(f"{where} is allocated twice")
            elif device in base.devices:
                problems.append(f"{where} is already in use")
            taken.add(device)
    if problems:
        return problems
    if not kubernetes_accepts(allocator, node, claims, results, base):
        return [
            f"node {node.name}: Kubernetes' search does not return this allocation "
            "with every other device in use"
        ]
    return []
