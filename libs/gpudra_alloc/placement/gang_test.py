from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from gpudra_alloc import Allocator
from gpudra_alloc.placement import GangError, parse_gang, place_gang, validate_allocation
from gpudra_alloc.placement.choose_test import claim, cluster
from gpudra_alloc.placement.gang import (
    _GROUPINGS,
    _compute_groups,
    _groups,
    _Masks,
    group_nodes,
)
from gpudra_alloc.placement.search import copy_state, safe_mask
from gpudra_alloc.state import DeviceID
from gpudra_alloc.workload import Fleet, build_fleet, device_classes, resource_claim
from gpudra_api import Node, parse_device_class, parse_resource_slice

CLIQUE = "gpu.nvidia.com/cliqueID"


def gang_doc(pods: int, shape: str = "gpu-4-nvl", attribute: str | None = CLIQUE) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "train",
        "pods": [[resource_claim(shape, f"train-p{i}")] for i in range(pods)],
    }
    if attribute:
        doc["matchAttribute"] = attribute
    return doc


def _clique_of(allocator: Any, node: Any) -> str:
    for pool in allocator.pools_for(node):
        for entries in pool.device_entries():
            return str(entries[0].device.attributes["cliqueID"].scalar)
    return ""


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_gang_lands_in_one_clique_all_pods_valid(policy: str) -> None:
    # 20 trays: clique 0 has 18, clique 1 has 2; three 4-GPU pods only fit in clique 0
    allocator, nodes = cluster({"gb200-tray": 20, "dgx-h100": 1})
    gang = parse_gang(gang_doc(3))
    placed = place_gang(allocator, nodes, gang, policy)
    assert placed.pods is not None
    names = [node.name for node, _ in placed.pods]
    assert len(set(names)) == 3
    assert len({_clique_of(allocator, node) for node, _ in placed.pods}) == 1
    assert placed.group == _clique_of(allocator, placed.pods[0][0])
    scratch = copy_state(allocator.state)
    for pod, (node, results) in zip(gang.pods, placed.pods, strict=True):
        assert validate_allocation(allocator, node, pod, results, scratch) == []
        scratch.apply(results)


def test_gang_is_all_or_nothing() -> None:
    allocator, nodes = cluster({"gb200-tray": 3})
    before = set(allocator.state.devices)
    placed = place_gang(allocator, nodes, parse_gang(gang_doc(4)), "topology")
    assert placed.pods is None
    assert placed.failed_pod == 3
    assert set(allocator.state.devices) == before


def test_gang_without_attribute_spans_any_nodes() -> None:
    allocator, nodes = cluster({"dgx-h100": 2, "hgx-b200": 1})
    placed = place_gang(allocator, nodes, parse_gang(gang_doc(3, "gpu-8-nvl", None)), "topology")
    assert placed.pods is not None
    assert len({node.name for node, _ in placed.pods}) == 3


def test_topology_gang_prefers_the_clique_it_fills_best() -> None:
    # clique 1 (trays 18, 19) fits two pods exactly; topology keeps clique 0 whole
    allocator, nodes = cluster({"gb200-tray": 20})
    placed = place_gang(allocator, nodes, parse_gang(gang_doc(2)), "topology")
    assert placed.pods is not None
    assert sorted(node.name for node, _ in placed.pods) == ["gb200-18", "gb200-19"]
    first = place_gang(allocator, nodes, parse_gang(gang_doc(2)), "first-fit")
    assert first.pods is not None
    assert sorted(node.name for node, _ in first.pods) == ["gb200-00", "gb200-01"]


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param([], id="not-an-object"),
        pytest.param({"pods": [[]]}, id="no-name"),
        pytest.param({"name": "g", "pods": []}, id="no-pods"),
        pytest.param({"name": "g", "pods": [[]]}, id="empty-pod"),
        pytest.param({"name": "g", "pods": [[{"kind": "ResourceClaim"}]]}, id="bad-claim"),
        pytest.param(
            {"name": "g", "pods": [[resource_claim("gpu-1", "a")], [resource_claim("gpu-1", "a")]]},
            id="claim-twice",
        ),
        pytest.param(
            {"name": "g", "pods": [[resource_claim("gpu-1", "a")]], "matchAttribute": "cliqueID"},
            id="unqualified-attribute",
        ),
    ],
)
def test_bad_gang_is_a_clear_error(doc: Any) -> None:
    with pytest.raises(GangError):
        parse_gang(doc)


def test_groups_are_kept_until_pools_change() -> None:
    objects = build_fleet(Fleet(counts={"gb200-tray": 20}))
    allocator = Allocator(
        [parse_device_class(c) for c in device_classes()],
        [parse_resource_slice(s) for s in objects.slices],
    )
    nodes = [Node(n["name"], n["labels"]) for n in objects.nodes]
    first = _groups(allocator, nodes, CLIQUE)
    assert _groups(allocator, nodes, CLIQUE) is first
    assert _groups(allocator, list(nodes), CLIQUE) is first  # an equal list of the same nodes
    assert [len(m) for m, _ in first.values()] == [18, 2]
    part = _groups(allocator, nodes[:3], CLIQUE)
    assert [len(m) for m, _ in part.values()] == [3]
    # a new generation of gb200-19's slice moves it into the first clique: groups follow
    moved = copy.deepcopy(next(s for s in objects.slices if s["spec"]["nodeName"] == "gb200-19"))
    moved["spec"]["pool"]["generation"] += 1
    clique = next(iter(first))
    for device in moved["spec"]["devices"]:
        device["attributes"]["cliqueID"] = {"string": clique}
    allocator.add_slice(parse_resource_slice(moved))
    after = _groups(allocator, nodes, CLIQUE)
    assert after is not first
    assert [len(m) for m, _ in after.values()] == [19, 1]
    assert after == _compute_groups(nodes, [allocator.pools_for(n) for n in nodes], CLIQUE)


