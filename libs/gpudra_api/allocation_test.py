from __future__ import annotations

from gpudra_api import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceConfiguration,
    DeviceRequestAllocationResult,
    DeviceToleration,
    NodeSelector,
    Quantity,
)


def test_serialises_like_kube_scheduler_omitting_unset_fields() -> None:
    result = AllocationResult(
        results=(
            DeviceRequestAllocationResult("gpus", "gpu.nvidia.com", "node-1", "gpu-0"),
            DeviceRequestAllocationResult(
                "shared",
                "gpu.nvidia.com",
                "node-1",
                "gpu-1",
                admin_access=True,
                tolerations=(DeviceToleration(key="k", operator="Exists"),),
                binding_conditions=("ready",),
                binding_failure_conditions=("failed",),
                share_id="a-b",
                consumed_capacity={"memory": Quantity.parse("10240Mi")},
            ),
        ),
        config=(
            DeviceAllocationConfiguration(
                "FromClass", (), DeviceConfiguration("gpu.nvidia.com", {"sharing": "mps"})
            ),
        ),
        node_selector=NodeSelector.for_node("node-1"),
    )
    assert result.to_json() == {
        "devices": {
            "results": [
                {
                    "request": "gpus",
                    "driver": "gpu.nvidia.com",
                    "pool": "node-1",
                    "device": "gpu-0",
                },
                {
                    "request": "shared",
                    "driver": "gpu.nvidia.com",
                    "pool": "node-1",
                    "device": "gpu-1",
                    "adminAccess": True,
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                    "bindingConditions": ["ready"],
                    "bindingFailureConditions": ["failed"],
                    "shareID": "a-b",
                    "consumedCapacity": {"memory": "10Gi"},
                },
            ],
            "config": [
                {
                    "source": "FromClass",
                    "opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": "mps"}},
                }
            ],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
            ]
        },
    }
