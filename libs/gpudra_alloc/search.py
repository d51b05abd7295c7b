"""The per-node search: Kubernetes' structured allocator, first solution wins.

Claims are allocated one after the other, each request's devices one after the other; every
candidate device (pools by ID, slices by name, devices in slice order) that is free, selected,
untainted, within capacity and counters and consistent with the claim's constraints is taken
tentatively and the search recurses; on a dead end it backtracks. Within one request only
combinations (not permutations) are tried. This mirrors `k8s.io/dynamic-resource-allocation`
`structured/internal/experimental` decision for decision, including its quirks (counters taken
by a device that then fails a later check stay taken for the rest of the search; a match
constraint's intersection narrows and does not widen on backtracking), so that first-fit
returns exactly the devices Kubernetes returns.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from gpudra_alloc.capacity import consumed_capacity, request_fits
from gpudra_alloc.constraints import Constraint
from gpudra_alloc.counters import CounterLedger
from gpudra_alloc.errors import AllocationInputError
from gpudra_alloc.features import Features
from gpudra_alloc.pools import DeviceEntry, Pool, node_matches
from gpudra_alloc.requests import (
    RequestData,
    check_claim_size,
    check_request_features,
    claim_ref,
    lookup_class,
)
from gpudra_alloc.result import DeviceChoice, build_result
from gpudra_alloc.selection import Selectors
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_alloc.taints import taint_prevents_allocation
from gpudra_api import AllocationResult, Node, Quantity, ResourceClaim
from gpudra_api.limits import ALLOCATION_RESULTS_MAX_SIZE

_SHARE_NAMESPACE = uuid.UUID("6c1f4f6e-2f0b-4c55-9a39-0d6f3c7c2a11")

_MIN_RECURSION = 20_000

Key = tuple[int, int, int]  # claim, request, subrequest
Start = tuple[int, int, int]  # pool, slice, device


class _MaxSizeExceeded(Exception):
    """Internal: this branch cannot stay within the per-claim result limit."""


class SearchTimeout(Exception):
    """The search ran past its deadline (kube-scheduler's DRA filter timeout)."""


class Search:
    """One allocation attempt of a pod's claims on one node. Use once."""

    def __init__(
        self,
        features: Features,
        state: AllocatedState,
        selectors: Selectors,
        node: Node,
        pools: list[Pool],
        claims: list[ResourceClaim],
        classes: dict[str, Any],
    ) -> None:
        self.features = features
        self.state = state
        self.selectors = selectors
        self.node = node
        self.pools = pools
        self.pool_entries = [p.device_entries() for p in pools]
        self.claims = claims
        self.classes = classes
        self.data: dict[Key, RequestData] = {}
        self.constraints: list[list[Constraint]] = []
        self.choices: list[list[DeviceChoice]] = [[] for _ in claims]
        self.selectable_cache: dict[tuple[DeviceID, Key], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}
        self.counters = CounterLedger(state)
        self.invocations = 0
        self.closest = 0  # most devices held at once on the way
        self.on_solution: Callable[[list[AllocationResult]], bool] | None = None
        self.deadline: float | None = None  # time.monotonic() value; None: no limit

    # ------------------------------------------------------------------ entry points
    def prepare(self) -> None:
        """Kubernetes' checks before the search; raises AllocationInputError."""
        for ci, claim in enumerate(self.claims):
            min_devices = 0
            for ri, request in enumerate(claim.requests):
                check_request_features(claim, request, self.features)
                if request.first_available:
                    counts = []
                    for si, sub in enumerate(request.first_available):
                        data = self._request_data(claim, (ci, ri, si), sub, request)
                        self.data[(ci, ri, si)] = data
                        counts.append(data.num_devices)
                    min_devices += min(counts)
                else:
                    assert request.exactly is not None
                    data = self._request_data(claim, (ci, ri, 0), request.exactly, None)
                    self.data[(ci, ri, 0)] = data
                    min_devices += data.num_devices
            check_claim_size(claim, min_devices)
            self.constraints.append(
                [Constraint(c, self.features.list_type_attributes) for c in claim.constraints]
            )

    def run(self) -> list[AllocationResult] | None:
        """The first solution, or None. Call `prepare` first. Raises `SearchTimeout` when the
        search is still going at `deadline` (the search is exponential in the worst case)."""
        found: list[list[AllocationResult]] = []

        def keep(results: list[AllocationResult]) -> bool:
            found.append(results)
            return True

        self.on_solution = self.on_solution or keep
        # One frame per device taken: a pod of many claims x 32 devices goes deep.
        if sys.getrecursionlimit() < _MIN_RECURSION:
            sys.setrecursionlimit(_MIN_RECURSION)
        try:
            self._allocate_one((0, 0, 0), 0, False, (0, 0, 0))
        except _MaxSizeExceeded:
            return None
        return found[0] if found else None

    def has_invalid_pools(self) -> bool:
        return any(p.invalid for p in self.pools)

    def selector_may_fail(self) -> bool:
        """Whether `run` could meet a CEL run-time error: a device of the usable pools fails a
        selector of a request that may look at it (`fails_on`). False means `run` raises none of
        them (it evaluates selectors only there). Call `prepare` first."""
        for pi, pool in enumerate(self.pools):
            if pool.incomplete or pool.invalid:
                continue
            for entries in self.pool_entries[pi]:
                for entry in entries:
                    if self.fails_on(entry):
                        return True
        return False

    def fails_on(self, entry: DeviceEntry) -> bool:
        """Whether a selector of a request fails on `entry` with a run-time error, for a request
        that may look at it: any request while it is not in use, else one with admin access or
        for "All" devices (the search checks use before selectors; "All" looks at every device).
        Cheap once the selectors' results are cached (they are the search's own). Call
        `prepare` first."""
        in_use = entry.id in self.state.devices
        for key, data in self.data.items():
            if in_use and not data.admin and data.request.allocation_mode != "All":
                continue
            try:
                self._selectable(key, data, entry)
            except AllocationInputError:
                return True
        return False

    # ------------------------------------------------------------------ preparation
    def _request_data(
        self, claim: ResourceClaim, key: Key, request: Any, parent: Any
    ) -> RequestData:
        for i, selector in enumerate(request.selectors):
            if selector.expression is None:
                raise AllocationInputError(
                    f"claim {claim_ref(claim)}, request {request.name}, selector #{i}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        device_class = lookup_class(claim, request, self.classes, self.features)
        data = RequestData(request, parent, device_class, request.count)
        if request.allocation_mode != "All":
            return data
        for pi, pool in enumerate(self.pools):
            if pool.incomplete:
                raise AllocationInputError(
                    f"claim {claim_ref(claim)}, request {request.name}: asks for all devices, "
                    f"but resource pool {pool.id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationInputError(
                    f"claim {claim_ref(claim)}, request {request.name}: asks for all devices, "
                    f"but resource pool {pool.id} is currently invalid"
                )
            for entries in self.pool_entries[pi]:
                for entry in entries:
                    if not self._selectable(key, data, entry):
                        continue
                    if self.features.consumable_capacity and not self._capacity_fits(data, entry):
                        continue
                    data.all_devices.append((entry, pi))
        data.num_devices = len(data.all_devices)
        return data

    # ------------------------------------------------------------------ the search
    def _allocate_one(self, key: Key, di: int, in_sub: bool, start: Start) -> bool:
        self.invocations += 1
        deadline = self.deadline
        if deadline is not None and not self.invocations & 1023 and time.monotonic() > deadline:
            raise SearchTimeout
        ci, ri, si = key
        if ci >= len(self.claims):
            assert self.on_solution is not None
            return self.on_solution(self._results())
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            try:
                return self._allocate_one((ci + 1, 0, 0), 0, False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        data = self.data[key]
        if not in_sub and data.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.data:
                # Set before descending: a solution found below reads it.
                self.data[key].selected_subrequest = sub
                try:
                    done = self._allocate_one((ci, ri, sub), di, True, (0, 0, 0))
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if done:
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        request = data.request
        if request.allocation_mode == "All" and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._allocate_one((ci, ri + 1, 0), 0, False, (0, 0, 0))
        if len(self.choices[ci]) + data.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded

        if request.allocation_mode == "All":
            entry, pi = data.all_devices[di]
            undo = self._allocate_device(key, entry, pi, must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(key, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        admin = data.admin
        pool_start, slice_start, device_start = start
        for pi in range(pool_start, len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            pool_entries = self.pool_entries[pi]
            for sli in range(slice_start if pi == pool_start else 0, len(pool_entries)):
                entries = pool_entries[sli]
                first = device_start if (pi == pool_start and sli == slice_start) else 0
                for dvi in range(first, len(entries)):
                    entry = entries[dvi]
                    device_id = entry.id
                    if admin:
                        if ci in self.allocating.get(device_id, ()):
                            continue
                    elif self._in_use(device_id):
                        continue
                    if not self._selectable(key, data, entry):
                        continue
                    if self.features.consumable_capacity and not self._capacity_fits(data, entry):
                        continue
                    undo = self._allocate_device(key, entry, pi, must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(key, di + 1, in_sub, (pi, sli, dvi + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    # ------------------------------------------------------------------ device checks
    def _in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.state.devices or bool(self.allocating.get(device_id))

    def _selectable(self, key: Key, data: RequestData, entry: DeviceEntry) -> bool:
        device = entry.device
        if not self.features.device_binding_and_status and device.binding_conditions:
            return False
        cache_key = (entry.id, key)
        cached = self.selectable_cache.get(cache_key)
        if cached is not None:
            return cached
        claim = self.claims[key[0]]
        result = (
            self.selectors.all_match(
                data.device_class.selectors, entry, f"class {data.device_class.name}"
            )
            and self.selectors.all_match(data.request.selectors, entry, f"claim {claim_ref(claim)}")
            and (
                not entry.slice.per_device_node_selection
                or node_matches(self.node, device.node_name, device.all_nodes, device.node_selector)
            )
        )
        self.selectable_cache[cache_key] = result
        return result

    def _capacity_fits(self, data: RequestData, entry: DeviceEntry) -> bool:
        fits = request_fits(
            self.state.capacity.get(entry.id),
            data.request.capacity,
            entry.device.capacity,
            self.allocating_capacity.get(entry.id),
        )
        return bool(fits)

    def _allocate_device(
        self, key: Key, entry: DeviceEntry, pi: int, must: bool
    ) -> Callable[[], None] | None:
        """Take the device tentatively; returns how to give it back, or None if it cannot."""
        ci = key[0]
        data = self.data[key]
        device = entry.device
        device_id = entry.id
        features = self.features
        admin = data.admin
        multi = features.consumable_capacity and bool(device.allow_multiple_allocations)
        if not multi and admin and ci in self.allocating.get(device_id, ()):
            return None
        if not admin and self._in_use(device_id):
            return None
        if not features.partitionable_devices and device.consumes_counters:
            return None
        skip_counters = multi and (
            device_id in self.state.capacity or device_id in self.allocating_capacity
        )
        if (
            not skip_counters
            and device.consumes_counters
            and not self.counters.take(entry, self.pools[pi])
        ):
            return None
        base, sub = data.base_name, data.sub_name
        if features.device_taints and taint_prevents_allocation(device, data.request):
            return None
        constraints = self.constraints[ci]
        for i, constraint in enumerate(constraints):
            if not constraint.add(base, sub, device, device_id):
                if must:
                    raise AllocationInputError(
                        f"claim {claim_ref(self.claims[ci])}, request {data.request.name}: "
                        f"cannot add device {device_id} because a claim constraint would not "
                        "be satisfied"
                    )
                for earlier in constraints[:i]:
                    earlier.remove(base, sub)
                return None
        holders = self.allocating.setdefault(device_id, set())
        if not multi:
            holders.add(ci)
        consumed: dict[str, Quantity] = {}
        share_id = None
        if features.consumable_capacity:
            if not self._capacity_fits(data, entry):
                return None
            if multi:
                consumed = consumed_capacity(data.request.capacity, device.capacity)
                share_id = self._share_id(ci, data, device_id)
                total = self.allocating_capacity.setdefault(device_id, {})
                for name, value in consumed.items():
                    total[name] = total[name] + value if name in total else value
        choices = self.choices[ci]
        previous = len(choices)
        choices.append(
            DeviceChoice(entry, data, True if admin else None, share_id, consumed or None)
        )
        self.closest = max(self.closest, sum(len(c) for c in self.choices))

        def undo() -> None:
            for constraint in constraints:
                constraint.remove(base, sub)
            self.allocating[device_id].discard(ci)
            if multi:
                if consumed:
                    total = self.allocating_capacity[device_id]
                    for name, value in consumed.items():
                        total[name] = total[name] - value
                    if all(v.is_zero for v in total.values()):
                        del self.allocating_capacity[device_id]
            elif features.partitionable_devices and device.consumes_counters:
                self.counters.give_back(entry)
            del choices[previous:]

        return undo

    def _share_id(self, ci: int, data: RequestData, device_id: DeviceID) -> str:
        # Kubernetes draws a random UUID; a name-based one keeps decisions deterministic.
        claim = self.claims[ci]
        seed = f"{claim.uid}|{claim.key}|{data.name}|{device_id}|{len(self.choices[ci])}"
        return str(uuid.uuid5(_SHARE_NAMESPACE, seed))

    # ------------------------------------------------------------------ results
    def _results(self) -> list[AllocationResult]:
        out = []
        for ci, claim in enumerate(self.claims):
            chosen = []
            for ri, request in enumerate(claim.requests):
                data = self.data[(ci, ri, 0)]
                if request.first_available:
                    data = self.data[(ci, ri, data.selected_subrequest)]
                chosen.append(data)
            out.append(
                build_result(
                    claim,
                    list(self.choices[ci]),
                    chosen,
                    self.node.name,
                    self.features.device_binding_and_status,
                )
            )
        return out
