"""Why claims do not fit on a node: per claim and request, how many devices each stage removed.

The shape is stable (documented in the contract):

    {"node": "node-1", "reason": "...", "nodesTried": 3,
     "closest": {"devicesAllocated": 3, "devicesRequested": 8},
     "claims": [{"claim": "ns/name", "requests": [
         {"request": "gpu", "requested": 8, "devices": 16, "candidates": 3,
          "removed": {"node": 0, "classSelector": 8, "requestSelector": 0, "allocated": 5,
                      "bindingConditions": 0, "taint": 0, "capacity": 0, "counters": 0,
                      "constraint": 0}}]}]}

Stages are applied in this order and a device is counted at the first stage that removes it.
Each device is judged alone against what is already in use (not against the other devices being
allocated); `constraint` counts candidates of a request under a claim constraint when there were
enough candidates but no combination satisfied the constraints. For `firstAvailable` requests
each subrequest is listed as `request/subrequest`. `requested` is 0 for an "All" request whose
devices are determined by the search.
"""

from __future__ import annotations

from typing import Any

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.capacity import request_fits
from gpudra_alloc.constraints import Constraint
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.pools import DeviceEntry, Pool, node_matches
from gpudra_alloc.requests import claim_ref
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_alloc.taints import taint_prevents_allocation
from gpudra_api import DeviceClass, ExactDeviceRequest, Node, Quantity, ResourceClaim

STAGES = (
    "node",
    "classSelector",
    "requestSelector",
    "allocated",
    "bindingConditions",
    "taint",
    "capacity",
    "counters",
    "constraint",
)


def explain(
    allocator: Allocator,
    outcome: NodeOutcome | None,
    claims: list[ResourceClaim],
    nodes_tried: int,
    reason: str = "",
) -> dict[str, Any]:
    if outcome is None:
        return {
            "node": None,
            "reason": reason or "no candidate nodes",
            "nodesTried": nodes_tried,
            "closest": {"devicesAllocated": 0, "devicesRequested": _requested(claims)},
            "claims": [],
        }
    node = outcome.node
    pools = [p for p in allocator.pools_for(node) if not p.incomplete and not p.invalid]
    per_claim = []
    for claim in claims:
        entries = []
        for request in claim.requests:
            constrained = any(
                Constraint(c, False).applies(request.name, "") for c in claim.constraints
            )
            if request.exactly is not None:
                entries.append(
                    _request_counts(
                        allocator, node, pools, claim, request.name, request.exactly, constrained
                    )
                )
            for sub in request.first_available:
                entries.append(
                    _request_counts(
                        allocator,
                        node,
                        pools,
                        claim,
                        f"{request.name}/{sub.name}",
                        sub,
                        constrained,
                    )
                )
        per_claim.append({"claim": claim.key, "requests": entries})
    return {
        "node": node.name,
        "reason": reason or outcome.reason,
        "nodesTried": nodes_tried,
        "closest": {"devicesAllocated": outcome.closest, "devicesRequested": _requested(claims)},
        "claims": per_claim,
    }


def _requested(claims: list[ResourceClaim]) -> int:
    total = 0
    for claim in claims:
        for request in claim.requests:
            if request.exactly is not None and request.exactly.allocation_mode == "ExactCount":
                total += request.exactly.count
            elif request.first_available:
                first = request.first_available[0]
                total += first.count if first.allocation_mode == "ExactCount" else 0
    return total


def _request_counts(
    allocator: Allocator,
    node: Node,
    pools: list[Pool],
    claim: ResourceClaim,
    name: str,
    request: ExactDeviceRequest,
    constrained: bool,
) -> dict[str, Any]:
    removed = dict.fromkeys(STAGES, 0)
    device_class = allocator.classes.get(request.device_class_name)
    total = 0
    candidates = 0
    for pool in pools:
        for entries in pool.device_entries():
            for entry in entries:
                total += 1
                stage = first_failing_stage(
                    allocator, node, pool, claim, request, device_class, entry
                )
                if stage:
                    removed[stage] += 1
                else:
                    candidates += 1
    requested = request.count if request.allocation_mode == "ExactCount" else 0
    if constrained and candidates >= max(requested, 1):
        removed["constraint"] = candidates
    return {
        "request": name,
        "requested": requested,
        "devices": total,
        "candidates": candidates,
        "removed": removed,
    }


def first_failing_stage(
    allocator: Allocator,
    node: Node,
    pool: Pool,
    claim: ResourceClaim,
    request: ExactDeviceRequest,
    device_class: DeviceClass | None,
    entry: DeviceEntry,
    state: AllocatedState | None = None,
) -> str:
    """The first stage (`STAGES`) that removes `entry` for `request` on `node`, judged alone
    against `state` (None: `allocator.state`); "" when the device is a candidate. Public:
    placement counts usable devices per node with it, the validator checks devices with it."""
    device = entry.device
    features = allocator.features
    in_use = state if state is not None else allocator.state
    if entry.slice.per_device_node_selection and not node_matches(
        node, device.node_name, device.all_nodes, device.node_selector
    ):
        return "node"
    try:
        if device_class is None or not allocator.selectors.all_match(
            device_class.selectors, entry, f"class {device_class.name}"
        ):
            return "classSelector"
        if not allocator.selectors.all_match(request.selectors, entry, f"claim {claim_ref(claim)}"):
            return "requestSelector"
    except AllocationError:
        return "classSelector"
    multi = features.consumable_capacity and bool(device.allow_multiple_allocations)
    if not request.admin_access and not multi and entry.id in in_use.devices:
        return "allocated"
    if device.binding_conditions and not features.device_binding_and_status:
        return "bindingConditions"
    if features.device_taints and taint_prevents_allocation(device, request):
        return "taint"
    if features.consumable_capacity and not request_fits(
        in_use.capacity.get(entry.id), request.capacity, device.capacity, None
    ):
        return "capacity"
    if device.consumes_counters and not _counters_fit(allocator, pool, entry, in_use):
        return "counters"
    return ""


def _counters_fit(
    allocator: Allocator, pool: Pool, entry: DeviceEntry, state: AllocatedState
) -> bool:
    if not allocator.features.partitionable_devices:
        return False
    for consumption in entry.device.consumes_counters:
        counter_set = pool.counter_sets.get(consumption.counter_set)
        if counter_set is None:
            return False
        for name, want in consumption.counters.items():
            have = counter_set.counters.get(name)
            if have is None:
                return False
            used = counter_used(pool, consumption.counter_set, name, state)
            if have - used < want:
                return False
    return True


def counter_used(pool: Pool, counter_set: str, counter: str, state: AllocatedState) -> Quantity:
    """How much of one counter of `pool` the devices in use under `state` consume."""
    total = Quantity.of(0)
    for group in (pool.slices, pool.slices_not_targeting_node):
        for slice_ in group:
            for device in slice_.devices:
                if not state.is_allocated(DeviceID(slice_.driver, slice_.pool.name, device.name)):
                    continue
                for consumption in device.consumes_counters:
                    if consumption.counter_set == counter_set and counter in consumption.counters:
                        total = total + consumption.counters[counter]
    return total
