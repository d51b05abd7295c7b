"""Would Kubernetes accept this allocation? The allocator's rules, checked one by one.

`validate_allocation` judges a pod's allocation results for its claims on one node, under an in-use
state, and returns what breaks a rule (empty: none does). The rules, in order:

1. one result per claim; every result names a request of its claim (`request`, or
   `request/subrequest` for a `firstAvailable` request, one alternative per request);
2. every device is on one of the node's usable pools (complete, valid, highest generation) and
   listed once per request;
3. each device passes the per-device stages of `explain.first_failing_stage` for its request
   (node selection, class and request selectors, not in use unless admin access or multiple
   allocations, binding conditions, taints against the request's tolerations, capacity,
   counters, each judged against the state);
4. counts: `ExactCount` gets exactly `count` devices; `All` gets every device of the node that
   the class and request selectors select and, with consumable capacity, that has room for the
   request's capacity under the state (Kubernetes leaves the others out of `All`); admin access
   in the result matches the request;
5. across the pod: no exclusive device twice; counters of every counter set and consumable
   capacity of every shared device stay within their totals once everything is applied;
   a shared device carries a share ID and the consumed capacity its request implies;
6. `matchAttribute` / `distinctAttribute` constraints hold over the devices they apply to, with
   Kubernetes' value semantics (`constraints.Constraint`).

Not checked here: the device configuration and the node selector copied into the result (they
are derived, not chosen); `placement.kubernetes_accepts` cross-checks whole results, those
included, against Kubernetes' own search.
"""

from __future__ import annotations

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.capacity import consumed_capacity, request_fits
from gpudra_alloc.constraints import Constraint
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.explain import counter_used, first_failing_stage
from gpudra_alloc.pools import DeviceEntry, Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import (
    AllocationResult,
    DeviceRequestAllocationResult,
    ExactDeviceRequest,
    Node,
    ResourceClaim,
)

Located = tuple[Pool, DeviceEntry]


def _copy(state: AllocatedState) -> AllocatedState:
    return AllocatedState(
        devices=set(state.devices),
        shared=set(state.shared),
        capacity={k: dict(v) for k, v in state.capacity.items()},
    )


def _index(allocator: Allocator, node: Node) -> dict[DeviceID, Located]:
    found: dict[DeviceID, Located] = {}
    for pool in allocator.pools_for(node):
        if pool.incomplete or pool.invalid:
            continue
        for entries in pool.device_entries():
            for entry in entries:
                found.setdefault(entry.id, (pool, entry))
    return found


def _requests(claim: ResourceClaim) -> dict[str, tuple[str, ExactDeviceRequest]]:
    """Result request name -> (claim request name, the request or subrequest it names)."""
    out: dict[str, tuple[str, ExactDeviceRequest]] = {}
    for request in claim.requests:
        if request.exactly is not None:
            out[request.name] = (request.name, request.exactly)
        for sub in request.first_available:
            out[f"{request.name}/{sub.name}"] = (request.name, sub)
    return out


def _selected(
    allocator: Allocator,
    node: Node,
    index: dict[DeviceID, Located],
    claim: ResourceClaim,
    request: ExactDeviceRequest,
    state: AllocatedState,
) -> set[DeviceID]:
    """Devices an `All` request must get: those its class and selectors select on the node,
    less (with consumable capacity) those without room for the request's capacity. As in
    Kubernetes, a device with binding conditions is not selectable while DeviceBindingAndStatus
    is off (whatever else about it would fail first), so it is not one of them."""
    device_class = allocator.classes.get(request.device_class_name)
    binding_status = allocator.features.device_binding_and_status
    wanted = set()
    for device, (pool, entry) in index.items():
        if entry.device.binding_conditions and not binding_status:
            continue
        stage = first_failing_stage(
            allocator, node, pool, claim, request, device_class, entry, state
        )
        if stage in ("node", "classSelector", "requestSelector"):
            continue
        if allocator.features.consumable_capacity and not request_fits(
            state.capacity.get(entry.id), request.capacity, entry.device.capacity, None
        ):
            continue
        wanted.add(device)
    return wanted


def validate_allocation(
    allocator: Allocator,
    node: Node,
    claims: list[ResourceClaim],
    results: list[AllocationResult],
    state: AllocatedState | None = None,
) -> list[str]:
    """What breaks a rule in `results` for `claims` on `node` under `state` (None: the
    allocator's own); empty when nothing does."""
    base = state if state is not None else allocator.state
    if len(results) != len(claims):
        return [f"{len(results)} allocation results for {len(claims)} claims"]
    index = _index(allocator, node)
    problems: list[str] = []
    exclusive: set[DeviceID] = set()
    for claim, result in zip(claims, results, strict=True):
        problems += _claim_violations(allocator, node, index, claim, result, base, exclusive)
    if not problems:
        problems += _pod_totals(node, index, results, base)
    return problems


