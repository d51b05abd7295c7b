from __future__ import annotations

import pytest

from gpudra_alloc.placement import answer_gang, answer_pod, choose_node, parse_gang
from gpudra_alloc.placement.choose_test import cluster
from gpudra_alloc.workload import resource_claim
from gpudra_api import parse_resource_claim


@pytest.mark.parametrize(
    ("policy", "shape", "outcome", "node"),
    [
        pytest.param("topology", "gpu-1", "allocated", "l4-00", id="topology-1gpu-on-pcie"),
        pytest.param("first-fit", "gpu-1", "allocated", "dgx-00", id="first-fit-first-node"),
        pytest.param("topology", "gpu-8-nvl", "allocated", "dgx-00", id="topology-8gpu"),
        pytest.param("topology", "mem-150", "unschedulable", None, id="topology-no-150g-gpu"),
        pytest.param("first-fit", "mem-150", "unschedulable", None, id="first-fit-no-150g-gpu"),
    ],
)
def test_answer_pod(policy: str, shape: str, outcome: str, node: str | None) -> None:
    allocator, nodes = cluster({"dgx-h100": 1, "l4-pcie": 1})
    claims = [parse_resource_claim(resource_claim(shape, "c"))]
    answer = answer_pod(allocator, nodes, claims, policy)
    assert answer["outcome"] == outcome
    assert answer.get("node") == node
    if outcome == "allocated":
        assert answer["results"] == [r.to_json() for r in answer["_results"]]
        assert ("placement" in answer) == (policy == "topology")
    else:
        assert answer["explanation"]["sentence"].startswith("needs 1 GPU")


def test_unknown_class_is_an_error_answer() -> None:
    allocator, nodes = cluster({"dgx-h100": 1})
    doc = resource_claim("gpu-1", "c")
    doc["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "tpu.example.com"
    answer = answer_pod(allocator, nodes, [parse_resource_claim(doc)], "topology")
    assert answer["outcome"] == "error"
    assert "tpu.example.com" in answer["error"]


def test_choose_node_has_the_allocator_contract() -> None:
    allocator, nodes = cluster({"dgx-h100": 1, "l4-pcie": 1})
    fits = choose_node(allocator, nodes, [parse_resource_claim(resource_claim("gpu-2", "a"))])
    assert fits is not None
    assert fits.node.name == "l4-00"
    assert fits.results is not None
    misses = choose_node(allocator, nodes, [parse_resource_claim(resource_claim("mem-150", "b"))])
    assert misses is not None
    assert misses.results is None


@pytest.mark.parametrize(
    ("pods", "outcome"),
    [
        pytest.param(2, "allocated", id="fits"),
        pytest.param(5, "unschedulable", id="too-big"),
    ],
)
def test_answer_gang(pods: int, outcome: str) -> None:
    allocator, nodes = cluster({"gb200-tray": 4})
    gang = parse_gang(
        {
            "name": "g",
            "pods": [[resource_claim("gpu-4-nvl", f"g-{i}")] for i in range(pods)],
            "matchAttribute": "gpu.nvidia.com/cliqueID",
        }
    )
    answer = answer_gang(allocator, nodes, gang, "topology")
    assert answer["outcome"] == outcome
    if outcome == "allocated":
        assert len(answer["pods"]) == pods
        assert answer["group"]
    else:
        assert answer["explanation"]["gangPodsPlaced"] == 4
