"""One inventory device → the attributes, capacity and taints of a resource.k8s.io/v1 Device.

Names follow docs/DEVICES.md (NVIDIA's DRA attribute names in the driver's domain, Kubernetes'
standard PCI names, gpudra's topology names). Versions are written as semver: NVML's "570.124.06"
becomes "570.124.6" (semver forbids leading zeros), "12.4" becomes "12.4.0". Health conditions
become device taints under the driver's domain (`<driver>/xid`, `/ecc`, `/lost`,
`/row-remap-pending`, `/row-remap-failed`); a MIG device or MIG placement also carries its parent
GPU's taints, since it fails with its parent.
"""

from __future__ import annotations

from typing import Any

from gpudra_slices.errors import InvalidInventoryError
from gpudrapb.v1 import inventory_pb2 as pb

KUBE_PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
KUBE_PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: Kubernetes caps a string attribute at 64 characters.
MAX_STRING = 64

_TAINTS = {
    pb.HealthCondition.KIND_XID: ("xid", "NoSchedule"),
    pb.HealthCondition.KIND_ECC: ("ecc", "NoExecute"),
    pb.HealthCondition.KIND_LOST: ("lost", "NoExecute"),
    # DCGM isolates a GPU for either (DCGM_ERROR_ISOLATE). A pending remap leaves running work
    # unaffected (NVIDIA's memory error management guide) and is applied by the next reset: no
    # new work until then. A failed one means the GPU is due for replacement: drain it.
    pb.HealthCondition.KIND_ROW_REMAP_PENDING: ("row-remap-pending", "NoSchedule"),
    pb.HealthCondition.KIND_ROW_REMAP_FAILED: ("row-remap-failed", "NoExecute"),
}


def semver(raw: str, what: str) -> str:
    parts = raw.strip().split(".")
    if not raw or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise InvalidInventoryError(f"{what} {raw!r} is not a dotted numeric version")
    parts += ["0"] * (3 - len(parts))
    return ".".join(str(int(p)) for p in parts)


def quantity(n: int) -> str:
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _string(value: str, name: str, device: str) -> dict[str, Any]:
    if len(value) > MAX_STRING:
        raise InvalidInventoryError(f"device {device}: attribute {name} longer than {MAX_STRING}")
    return {"string": value}


def common(device: pb.Device, versions: pb.Versions) -> dict[str, Any]:
    """Attributes every device of a GPU shares (the GPU's identity, versions, topology)."""
    n = device.name
    attrs: dict[str, Any] = {
        "index": {"int": device.index},
        "minor": {"int": device.minor},
        "productName": _string(device.product_name, "productName", n),
        "brand": _string(device.brand, "brand", n),
        "architecture": _string(device.architecture, "architecture", n),
        "cudaComputeCapability": {
            "version": semver(device.cuda_compute_capability, "compute capability")
        },
        "driverVersion": {"version": semver(versions.driver, "driver version")},
        "cudaDriverVersion": {"version": semver(versions.cuda_driver, "CUDA driver version")},
        KUBE_PCI_BUS_ID: _string(device.pci_bus_id, KUBE_PCI_BUS_ID, n),
    }
    if device.pcie_root:
        attrs[KUBE_PCIE_ROOT] = _string(device.pcie_root, KUBE_PCIE_ROOT, n)
    if device.nvlink_domain:
        attrs["nvlinkDomain"] = _string(device.nvlink_domain, "nvlinkDomain", n)
    if device.clique_id:
        attrs["cliqueID"] = _string(device.clique_id, "cliqueID", n)
    if device.HasField("numa_node"):
        attrs["numaNode"] = {"int": device.numa_node}
    return attrs


def gpu(device: pb.Device, versions: pb.Versions) -> tuple[dict[str, Any], dict[str, Any]]:
    attrs = {"type": {"string": "gpu"}, "uuid": _string(device.uuid, "uuid", device.name)}
    attrs |= common(device, versions)
    if not device.memory_bytes:
        # No memory of its own (unified memory, GB10): no capacity, so that no selector on
        # memory can match it by accident, as NVIDIA's driver publishes it.
        return attrs, {}
    return attrs, {"memory": {"value": quantity(device.memory_bytes)}}


def mig_capacity(resources: pb.MigResources) -> dict[str, Any]:
    return {
        "memory": {"value": quantity(resources.memory_bytes)},
        "multiprocessors": {"value": str(resources.multiprocessors)},
        "copyEngines": {"value": str(resources.copy_engines)},
        "decoders": {"value": str(resources.decoders)},
        "encoders": {"value": str(resources.encoders)},
        "jpegEngines": {"value": str(resources.jpeg_engines)},
        "ofaEngines": {"value": str(resources.ofa_engines)},
    }


def mig(
    parent: pb.Device, placement: pb.MigPlacement, versions: pb.Versions, uuid: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A MIG device that exists (with `uuid`) or a placement dynamic MIG may create (without)."""
    attrs: dict[str, Any] = {"type": {"string": "mig"}}
    if uuid:
        attrs["uuid"] = _string(uuid, "uuid", parent.name)
    attrs |= common(parent, versions)
    attrs["parentUUID"] = _string(parent.uuid, "parentUUID", parent.name)
    attrs["profile"] = _string(placement.profile, "profile", parent.name)
    attrs["placementStart"] = {"int": placement.start}
    return attrs, mig_capacity(placement.resources)


def taints(driver: str, conditions: list[pb.HealthCondition]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in conditions:
        name, effect = _TAINTS.get(c.kind, ("unhealthy", "NoSchedule"))
        taint: dict[str, Any] = {"key": f"{driver}/{name}", "value": str(c.code), "effect": effect}
        if c.HasField("since"):
            taint["timeAdded"] = c.since.ToJsonString().split(".")[0].removesuffix("Z") + "Z"
        out.setdefault(name, taint)
    return [out[k] for k in sorted(out)]