def _claim_violations(
    allocator: Allocator,
    node: Node,
    index: dict[DeviceID, Located],
    claim: ResourceClaim,
    result: AllocationResult,
    state: AllocatedState,
    exclusive: set[DeviceID],
) -> list[str]:
    names = _requests(claim)
    problems: list[str] = []
    by_request: dict[str, list[DeviceRequestAllocationResult]] = {}
    chosen: dict[str, str] = {}  # claim request -> the result request name it used
    for r in result.results:
        where = f"claim {claim.key} request {r.request}: device {r.driver}/{r.pool}/{r.device}"
        named = names.get(r.request)
        if named is None:
            problems.append(f"claim {claim.key}: no request named {r.request}")
            continue
        parent, request = named
        if chosen.setdefault(parent, r.request) != r.request:
            problems.append(
                f"claim {claim.key} request {parent}: both {chosen[parent]} and {r.request}"
            )
        device = DeviceID(r.driver, r.pool, r.device)
        located = index.get(device)
        if located is None:
            problems.append(f"{where} is not in a usable pool on node {node.name}")
            continue
        if any(
            DeviceID(o.driver, o.pool, o.device) == device for o in by_request.get(r.request, [])
        ):
            problems.append(f"{where} is listed twice")
        by_request.setdefault(r.request, []).append(r)
        pool, entry = located
        device_class = allocator.classes.get(request.device_class_name)
        try:
            stage = first_failing_stage(
                allocator, node, pool, claim, request, device_class, entry, state
            )
        except AllocationError as exc:
            stage = f"error ({exc})"
        if stage:
            problems.append(f"{where} fails the {stage} stage")
        if bool(r.admin_access) != bool(request.admin_access):
            problems.append(f"{where}: admin access differs from the request's")
        shared = allocator.features.consumable_capacity and entry.device.allow_multiple_allocations
        if shared and not r.admin_access:
            if r.share_id is None:
                problems.append(f"{where}: a shared device without a share ID")
            want = consumed_capacity(request.capacity, entry.device.capacity)
            if (r.consumed_capacity or {}) != want:
                problems.append(f"{where}: consumed capacity is not what the request implies")
        elif not r.admin_access:
            if r.share_id is not None:
                problems.append(f"{where}: a share ID on a device that is not shared")
            if device in exclusive:
                problems.append(f"{where} is allocated twice")
            exclusive.add(device)
    for result_name, (_, request) in names.items():
        got = by_request.get(result_name)
        if got is None:
            continue
        if request.allocation_mode == "ExactCount":
            if len(got) != request.count:
                problems.append(
                    f"claim {claim.key} request {result_name}: {len(got)} devices "
                    f"for count {request.count}"
                )
        else:
            selected = _selected(allocator, node, index, claim, request, state)
            have = {DeviceID(r.driver, r.pool, r.device) for r in got}
            if have != selected:
                problems.append(
                    f"claim {claim.key} request {result_name}: allocation mode All needs all "
                    f"{len(selected)} selected devices, got {len(have)}"
                )
    for wanted in claim.requests:
        if wanted.name not in chosen:
            problems.append(f"claim {claim.key} request {wanted.name}: no devices allocated")
    problems += _constraint_violations(allocator, index, claim, result)
    return problems


def _constraint_violations(
    allocator: Allocator,
    index: dict[DeviceID, Located],
    claim: ResourceClaim,
    result: AllocationResult,
) -> list[str]:
    problems = []
    for spec in claim.constraints:
        constraint = Constraint(spec, allocator.features.list_type_attributes)
        for r in result.results:
            request, _, sub = r.request.partition("/")
            located = index.get(DeviceID(r.driver, r.pool, r.device))
            if located is None:
                continue
            entry = located[1]
            if not constraint.add(request, sub, entry.device, entry.id):
                kind = "matchAttribute" if constraint.match else "distinctAttribute"
                problems.append(
                    f"claim {claim.key}: device {r.driver}/{r.pool}/{r.device} breaks "
                    f"{kind} {constraint.attribute}"
                )
                break
    return problems


def _pod_totals(
    node: Node,
    index: dict[DeviceID, Located],
    results: list[AllocationResult],
    state: AllocatedState,
) -> list[str]:
    """Counters and consumable capacity with the whole pod applied."""
    after = _copy(state)
    after.apply(results)
    for result in results:
        for r in result.results:
            # `apply` leaves admin access out (as the scheduler does between pods), but within
            # one pod's search an admin-access share takes capacity like any other
            if r.admin_access and r.share_id is not None and r.consumed_capacity:
                after.add_capacity(DeviceID(r.driver, r.pool, r.device), r.consumed_capacity)
    problems = []
    seen: set[tuple[str, str, str]] = set()
    for result in results:
        for r in result.results:
            device = DeviceID(r.driver, r.pool, r.device)
            pool, entry = index[device]
            for consumption in entry.device.consumes_counters:
                counter_set = pool.counter_sets.get(consumption.counter_set)
                if counter_set is None:
                    continue  # the per-device stage reported it
                for name in consumption.counters:
                    key = (pool.id, consumption.counter_set, name)
                    if key in seen or name not in counter_set.counters:
                        continue
                    seen.add(key)
                    used = counter_used(pool, consumption.counter_set, name, after)
                    if used > counter_set.counters[name]:
                        problems.append(
                            f"node {node.name}: counter {name} of {pool.id}/"
                            f"{consumption.counter_set} is overdrawn"
                        )
            if r.share_id is not None:
                in_use = after.capacity.get(device, {})
                for name, capacity in entry.device.capacity.items():
                    if name in in_use and in_use[name] > capacity.value:
                        problems.append(
                            f"node {node.name}: capacity {name} of {r.driver}/{r.pool}/"
                            f"{r.device} is overdrawn"
                        )
    return list(dict.fromkeys(problems))
