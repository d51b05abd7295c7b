from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc.placement.waiting import large_pods, pod_devices
from gpudra_alloc.workload import resource_claim
from gpudra_api import ResourceClaim, parse_resource_claim


def claim(shape: str, name: str = "c") -> ResourceClaim:
    return parse_resource_claim(resource_claim(shape, name))


def gpus(count: int, name: str, first_available: bool = False) -> ResourceClaim:
    """`count` GPUs, or a firstAvailable request preferring `count` GPUs over one."""
    request: dict[str, Any] = {"name": "gpu"}
    exactly = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if first_available:
        one = {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1}
        request["firstAvailable"] = [{"name": "many", **exactly}, one]
    else:
        request["exactly"] = exactly
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [request]}},
        }
    )


@pytest.mark.parametrize(
    ("pods", "large"),
    [
        pytest.param([], 0, id="nobody-waits"),
        pytest.param([[claim("gpu-8-nvl")], [claim("gpu-4-nvl")]], 1, id="one-8-gpu-pod"),
        pytest.param([[claim("gpu-1")], [claim("gpu-2")], [claim("mig")]], 0, id="small-pods"),
        pytest.param(
            [[claim("gpu-8-nvl", "a")], [claim("gpu-8-nvl", "b")]], 2, id="gang-2x8-counts-twice"
        ),
        pytest.param([[claim("gpu-4-nvl")]] * 4, 0, id="gang-4x4-needs-no-large-domain"),
        pytest.param(
            [[claim("gpu-4-nvl", "a"), claim("gpu-4-nvl", "b")]], 1, id="two-claims-of-4-in-a-pod"
        ),
        pytest.param([[gpus(7, "a")]], 0, id="seven-gpus"),
        pytest.param([[gpus(16, "a")]], 1, id="sixteen-gpus-one-pod"),
        pytest.param([[gpus(8, "a", first_available=True)]], 1, id="first-alternative-counts"),
    ],
)
def test_large_pods(pods: list[list[ResourceClaim]], large: int) -> None:
    assert large_pods(pods) == large


def test_pod_devices_sums_every_claim_and_request() -> None:
    assert pod_devices([gpus(3, "a"), gpus(2, "b", first_available=True)]) == 5
    assert pod_devices([]) == 0
