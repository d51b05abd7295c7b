"""Small hand-written ResourceSlices and claims for the standalone modules' unit tests."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.nvidia.com"


def device(name: str, kind: str = "gpu", **attrs: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": kind}, "productName": {"string": "NVIDIA X"}}
    for key, value in attrs.items():
        attributes[key] = {"int": value} if isinstance(value, int) else {"string": value}
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": "80Gi"}}}


def slice_of(node: str, *devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{DRIVER}-0"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def claim(
    name: str,
    devices: list[tuple[str, str]] | None = None,
    reason: str = "",
    namespace: str = "default",
    request: str = "gpu",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1}}]
            }
        },
    }
    if reason:
        obj["metadata"]["annotations"] = {"gpudra.io/unschedulable": reason}
    if devices:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": request, "driver": DRIVER, "pool": pool, "device": dev}
                        for pool, dev in devices
                    ]
                }
            }
        }
    return obj


SLICES = [
    slice_of(
        "node-a",
        device("gpu-0", nvlinkDomain="nvswitch-0", index=0),
        device("gpu-1", nvlinkDomain="nvswitch-0", index=1),
    ),
    slice_of("node-b", device("gpu-0-mig-1-0", "mig", profile="1g.10gb", index=0)),
]
