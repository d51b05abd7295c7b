from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc.placement import GangError, parse_gang, place_gang, validate_allocation
from gpudra_alloc.placement.choose_test import cluster
from gpudra_alloc.placement.search import copy_state
from gpudra_alloc.workload import resource_claim

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
