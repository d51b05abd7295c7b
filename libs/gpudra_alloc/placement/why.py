"""Why a pod's claims are pending: the core's per-stage counts, the closest nodes, one sentence.

Adds to the allocator's `explain` (per claim and request, devices removed by each stage on the
node that came closest) a `closestNodes` list and a `sentence`. Stable shape:

    {..., "closestNodes": [
        {"node": "dgx-07", "short": 2, "requests": [
            {"claim": "default/train", "request": "gpus", "requested": 8, "usable": 6,
             "attribute": "gpu.nvidia.com/nvlinkDomain", "group": "nvswitch-0"}]}],
     "sentence": "needs 8 GPUs in one NVLink domain; best node dgx-07 has 6 free in nvswitch-0"}

`usable` counts the devices that pass every per-device stage (selectors, in use, taints,
capacity, counters); under a matchAttribute constraint it is the largest group of usable devices
sharing one value (`group`). For a `firstAvailable` request the alternative closest to fitting
is shown (`request/subrequest`). Nodes are ranked by `short` (devices missing, summed over
requests), then by their order; at most three are listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.constraints import lookup_attribute
from gpudra_alloc.explain import explain, first_failing_stage
from gpudra_alloc.pools import Pool
from gpudra_api import ExactDeviceRequest, Node, ResourceClaim

CLOSEST_NODES = 3
_NOUNS = {"gpu.nvidia.com": ("GPU", "GPUs"), "mig.nvidia.com": ("MIG device", "MIG devices")}
_GROUPS = {"nvlinkDomain": "NVLink domain", "cliqueID": "fabric clique", "pcieRoot": "PCIe root"}


@dataclass
class RequestGap:
    claim: str
    request: str
    device_class: str
    requested: int
    usable: int
    attribute: str | None
    group: str | None

    @property
    def short(self) -> int:
        return max(0, self.requested - self.usable)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "request": self.request,
            "requested": self.requested,
            "usable": self.usable,
            "attribute": self.attribute,
            "group": self.group,
        }


def _match_attribute(claim: ResourceClaim, request: str) -> str | None:
    for c in claim.constraints:
        if c.match_attribute and (not c.requests or request in c.requests):
            return c.match_attribute
    return None


def _gap(
    allocator: Allocator,
    node: Node,
    pools: list[Pool],
    claim: ResourceClaim,
    name: str,
    request: ExactDeviceRequest,
    attribute: str | None,
) -> RequestGap:
    device_class = allocator.classes.get(request.device_class_name)
    groups: dict[str, int] = {}
    usable = 0
    for pool in pools:
        for entries in pool.device_entries():
            for entry in entries:
                if first_failing_stage(allocator, node, pool, claim, request, device_class, entry):
                    continue
                usable += 1
                if attribute:
                    attr = lookup_attribute(entry.device, entry.id, attribute)
                    if attr is not None and not attr.is_list:
                        key = str(attr.scalar)
                        groups[key] = groups.get(key, 0) + 1
    group = None
    if attribute:
        group, usable = max(groups.items(), key=lambda kv: (kv[1], kv[0]), default=(None, 0))
    requested = request.count if request.allocation_mode == "ExactCount" else max(usable, 1)
    return RequestGap(
        claim.key, name, request.device_class_name, requested, usable, attribute, group
    )


def node_gaps(allocator: Allocator, node: Node, claims: list[ResourceClaim]) -> list[RequestGap]:
    pools = [p for p in allocator.pools_for(node) if not p.incomplete and not p.invalid]
    gaps = []
    for claim in claims:
        for request in claim.requests:
            attribute = _match_attribute(claim, request.name)
            if request.exactly is not None:
                gaps.append(
                    _gap(allocator, node, pools, claim, request.name, request.exactly, attribute)
                )
                continue
            options = [
                _gap(allocator, node, pools, claim, f"{request.name}/{sub.name}", sub, attribute)
                for sub in request.first_available
            ]
            if options:
                gaps.append(min(options, key=lambda g: g.short))
    return gaps


def why_pending(
    allocator: Allocator, nodes: list[Node], claims: list[ResourceClaim]
) -> dict[str, Any]:
    """The explanation of an `unschedulable` answer for `claims` over `nodes`."""
    ranked = []
    for index, node in enumerate(nodes):
        gaps = node_gaps(allocator, node, claims)
        ranked.append((sum(g.short for g in gaps), index, node, gaps))
    ranked.sort(key=lambda item: (item[0], item[1]))
    outcome = None
    if ranked:
        outcome = allocator.allocate(ranked[0][2], claims)
    out = explain(allocator, outcome, claims, len(nodes))
    out["closestNodes"] = [
        {"node": node.name, "short": short, "requests": [g.to_json() for g in gaps]}
        for short, _, node, gaps in ranked[:CLOSEST_NODES]
    ]
    out["sentence"] = sentence(ranked[0][2].name, ranked[0][3]) if ranked else "no candidate nodes"
    return out


def _noun(device_class: str, count: int) -> str:
    singular, plural = _NOUNS.get(
        device_class, (f"device of class {device_class}", f"devices of class {device_class}")
    )
    return singular if count == 1 else plural


def sentence(node: str, gaps: list[RequestGap]) -> str:
    """One line a person reads: the first request that is short, and the best node's offer."""
    short = [g for g in gaps if g.short] or gaps
    if not short:
        return f"nothing is missing on {node}, but the claims do not fit together there"
    gap = short[0]
    what = f"{gap.requested} {_noun(gap.device_class, gap.requested)}"
    if gap.attribute:
        label = _GROUPS.get(gap.attribute.rsplit("/", 1)[-1], gap.attribute)
        if gap.group is None:
            return f"needs {what} in one {label}; best node {node} has none usable"
        return f"needs {what} in one {label}; best node {node} has {gap.usable} free in {gap.group}"
    return f"needs {what}; best node {node} has {gap.usable} usable"
