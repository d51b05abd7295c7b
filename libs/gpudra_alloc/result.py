"""Turning a found solution into AllocationResults, exactly as Kubernetes fills them in.

Class configuration is added once per class (its `requests` list grows with every request that
uses the class), claim configuration follows in claim order, and a configuration that ends up
naming every request gets an empty `requests` ("applies to all"). The node selector pins the
claim to the node when any device is node-local or binds to the node, otherwise it merges the
slices' single-term selectors, and is absent for devices reachable from everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra_alloc.errors import AllocationInputError
from gpudra_alloc.pools import DeviceEntry
from gpudra_alloc.requests import RequestData
from gpudra_api import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceConfiguration,
    DeviceRequestAllocationResult,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Quantity,
    ResourceClaim,
)


@dataclass
class DeviceChoice:
    """One device chosen for one (sub)request during the search."""

    entry: DeviceEntry
    data: RequestData
    admin_access: bool | None = None
    share_id: str | None = None
    consumed: dict[str, Quantity] | None = None


def build_result(
    claim: ResourceClaim,
    choices: list[DeviceChoice],
    chosen_data: list[RequestData],
    node_name: str,
    binding_status: bool,
) -> AllocationResult:
    """`chosen_data`: per request of the claim, the RequestData that got allocated."""
    results = []
    for choice in choices:
        device = choice.entry.device
        results.append(
            DeviceRequestAllocationResult(
                request=choice.data.name,
                driver=choice.entry.id.driver,
                pool=choice.entry.id.pool,
                device=choice.entry.id.device,
                admin_access=choice.admin_access,
                tolerations=choice.data.request.tolerations,
                binding_conditions=device.binding_conditions if binding_status else (),
                binding_failure_conditions=(
                    device.binding_failure_conditions if binding_status else ()
                ),
                share_id=choice.share_id,
                consumed_capacity=choice.consumed or None,
            )
        )
    return AllocationResult(
        results=tuple(results),
        config=_configs(claim, chosen_data),
        node_selector=_node_selector(choices, node_name),
    )


def _configs(
    claim: ResourceClaim, chosen: list[RequestData]
) -> tuple[DeviceAllocationConfiguration, ...]:
    entries: list[tuple[str, list[str], DeviceConfiguration]] = []  # (source, requests, config)
    class_ranges: dict[str, tuple[int, int]] = {}
    for data in chosen:
        cls = data.device_class
        if cls.name in class_ranges:
            start, end = class_ranges[cls.name]
            for i in range(start, end):
                entries[i][1].append(data.name)
            continue
        start = len(entries)
        for cfg in cls.config:
            entries.append(("FromClass", [data.name], cfg))
        class_ranges[cls.name] = (start, len(entries))
    chosen_names = {data.base_name: data.name for data in chosen}
    for claim_cfg in claim.config:
        if not claim_cfg.requests:
            entries.append(("FromClaim", [], claim_cfg.config))
            continue
        for request in claim.requests:
            if request.name in claim_cfg.requests:
                entries.append(("FromClaim", list(claim_cfg.requests), claim_cfg.config))
                break
            full = chosen_names.get(request.name, request.name)
            if full != request.name and full in claim_cfg.requests:
                entries.append(("FromClaim", list(claim_cfg.requests), claim_cfg.config))
                break
    out = []
    for source, requests, cfg in entries:
        if requests and _covers_all(claim, requests, chosen_names):
            requests = []
        out.append(DeviceAllocationConfiguration(source, tuple(requests), cfg))
    return tuple(out)


def _covers_all(claim: ResourceClaim, requests: list[str], chosen: dict[str, str]) -> bool:
    for request in claim.requests:
        if request.name in requests:
            continue
        full = chosen.get(request.name, request.name)
        if full != request.name and full in requests:
            continue
        return False
    return True


def _node_selector(choices: list[DeviceChoice], node_name: str) -> NodeSelector | None:
    fields: list[NodeSelectorRequirement] = []
    expressions: list[NodeSelectorRequirement] = []
    for choice in choices:
        slice_ = choice.entry.slice
        device = choice.entry.device
        if slice_.per_device_node_selection:
            name, selector = device.node_name, device.node_selector
        else:
            name, selector = slice_.node_name, slice_.node_selector
        if name is not None or device.binds_to_node:
            return NodeSelector.for_node(node_name)
        if selector is None or not selector.terms:
            continue
        if len(selector.terms) > 1:
            raise AllocationInputError(
                f"unsupported ResourceSlice.NodeSelector with {len(selector.terms)} terms"
            )
        _merge(selector.terms[0].match_fields, fields)
        _merge(selector.terms[0].match_expressions, expressions)
    if fields or expressions:
        return NodeSelector((NodeSelectorTerm(tuple(expressions), tuple(fields)),))
    return None


def _merge(
    source: tuple[NodeSelectorRequirement, ...], into: list[NodeSelectorRequirement]
) -> None:
    for req in source:
        if not any(
            r.key == req.key and r.operator == req.operator and set(r.values) == set(req.values)
            for r in into
        ):
            into.append(req)