@pytest.mark.parametrize(
    ("counts", "shape", "changes"),
    [
        pytest.param({"a100-mig": 4}, "mig", True, id="mig-counters"),
        pytest.param({"gb200-tray": 4}, "gpu-1", False, id="trays"),
        pytest.param({"dgx-h100": 2, "a100-mig": 2}, "mig", True, id="mixed"),
    ],
)
def test_masks_follow_every_take(counts: dict[str, int], shape: str, changes: bool) -> None:
    """The kept per-node masks equal a fresh `safe_mask` after every pod's take (a mask holds a
    whole GPU only while none of its counters is taken, so MIG takes change masks)."""
    allocator, nodes = cluster(counts)
    rng = random.Random(7)
    wanted: set[DeviceID] = set()
    for index, node in enumerate(nodes):  # all of every other node, some of the rest
        for pool in allocator.pools_for(node):
            for entries in pool.device_entries():
                wanted.update(e.id for e in entries if index % 2 == 0 or rng.random() < 0.5)
    scratch = copy_state(allocator.state)
    masks = _Masks(allocator, nodes, wanted, scratch)
    start = dict(masks.by_node)
    for i in range(12):
        node = nodes[i % len(nodes)]
        outcome = allocator.allocate(node, [claim(shape, f"c{i}")], scratch)
        if outcome.results is None:
            continue
        scratch.apply(outcome.results)
        masks.taken(outcome.results)
        for n in nodes:
            assert masks.by_node[n.name] == safe_mask(allocator, n, scratch, wanted), (i, n.name)
    assert (masks.by_node != start) == changes
    assert masks.union(nodes) == set().union(
        *(safe_mask(allocator, n, scratch, wanted) for n in nodes)
    )


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_kept_groups_place_as_fresh_ones(policy: str) -> None:
    """A sequence of gangs, each applied: placing with the groups kept from the step before
    gives exactly what placing with groups computed afresh gives."""
    allocator, nodes = cluster({"gb200-tray": 22, "dgx-h100": 2})
    for step in range(5):
        gang = parse_gang(gang_doc(2 + step % 3))
        kept = place_gang(allocator, nodes, gang, policy)
        _GROUPINGS.clear()
        fresh = place_gang(allocator, nodes, gang, policy)
        assert kept.pods is not None
        assert fresh.pods is not None
        assert [(n.name, r) for n, r in kept.pods] == [(n.name, r) for n, r in fresh.pods]
        assert (kept.group, kept.cost, kept.left) == (fresh.group, fresh.cost, fresh.left)
        allocator.state.apply(kept.results)


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
@pytest.mark.parametrize(
    ("group", "pods", "pins", "nodes"),
    [
        # clique 0: gb200-00..17, clique 1: gb200-18, gb200-19 (first-fit alone takes clique 0)
        pytest.param(1, 2, (), ["gb200-18", "gb200-19"], id="small-group-kept"),
        pytest.param(1, 1, ("gb200-19",), ["gb200-19"], id="pinned-inside-the-group"),
        pytest.param(1, 3, (), None, id="group-has-no-room"),
        pytest.param(1, 1, ("gb200-00",), None, id="pinned-outside-the-group"),
        pytest.param("nope", 1, (), None, id="no-node-publishes-the-value"),
    ],
)
def test_a_gang_limited_to_one_group_stays_in_it(
    policy: str, group: int | str, pods: int, pins: tuple[str, ...], nodes: list[str] | None
) -> None:
    allocator, fleet = cluster({"gb200-tray": 20})
    values = list(_groups(allocator, fleet, CLIQUE))
    value = values[group] if isinstance(group, int) else group
    gang = parse_gang(gang_doc(pods))
    placed = place_gang(allocator, fleet, gang, policy, pins=pins, group=value)
    if nodes is None:
        assert placed.pods is None
        assert placed.group is None
        return
    assert placed.pods is not None
    assert sorted(node.name for node, _ in placed.pods) == nodes
    assert placed.group == value
    assert {_clique_of(allocator, node) for node, _ in placed.pods} == {value}
    scratch = copy_state(allocator.state)
    for pod, (node, results) in zip(gang.pods, placed.pods, strict=True):
        assert validate_allocation(allocator, node, pod, results, scratch) == []
        scratch.apply(results)


def test_a_group_is_ignored_without_a_match_attribute() -> None:
    allocator, fleet = cluster({"gb200-tray": 20})
    gang = parse_gang(gang_doc(2, attribute=None))
    placed = place_gang(allocator, fleet, gang, "first-fit", group="anything")
    assert placed.pods is not None
    assert [node.name for node, _ in placed.pods] == ["gb200-00", "gb200-01"]


@pytest.mark.parametrize(
    ("group", "count"),
    [
        pytest.param(0, 18, id="large-clique"),
        pytest.param(1, 2, id="small-clique"),
        pytest.param(None, 0, id="unknown-value"),
    ],
)
def test_group_nodes(group: int | None, count: int) -> None:
    allocator, fleet = cluster({"gb200-tray": 20, "dgx-h100": 1})
    values = list(_groups(allocator, fleet, CLIQUE))
    value = values[group] if group is not None else "nope"
    found = group_nodes(allocator, fleet, CLIQUE, value)
    assert len(found) == count
    assert {_clique_of(allocator, node) for node in found} <= {value}
    assert [n.name for n in found] == [n.name for n in fleet if n in found], "in fleet order"
