from __future__ import annotations

import copy
from typing import Any

import pytest

from gpudra_api import Quantity, ValidationError, parse_resource_slice


def _slice(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 3, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "index": {"int": 0},
                        "cudaComputeCapability": {"version": "9.0.0"},
                        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
                        "nvlinks": {"strings": ["a", "b"]},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }
    base["spec"].update(spec)
    return base


def test_parses_devices_attributes_and_capacity() -> None:
    s = parse_resource_slice(_slice())
    assert (s.name, s.driver, s.pool.name, s.pool.generation) == (
        "node-1-gpu",
        "gpu.nvidia.com",
        "node-1",
        3,
    )
    device = s.devices[0]
    assert device.attributes["index"].scalar == 0
    assert device.attributes["cudaComputeCapability"].kind == "version"
    assert device.attributes["nvlinks"].is_list
    assert device.attributes["nvlinks"].values == ("a", "b")
    assert device.capacity["memory"].value == Quantity.parse("80Gi")


def _too_many_devices() -> dict[str, Any]:
    data = _slice()
    data["spec"]["devices"] = [{"name": f"d{i}"} for i in range(129)]
    return data


def _tainted_65() -> dict[str, Any]:
    data = _slice()
    data["spec"]["devices"] = [
        {"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)
    ]
    return data


def _mutate(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_slice())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if isinstance(target, list) and path[-1] == len(target):
        target.append(value)
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(_too_many_devices(), "spec.devices", id="more-than-128-devices"),
        pytest.param(_tainted_65(), "spec.devices", id="more-than-64-tainted-devices"),
        pytest.param(_slice(allNodes=True), "spec", id="two-node-selections"),
        pytest.param(_mutate(["spec", "nodeName"], None), "spec", id="no-node-selection"),
        pytest.param(
            _mutate(["spec", "pool", "resourceSliceCount"], 0),
            "spec.pool.resourceSliceCount",
            id="zero-slice-count",
        ),
        pytest.param(_mutate(["spec", "driver"], "Not_A_Driver"), "spec.driver", id="bad-driver"),
        pytest.param(
            _mutate(["spec", "devices", 0, "attributes", "index"], {"int": 1, "string": "x"}),
            "spec.devices[0].attributes[index]",
            id="attribute-two-values",
        ),
        pytest.param(
            _mutate(["spec", "devices", 0, "attributes", "v"], {"version": "1.02.3"}),
            "spec.devices[0].attributes[v].version",
            id="bad-semver",
        ),
        pytest.param(
            _mutate(["spec", "devices", 0, "capacity", "memory"], {"value": "lots"}),
            "spec.devices[0].capacity[memory].value",
            id="bad-quantity",
        ),
        pytest.param(
            _mutate(["spec", "devices", 0, "attributes", "bad name"], {"int": 1}),
            "spec.devices[0].attributes[bad name]",
            id="bad-attribute-name",
        ),
        pytest.param(
            _mutate(["spec", "devices", 1], {"name": "gpu-0"}), "spec.devices", id="duplicate-names"
        ),
        pytest.param(
            _mutate(
                ["spec", "sharedCounters"], [{"name": "cs", "counters": {"m": {"value": "1"}}}]
            ),
            "spec",
            id="devices-and-counters",
        ),
        pytest.param(
            _mutate(["spec", "devices", 0, "nodeName"], "node-1"),
            "spec.devices[0]",
            id="device-node-without-per-device-selection",
        ),
        pytest.param(
            _mutate(
                ["spec", "devices", 0, "capacity", "memory"],
                {"value": "8", "requestPolicy": {"default": "1"}},
            ),
            "spec.devices[0].capacity",
            id="policy-needs-multiple-allocations",
        ),
        pytest.param(_mutate(["spec"], "nope"), "spec", id="spec-not-object"),
    ],
)
def test_rejects_invalid_slices_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_resource_slice(data)
    assert info.value.obj == "ResourceSlice node-1-gpu"
    assert info.value.field == field


def test_per_device_node_selection_and_counters() -> None:
    data = _slice(nodeName=None, perDeviceNodeSelection=True)
    data["spec"]["devices"] = [
        {
            "name": "p0",
            "nodeName": "node-1",
            "consumesCounters": [
                {"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}
            ],
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {
                    "value": "10Gi",
                    "requestPolicy": {
                        "default": "1Gi",
                        "validRange": {"min": "1Gi", "step": "1Gi"},
                    },
                }
            },
            "bindingConditions": ["ready"],
            "bindingFailureConditions": ["failed"],
        }
    ]
    device = parse_resource_slice(data).devices[0]
    assert device.node_name == "node-1"
    assert device.consumes_counters[0].counters["memory"] == Quantity.parse("10Gi")
    policy = device.capacity["memory"].request_policy
    assert policy is not None
    assert policy.valid_range is not None
    assert policy.valid_range.step == Quantity.parse("1Gi")
    assert device.binding_conditions == ("ready",)
