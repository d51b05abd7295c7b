"""The claim shapes of the churn workload and the DeviceClasses they use, as v1 JSON.

A shape is what one pod asks for. Multi-GPU shapes of four or more GPUs carry a
`matchAttribute: gpu.nvidia.com/nvlinkDomain` constraint (all devices in one NVLink domain);
`mig` is a prioritized list small (1g.10gb) -> medium (3g.40gb) -> a full GPU; `mem-150` and
`h100-plus` select by CEL on capacity and attributes. `gpus` is the nominal GPU count of a shape
(a MIG slice counts as its share of memory slices), used to size the offered load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra_alloc.workload.errors import WorkloadError
from gpudra_alloc.workload.fleet import API_VERSION, DRIVER

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
NVLINK_ATTRIBUTE = f"{DRIVER}/nvlinkDomain"
CLIQUE_ATTRIBUTE = f"{DRIVER}/cliqueID"
MEMORY_150 = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("150Gi")) >= 0'
H100_PLUS = (
    f'device.attributes["{DRIVER}"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0 && '
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
)


@dataclass(frozen=True)
class Shape:
    key: str
    gpus: float
    mean_minutes: float
    description: str


SHAPES: dict[str, Shape] = {
    s.key: s
    for s in (
        Shape("gpu-1", 1, 60, "1 GPU, any"),
        Shape("gpu-2", 2, 120, "2 GPUs on one node"),
        Shape("gpu-4-nvl", 4, 240, "4 GPUs in one NVLink domain"),
        Shape("gpu-8-nvl", 8, 360, "8 GPUs in one NVLink domain"),
        Shape("mig", 1 / 8, 45, "MIG 1g.10gb, else 3g.40gb, else a full GPU"),
        Shape("mem-150", 1, 180, "1 GPU with at least 150Gi memory"),
        Shape("h100-plus", 1, 90, "1 GPU, compute capability >= 9.0, at least 40Gi"),
    )
}


def _cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def device_classes() -> list[dict[str, Any]]:
    """gpu.nvidia.com (full GPUs), mig.nvidia.com (MIG devices), as deploy/ ships them."""

    def cls(name: str, kind: str) -> dict[str, Any]:
        expression = (
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
        )
        return {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [_cel(expression)]},
        }

    return [cls(GPU_CLASS, "gpu"), cls(MIG_CLASS, "mig")]


def _exact(
    name: str, device_class: str, count: int = 1, selectors: tuple[str, ...] = ()
) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        request["selectors"] = [_cel(s) for s in selectors]
    return {"name": name, "exactly": request}


def _sub(name: str, device_class: str, selectors: tuple[str, ...] = ()) -> dict[str, Any]:
    sub: dict[str, Any] = {"name": name, "deviceClassName": device_class}
    if selectors:
        sub["selectors"] = [_cel(s) for s in selectors]
    return sub


def _profile(name: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{name}"'


def claim_spec(shape: str) -> dict[str, Any]:
    """The `spec.devices` of a claim of this shape."""
    constraints: list[dict[str, Any]] = []
    if shape in ("gpu-1", "gpu-2", "gpu-4-nvl", "gpu-8-nvl"):
        count = int(SHAPES[shape].gpus)
        requests = [_exact("gpus", GPU_CLASS, count)]
        if count >= 4:
            constraints.append({"requests": ["gpus"], "matchAttribute": NVLINK_ATTRIBUTE})
    elif shape == "mig":
        requests = [
            {
                "name": "gpu",
                "firstAvailable": [
                    _sub("small", MIG_CLASS, (_profile("1g.10gb"),)),
                    _sub("medium", MIG_CLASS, (_profile("3g.40gb"),)),
                    _sub("full", GPU_CLASS),
                ],
            }
        ]
    elif shape == "mem-150":
        requests = [_exact("gpus", GPU_CLASS, 1, (MEMORY_150,))]
    elif shape == "h100-plus":
        requests = [_exact("gpus", GPU_CLASS, 1, (H100_PLUS,))]
    else:
        raise WorkloadError(f"unknown claim shape {shape!r}; known: {', '.join(SHAPES)}")
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def resource_claim(shape: str, name: str, namespace: str = "default") -> dict[str, Any]:
    """A ResourceClaim of this shape; the shape is also recorded as a label."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"gpudra.io/shape": shape},
        },
        "spec": claim_spec(shape),
    }
