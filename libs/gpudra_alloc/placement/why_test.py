from __future__ import annotations

import pytest

from gpudra_alloc.placement import answer_pod, why_pending
from gpudra_alloc.placement.choose_test import cluster
from gpudra_alloc.workload import resource_claim
from gpudra_api import parse_resource_claim

BUSY_2_ON_DGX0 = (("dgx-00", "gpu-0"), ("dgx-00", "gpu-1"))
BUSY_4_ON_DGX1 = tuple(("dgx-01", f"gpu-{i}") for i in range(4))


@pytest.mark.parametrize(
    ("counts", "busy", "shape", "expected"),
    [
        pytest.param(
            {"dgx-h100": 2, "l4-pcie": 1},
            BUSY_2_ON_DGX0 + BUSY_4_ON_DGX1,
            "gpu-8-nvl",
            "needs 8 GPUs in one NVLink domain; best node dgx-00 has 6 free in nvswitch-0",
            id="eight-in-one-domain",
        ),
        pytest.param(
            {"dgx-h100": 1, "l4-pcie": 1},
            (),
            "mem-150",
            "needs 1 GPU; best node dgx-00 has 0 usable",
            id="no-large-memory-gpu",
        ),
        pytest.param(
            {"l4-pcie": 1},
            (),
            "gpu-4-nvl",
            "needs 4 GPUs in one NVLink domain; best node l4-00 has none usable",
            id="pcie-only-has-no-domain",
        ),
    ],
)
def test_sentence(
    counts: dict[str, int], busy: tuple[tuple[str, str], ...], shape: str, expected: str
) -> None:
    allocator, nodes = cluster(counts, busy)
    claims = [parse_resource_claim(resource_claim(shape, "train"))]
    why = why_pending(allocator, nodes, claims)
    assert why["sentence"] == expected


def test_explanation_shape_is_stable() -> None:
    allocator, nodes = cluster({"dgx-h100": 2, "l4-pcie": 1}, BUSY_2_ON_DGX0 + BUSY_4_ON_DGX1)
    claims = [parse_resource_claim(resource_claim("gpu-8-nvl", "train"))]
    answer = answer_pod(allocator, nodes, claims, "topology")
    assert answer["outcome"] == "unschedulable"
    why = answer["explanation"]
    assert {"node", "reason", "nodesTried", "closest", "claims", "closestNodes", "sentence"} <= set(
        why
    )
    assert [n["node"] for n in why["closestNodes"]] == ["dgx-00", "dgx-01", "l4-00"]
    first = why["closestNodes"][0]
    assert first["short"] == 2
    assert first["requests"] == [
        {
            "claim": "default/train",
            "request": "gpus",
            "requested": 8,
            "usable": 6,
            "attribute": "gpu.nvidia.com/nvlinkDomain",
            "group": "nvswitch-0",
        }
    ]
    removed = why["claims"][0]["requests"][0]["removed"]
    assert removed["allocated"] == 2


@pytest.mark.parametrize(
    ("busy", "alternative", "expected"),
    [
        pytest.param(
            tuple(("l4-00", f"gpu-{i}") for i in range(4)),
            "gpu/small",
            "needs 1 MIG device; best node l4-00 has 0 usable",
            id="all-short-the-first-alternative-speaks",
        ),
    ],
)
def test_first_available_shows_the_closest_alternative(
    busy: tuple[tuple[str, str], ...], alternative: str, expected: str
) -> None:
    allocator, nodes = cluster({"l4-pcie": 1}, busy)
    claims = [parse_resource_claim(resource_claim("mig", "infer"))]
    why = why_pending(allocator, nodes, claims)
    assert why["closestNodes"][0]["requests"][0]["request"] == alternative
    assert why["sentence"] == expected
