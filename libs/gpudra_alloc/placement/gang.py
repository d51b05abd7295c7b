"""Gang allocation: several pods' claims, on several nodes, all or nothing.

A gang is `{"name": ..., "pods": [[ResourceClaim, ...], ...], "matchAttribute": "<qualified
name>"}` (the last is optional). With `matchAttribute`, every device of every pod must carry the
same value of that attribute (e.g. `gpu.nvidia.com/cliqueID`: the whole gang in one NVL72 fabric
clique); values are compared as they are published, so only attributes whose values name one
thing across nodes make sense here (a clique, not a node-local NVLink domain name).

Pods are placed one after the other on a scratch copy of the in-use state, each by the pod
policy (`topology`: largest pod first, best score; `first-fit`: in order, first node that fits),
each seeing the devices the pods before it took (`first-fit` with `rng`: kube-scheduler's node
choice instead, `kube_pick`: a node drawn among those where the pod fits). For each attribute value (sorted) the gang is
tried within the nodes that publish it, with the devices that do not carry it masked; `first-fit`
takes the first value that fits the whole gang, `topology` the one that costs the least value,
then the one that leaves the fewest GPUs free in its group (best fit: whole cliques stay whole).
Nothing is reserved unless every pod fits; placement is greedy across pods (no backtracking
from a later pod into an earlier pod's choice). `group` limits the search to one attribute value
(a gang's late pod, placed after the gang's decision, stays in the group the gang was given).

Cost: the groups depend only on the nodes and their pools, so they are computed once per node
list and attribute and kept until a node's pools change (`allocator.pools_for` returns new
objects); within a group each node's mask is computed once and again only after a pod took
devices from one of its pools; the free GPUs left in a group (`left`) are counted only where
they decide between groups (topology, more than one group).
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.constraints import lookup_attribute
from gpudra_alloc.placement.choose import Chooser
from gpudra_alloc.placement.errors import GangError
from gpudra_alloc.placement.search import copy_state, masked, safe_mask, solutions
from gpudra_alloc.placement.waiting import pod_devices
from gpudra_alloc.pools import Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import AllocationResult, ApiError, Node, ResourceClaim, parse_resource_claim

# resourceapi.FirstAvailableDeviceRequestMaxSize: the DRA plugin scores subrequest i as 8 - i
FIRST_AVAILABLE_MAX = 8


@dataclass(frozen=True)
class Gang:
    name: str
    pods: list[list[ResourceClaim]]
    match_attribute: str | None = None

    @property
    def claims(self) -> list[ResourceClaim]:
        return [c for pod in self.pods for c in pod]


def parse_gang(doc: Any) -> Gang:
    """Read a gang step body; raises GangError (or the model's ValidationError)."""
    if not isinstance(doc, dict):
        raise GangError("gang: must be an object with name and pods")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise GangError("gang.name: must be a non-empty string")
    pods = doc.get("pods")
    if not isinstance(pods, list) or not pods:
        raise GangError(f"gang {name}: pods must be a non-empty list of claim lists")
    parsed: list[list[ResourceClaim]] = []
    for i, pod in enumerate(pods):
        if not isinstance(pod, list) or not pod:
            raise GangError(f"gang {name}: pods[{i}] must be a non-empty list of ResourceClaims")
        try:
            parsed.append([parse_resource_claim(c) for c in pod])
        except ApiError as exc:
            raise GangError(f"gang {name}: pods[{i}]: {exc}") from exc
    keys = [c.key for pod in parsed for c in pod]
    if len(set(keys)) != len(keys):
        raise GangError(f"gang {name}: a claim appears twice")
    attribute = doc.get("matchAttribute")
    if attribute is not None and (not isinstance(attribute, str) or "/" not in attribute):
        raise GangError(f"gang {name}: matchAttribute must be a qualified attribute name")
    return Gang(name, parsed, attribute)


@dataclass
class GangPlacement:
    """Per pod (in the gang's pod order) its node and results; `group` is the attribute value."""

    pods: list[tuple[Node, list[AllocationResult]]] | None
    group: str | None = None
    cost: float = 0.0
    failed_pod: int | None = None
    # GPUs its group's nodes still have free afterwards (best fit across groups); counted only
    # where it decides (topology with more than one group), else 0
    left: int = 0

    @property
    def results(self) -> list[AllocationResult]:
        return [r for _, results in self.pods or [] for r in results]


Groups = dict[str, tuple[list[Node], set[DeviceID]]]


@dataclass
class _Grouping:
    """Groups of one node list by one attribute, and the pools they were computed from."""

    nodes: list[Node]
    pools: list[list[Pool]]
    groups: Groups


# allocator -> (attribute, node names) -> grouping; kept while the allocator lives
_GROUPINGS: weakref.WeakKeyDictionary[Allocator, dict[tuple[str, tuple[str, ...]], _Grouping]] = (
    weakref.WeakKeyDictionary()
)
_MAX_GROUPINGS = 64


def _groups(allocator: Allocator, nodes: list[Node], attribute: str) -> Groups:
    """Attribute value -> (nodes publishing it, devices on those nodes that do not carry it),
    values sorted; remembered per node list until a node's pools change. Callers must not
    change what is returned."""
    pools = [allocator.pools_for(node) for node in nodes]
    kept = _GROUPINGS.setdefault(allocator, {})
    key = (attribute, tuple(node.name for node in nodes))
    found = kept.get(key)
    if (
        found is not None
        and all(a is b or a == b for a, b in zip(found.nodes, nodes, strict=True))
        and all(a is b for a, b in zip(found.pools, pools, strict=True))
    ):
        return found.groups
    groups = _compute_groups(nodes, pools, attribute)
    if len(kept) >= _MAX_GROUPINGS:
        kept.clear()
    kept[key] = _Grouping(list(nodes), pools, groups)
    return groups


def _compute_groups(nodes: list[Node], pools: list[list[Pool]], attribute: str) -> Groups:
    values_by_node: list[dict[DeviceID, str | None]] = []
    for node_pools in pools:
        seen: dict[DeviceID, str | None] = {}
        for pool in node_pools:
            for entries in pool.device_entries():
                for entry in entries:
                    attr = lookup_attribute(entry.device, entry.id, attribute)
                    value = None if attr is None or attr.is_list else str(attr.scalar)
                    seen[entry.id] = value
        values_by_node.append(seen)
    groups: Groups = {}
    for node, seen in zip(nodes, values_by_node, strict=True):
        for value in sorted({v for v in seen.values() if v is not None}):
            members, mask = groups.setdefault(value, ([], set()))
            members.append(node)
            mask.update(d for d, v in seen.items() if v != value)
    return dict(sorted(groups.items()))


def place_gang(
    allocator: Allocator,
    nodes: list[Node],
    gang: Gang,
    policy: str,
    chooser: Chooser | None = None,
    pins: Sequence[str] = (),
    group: str | None = None,
    rng: random.Random | None = None,
) -> GangPlacement:
    """Place every pod of `gang` or none; `allocator.state` is never changed here.

    `rng` (first-fit only): each pod goes to a node drawn by `kube_pick` among the nodes where
    it fits, as kube-scheduler places a gang's pods one by one; groups are still tried in order.

    `pins` (by pod index, "" for none): a pod pinned to a node is placed on that node only (one
    of `nodes`), before the unpinned pods, which see the devices it takes. `group`: with
    `gang.match_attribute`, only that attribute value is tried (no node publishing it: the gang
    does not fit); ignored without one.
    """
    if gang.match_attribute:
        groups = _groups(allocator, nodes, gang.match_attribute)
        if group is not None:
            groups = {group: groups[group]} if group in groups else {}
    else:
        groups = {"": (nodes, set())}
    best: GangPlacement | None = None
    worst_failure = GangPlacement(None, failed_pod=0)
    count_left = policy != "first-fit" and len(groups) > 1
    for value, (members, wanted) in groups.items():
        attempt = _place_in_group(
            allocator, members, wanted, gang, policy, chooser, pins, count_left, rng
        )
        attribute = gang.match_attribute
        if (
            attempt.pods is not None
            and attribute
            and not _all_carry(allocator, attempt, attribute, value)
        ):
            attempt = GangPlacement(None, failed_pod=0)
        if attempt.pods is None:
            if (attempt.failed_pod or 0) > (worst_failure.failed_pod or 0):
                worst_failure = attempt
            continue
        attempt.group = value or None
        if policy == "first-fit":
            return attempt
        if best is None or (round(attempt.cost, 6), attempt.left) < (
            round(best.cost, 6),
            best.left,
        ):
            best = attempt
    return best if best is not None else worst_failure


def group_nodes(allocator: Allocator, nodes: list[Node], attribute: str, value: str) -> list[Node]:
    """The nodes of `nodes` (in order) that publish a device whose `attribute` is `value`: where a
    gang placed in that group may go."""
    found = _groups(allocator, nodes, attribute).get(value)
    return list(found[0]) if found is not None else []


def _all_carry(allocator: Allocator, placed: GangPlacement, attribute: str, value: str) -> bool:
    """Every device the gang got carries `value` (a mask may leave counter devices free)."""
    taken = {(r.driver, r.pool, r.device) for result in placed.results for r in result.results}
    for node, _ in placed.pods or []:
        for pool in allocator.pools_for(node):
            for entries in pool.device_entries():
                for entry in entries:
                    if tuple(entry.id) in taken:
                        attr = lookup_attribute(entry.device, entry.id, attribute)
                        if attr is None or attr.is_list or str(attr.scalar) != value:
                            return False
    return True


def _place_in_group(
    allocator: Allocator,
    nodes: list[Node],
    wanted: set[DeviceID],
    gang: Gang,
    policy: str,
    chooser: Chooser | None,
    pins: Sequence[str] = (),
    count_left: bool = False,
    rng: random.Random | None = None,
) -> GangPlacement:
    scratch: AllocatedState = copy_state(allocator.state)
    order = list(range(len(gang.pods)))
    if policy != "first-fit":
        order.sort(key=lambda i: -pod_devices(gang.pods[i]))
    pin = {i: node for i, node in enumerate(pins) if node}
    order.sort(key=lambda i: i not in pin)  # stable: pinned pods first, each order kept
    placed: dict[int, tuple[Node, list[AllocationResult]]] = {}
    masks = _Masks(allocator, nodes, wanted, scratch)
    cost = 0.0
    for position, i in enumerate(order):
        claims = gang.pods[i]
        allowed = [n for n in nodes if n.name == pin[i]] if i in pin else nodes
        mask = masks.union(allowed)
        if policy == "first-fit":
            state = masked(scratch, mask)
            found = (
                _first_fit(allocator, allowed, claims, state)
                if rng is None
                else _random_fit(allocator, allowed, claims, state, rng)
            )
            if found is None:
                return GangPlacement(None, failed_pod=position)
            node, results = found
        else:
            chooser = chooser or Chooser(allocator)
            choice = chooser.choose(allowed, claims, scratch, mask)
            if choice is None:
                return GangPlacement(None, failed_pod=position)
            node, results = choice.node, choice.results
            cost += choice.score.cost
        scratch.apply(results)
        masks.taken(results)
        placed[i] = (node, results)
    left = 0
    if count_left:
        views = chooser or Chooser(allocator)
        left = sum(views.view(node).free(scratch).free_gpus for node in nodes)
    return GangPlacement([placed[i] for i in range(len(gang.pods))], cost=cost, left=left)


class _Masks:
    """Each node's `safe_mask` of the group's unwanted devices under the gang's scratch state,
    recomputed only for the nodes whose pools a placed pod took devices from (a node's safe
    mask reads only the in-use state of its own pools' devices)."""

    def __init__(
        self, allocator: Allocator, nodes: list[Node], wanted: set[DeviceID], state: AllocatedState
    ) -> None:
        self.allocator = allocator
        self.wanted = wanted
        self.state = state
        self.by_node: dict[str, set[DeviceID]] = {}
        self.nodes: dict[str, Node] = {}
        if wanted:
            for node in nodes:
                self.nodes[node.name] = node
                self.by_node[node.name] = safe_mask(allocator, node, state, wanted)

    def union(self, nodes: list[Node]) -> set[DeviceID]:
        out: set[DeviceID] = set()
        if not self.wanted:
            return out
        for node in nodes:
            out |= self.by_node[node.name]
        return out

    def taken(self, results: list[AllocationResult]) -> None:
        if not self.wanted:
            return
        pools = {(r.driver, r.pool) for result in results for r in result.results}
        for name, node in self.nodes.items():
            if any((p.driver, p.name) in pools for p in self.allocator.pools_for(node)):
                self.by_node[name] = safe_mask(self.allocator, node, self.state, self.wanted)


def _first_fit(
    allocator: Allocator, nodes: list[Node], claims: list[ResourceClaim], state: AllocatedState
) -> tuple[Node, list[AllocationResult]] | None:
    """First-fit's node choice (first node in order where the search succeeds) under `state`.
    Not `Allocator.choose_node`: its caches follow `allocator.state`, not a scratch state."""
    for node in nodes:
        found = solutions(allocator, node, claims, state, 1)
        if found:
            return node, found[0]
    return None


def _random_fit(
    allocator: Allocator,
    nodes: list[Node],
    claims: list[ResourceClaim],
    state: AllocatedState,
    rng: random.Random,
) -> tuple[Node, list[AllocationResult]] | None:
    """kube-scheduler's node choice under `state`: the search on every node, `kube_pick` among
    the nodes where it succeeds."""
    feasible: list[tuple[Node, list[AllocationResult]]] = []
    for node in nodes:
        found = solutions(allocator, node, claims, state, 1)
        if found:
            feasible.append((node, found[0]))
    return kube_pick(rng, claims, feasible)


def dra_score(claims: list[ResourceClaim], results: list[AllocationResult]) -> int:
    """The score kube-scheduler's DynamicResources plugin gives a node (`computeScore`): for every
    `firstAvailable` request, 8 - the index of the subrequest the node's allocation used (the
    first alternative scores highest); 0 for claims without one. `results`: one per claim."""
    score = 0
    for claim, result in zip(claims, results, strict=True):
        used = {r.request for r in result.results}
        for request in claim.requests:
            for index, sub in enumerate(request.first_available):
                if f"{request.name}/{sub.name}" in used:
                    score += FIRST_AVAILABLE_MAX - index
    return score


def kube_pick(
    rng: random.Random,
    claims: list[ResourceClaim],
    feasible: list[tuple[Node, list[AllocationResult]]],
) -> tuple[Node, list[AllocationResult]] | None:
    """kube-scheduler's `selectHost` over `feasible` (node, Kubernetes' allocation there): uniformly
    at random among the nodes with the highest score. Only the DRA plugin's score (`dra_score`)
    tells these nodes apart here: the default plugins' CPU/memory scores are not modelled and
    count as equal. One node: taken without a draw, as the scheduler does."""
    if len(feasible) <= 1:
        return feasible[0] if feasible else None
    scores = [dra_score(claims, results) for _, results in feasible]
    top = max(scores)
    best = [f for f, score in zip(feasible, scores, strict=True) if score == top]
    return best[rng.randrange(len(best))] if len(best) > 1 else best[0]
