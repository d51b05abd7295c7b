"""First-fit's node choice with Kubernetes' verdict for a pod that fits on no node.

`Allocator.choose_node` passes over a node with fewer free devices than the claims need without
searching it: no solution can be there. But Kubernetes' search on such a node still evaluates the
selectors on its free devices, and a CEL run-time error there fails the node's allocation. When no
node fits, kube-scheduler has run its DynamicResources filter (the allocator) on every node, and a
node whose allocation fails makes the filter return an error status, which aborts the scheduling
cycle with that error ("This should only fail if there is something wrong with the claim or
class. Return an error to abort scheduling of it."): the pod is not unschedulable, it fails with
the expression's error and is retried. `first_fit` gives that verdict: when the core finds no
node, every node on which the search could meet a run-time error (`Search.selector_may_fail`,
a look at the cached selector results of its usable devices) is searched, and the first error in
node order is raised as the `AllocationInputError` the search raises (it names the claim, the
selector, the device and the CEL error). Nodes the core searched raise nothing new: the search
is deterministic, and it raised already if it could.

Not covered (documented in `Allocator.choose_node`): when a node fits, nodes after it are not
searched; kube-scheduler filters until it has found enough feasible nodes (every node below 100
nodes), so an error on a later node would abort its cycle. Searching every node for every pod
would undo first-fit's point.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.pools import Pool, entries_of
from gpudra_alloc.search import Search
from gpudra_alloc.state import InUseDevices
from gpudra_api import Node, ResourceClaim, ResourceSlice


def first_fit(
    allocator: Allocator, nodes: list[Node], claims: list[ResourceClaim]
) -> NodeOutcome | None:
    """`allocator.choose_node(nodes, claims)`, except that when no node fits, a CEL run-time
    error that Kubernetes' search meets on one of the nodes is raised (`AllocationInputError`)
    instead of an unschedulable outcome."""
    outcome = allocator.choose_node(nodes, claims)
    if outcome is not None and outcome.results is None:
        raise_search_errors(allocator, nodes, claims)
    return outcome


def raise_search_errors(
    allocator: Allocator, nodes: list[Node], claims: list[ResourceClaim]
) -> None:
    """Raise the first run-time error (in node order) that Kubernetes' search of `claims` meets
    on one of `nodes` under the allocator's state; return when there is none.

    Usually no device the searches may look at fails a selector: one pass over the devices
    tells, and that verdict is remembered per allocator and claim selectors; later calls look
    again only at the pools that released a device since (taking devices into use only narrows
    what a search looks at), or at every device when the slices or the in-use set changed.
    Only when some device fails is each node that could reach it searched."""
    if not claims or not nodes:
        return
    probe = _search(allocator, nodes[0], claims, [])  # raises what every node's search would
    if not _any_fails(allocator, probe, _signature(claims)):
        return
    for node in nodes:
        search = _search(allocator, node, claims, allocator.pools_for(node))
        if search.selector_may_fail():
            allocator.allocate(node, claims)  # raises what the search meets, if it meets it


# allocator -> claim selectors -> (its slices list, its length, the in-use set, the length of
# its removal log) under which no device fails them
_Clean = tuple[list[ResourceSlice], int, InUseDevices, int]
_CLEAN: weakref.WeakKeyDictionary[Allocator, dict[Hashable, _Clean]] = weakref.WeakKeyDictionary()
_MAX_SIGNATURES = 1024


def _any_fails(allocator: Allocator, probe: Search, signature: Hashable) -> bool:
    """Whether a device of the allocator's slices fails a selector of `probe`'s requests
    (`Search.fails_on`): a superset of the devices any node's search evaluates them on."""
    devices = allocator.state.devices
    if not isinstance(devices, InUseDevices):  # its changes cannot be told: look at all
        return any(probe.fails_on(e) for s in allocator.slices for e in entries_of(s))
    slices_now, count = allocator.slices, len(allocator.slices)
    clean = _CLEAN.setdefault(allocator, {})
    known = clean.get(signature)
    log = devices.removal_log
    if known is not None and known[0] is slices_now and known[1] == count and known[2] is devices:
        by_pool = allocator.pool_slices()
        freer = set(log[known[3] :])  # pools that released a device since
        slices = [s for key in freer for s in by_pool.get(key, ())]
    else:
        slices = allocator.slices
    if any(probe.fails_on(e) for s in slices for e in entries_of(s)):
        clean.pop(signature, None)
        return True
    if signature not in clean and len(clean) >= _MAX_SIGNATURES:
        clean.clear()
    clean[signature] = (slices_now, count, devices, len(log))
    return False


def _search(
    allocator: Allocator, node: Node, claims: list[ResourceClaim], pools: list[Pool]
) -> Search:
    search = Search(
        allocator.features,
        allocator.state,
        allocator.selectors,
        node,
        pools,
        claims,
        allocator.classes,
    )
    search.prepare()
    return search


def _signature(claims: list[ResourceClaim]) -> Hashable:
    """Everything of the claims a selector outcome depends on: per request (and subrequest)
    its class, its selector expressions, admin access and allocation mode (`Search.fails_on`
    reads no more)."""
    parts: list[Hashable] = []
    for claim in claims:
        for request in claim.requests:
            for sub in (
                (request.exactly,) if request.exactly is not None else request.first_available
            ):
                parts.append(
                    (
                        sub.device_class_name,
                        tuple(selector.expression for selector in sub.selectors),
                        bool(sub.admin_access),
                        sub.allocation_mode,
                    )
                )
    return tuple(parts)
