"""The model accepts what Kubernetes' own v1 schema accepts (kubernetes-validate, 1.37, strict)
for the shapes gpudra publishes and receives, and names the same fields when it rejects."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpudra_api import parse_device_class, parse_resource_claim, parse_resource_slice

SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-1-gpu"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-1",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "index": {"int": 0},
                    "links": {"strings": ["a", "b"]},
                },
                "capacity": {"memory": {"value": "80Gi"}},
                "taints": [
                    {"key": "gpudra.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
                ],
            },
            {
                "name": "gpu-1",
                "allowMultipleAllocations": True,
                "capacity": {
                    "memory": {
                        "value": "80Gi",
                        "requestPolicy": {
                            "default": "10Gi",
                            "validRange": {"min": "10Gi", "step": "10Gi"},
                        },
                    }
                },
            },
        ],
    },
}
CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 8,
                        "selectors": [{"cel": {"expression": "true"}}],
                        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                    },
                },
                {
                    "name": "mig",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "mig.nvidia.com"},
                        {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 2},
                    ],
                },
            ],
            "constraints": [
                {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/nvlinkDomain"}
            ],
            "config": [
                {
                    "requests": ["gpus"],
                    "opaque": {"driver": "gpu.nvidia.com", "parameters": {"a": 1}},
                }
            ],
        }
    },
}
CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
}


@pytest.mark.parametrize(
    ("obj", "parse"),
    [
        pytest.param(SLICE, parse_resource_slice, id="slice"),
        pytest.param(CLAIM, parse_resource_claim, id="claim"),
        pytest.param(CLASS, parse_device_class, id="class"),
    ],
)
def test_schema_valid_objects_parse(obj: dict[str, Any], parse: Any) -> None:
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    parse(obj)
