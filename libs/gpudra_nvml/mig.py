"""MIG as NVML reports it: the GPU-instance profiles of a GPU, its existing MIG devices, and the
placements still free for dynamic partitioning.

Promises: a placement is "free" only when its memory slices overlap no existing GPU instance — a
MIG device's, or one without a compute instance (hence no MIG device) where NVML lets us list GPU
instances (it needs privileges; unprivileged, only MIG devices are seen); MIG devices are named `gpu-<parent>-mig-<gi>-<ci>` (stable while the instance exists); the profile name
of a MIG device is its GPU instance profile ("3g.40gb"), prefixed "<n>c." when its compute instance
uses fewer slices than the GPU instance, as NVIDIA names such devices.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from gpudra_nvml.nvcall import Nvml, text
from gpudrapb.v1 import inventory_pb2 as pb

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GiProfile:
    name: str
    profile_id: int
    size: int
    resources: pb.MigResources


def gi_profiles(nvml: Nvml, gpu: Any) -> list[GiProfile]:
    """Every GPU-instance profile the GPU supports, in NVML's profile order."""
    out: list[GiProfile] = []
    for index in range(int(nvml.const("NVML_GPU_INSTANCE_PROFILE_COUNT"))):
        info = nvml.optional("nvmlDeviceGetGpuInstanceProfileInfo", gpu, index)
        if info is None or info.instanceCount == 0:
            continue
        name = text(info.name).removeprefix("MIG ").strip()
        resources = pb.MigResources(
            multiprocessors=info.multiprocessorCount,
            copy_engines=info.copyEngineCount,
            decoders=info.decoderCount,
            encoders=info.encoderCount,
            jpeg_engines=info.jpegCount,
            ofa_engines=info.ofaCount,
            memory_bytes=info.memorySizeMB * _MIB,
        )
        out.append(GiProfile(name, info.id, info.sliceCount, resources))
    return out


def placements(nvml: Nvml, gpu: Any, profile: GiProfile) -> list[pb.MigPlacement]:
    capacity = 32
    array = (nvml.const("c_nvmlGpuInstancePlacement_t") * capacity)()
    count = ctypes.c_uint(capacity)
    found = nvml.optional(
        "nvmlDeviceGetGpuInstancePossiblePlacements",
        gpu,
        profile.profile_id,
        array,
        ctypes.byref(count),
    )
    if found is None:
        return []
    return [
        pb.MigPlacement(
            profile=profile.name,
            profile_id=profile.profile_id,
            start=array[i].start,
            size=array[i].size,
            resources=profile.resources,
        )
        for i in range(min(count.value, capacity))
    ]


def gpu_instance_slices(nvml: Nvml, gpu: Any, profiles: list[GiProfile]) -> set[int] | None:
    """Memory slices held by the GPU's GPU instances, with or without a compute instance; None
    when NVML will not list them (unprivileged)."""
    held: set[int] = set()
    capacity = 32  # more than the most GPU instances a profile allows (7)
    for profile in profiles:
        array = (nvml.const("c_nvmlGpuInstance_t") * capacity)()
        count = ctypes.c_uint(capacity)
        listed = nvml.optional(
            "nvmlDeviceGetGpuInstances", gpu, profile.profile_id, array, ctypes.byref(count)
        )
        if listed is None:
            return None
        for i in range(min(count.value, capacity)):
            info = nvml.optional("nvmlGpuInstanceGetInfo", array[i])
            if info is None:
                return None
            start = int(info.placement.start)
            held |= set(range(start, start + int(info.placement.size)))
    return held


def mig_devices(
    nvml: Nvml, gpu: Any, parent: pb.Device, profiles: list[GiProfile]
) -> list[pb.Device]:
    """The MIG devices that exist on `gpu`, described with what they inherit from `parent`."""
    by_id = {p.profile_id: p for p in profiles}
    out: list[pb.Device] = []
    for slot in range(int(nvml.call("nvmlDeviceGetMaxMigDeviceCount", gpu))):
        handle = nvml.optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu, slot)
        if handle is None:
            continue
        gi = int(nvml.call("nvmlDeviceGetGpuInstanceId", handle))
        ci = int(nvml.call("nvmlDeviceGetComputeInstanceId", handle))
        attrs = nvml.call("nvmlDeviceGetAttributes", handle)
        # GPU-instance queries are privileged on some drivers; without them the placement is
        # unknown (size 0) and the device is treated as possibly covering the whole GPU
        # (conservative: no dynamic placement is offered beside it).
        gi_handle = nvml.optional("nvmlDeviceGetGpuInstanceById", gpu, gi)
        gi_info = None if gi_handle is None else nvml.optional("nvmlGpuInstanceGetInfo", gi_handle)
        if gi_info is not None:
            profile = by_id.get(int(gi_info.profileId))
            start, size = int(gi_info.placement.start), int(gi_info.placement.size)
        else:
            profile, start, size = _by_resources(profiles, attrs), 0, 0
        profile_id = profile.profile_id if profile else 0
        name = (
            profile.name
            if profile
            else f"{attrs.gpuInstanceSliceCount}g.{attrs.memorySizeMB // 1024}gb"
        )
        if attrs.computeInstanceSliceCount < attrs.gpuInstanceSliceCount:
            name = f"{attrs.computeInstanceSliceCount}c.{name}"
        resources = pb.MigResources(
            multiprocessors=attrs.multiprocessorCount,
            copy_engines=attrs.sharedCopyEngineCount,
            decoders=attrs.sharedDecoderCount,
            encoders=attrs.sharedEncoderCount,
            jpeg_engines=attrs.sharedJpegCount,
            ofa_engines=attrs.sharedOfaCount,
            memory_bytes=attrs.memorySizeMB * _MIB,
        )
        device = pb.Device(
            name=f"{parent.name}-mig-{gi}-{ci}",
            type=pb.Device.TYPE_MIG,
            uuid=text(nvml.call("nvmlDeviceGetUUID", handle)),
            index=parent.index,
            minor=parent.minor,
            product_name=parent.product_name,
            brand=parent.brand,
            architecture=parent.architecture,
            cuda_compute_capability=parent.cuda_compute_capability,
            pci_bus_id=parent.pci_bus_id,
            pcie_root=parent.pcie_root,
            nvlink_domain=parent.nvlink_domain,
            clique_id=parent.clique_id,
            memory_bytes=attrs.memorySizeMB * _MIB,
            parent_uuid=parent.uuid,
            parent_index=parent.index,
            mig_profile=name,
            placement=pb.MigPlacement(
                profile=name, profile_id=profile_id, start=start, size=size, resources=resources
            ),
            gpu_instance_id=gi,
            compute_instance_id=ci,
        )
        if parent.HasField("numa_node"):
            device.numa_node = parent.numa_node
        out.append(device)
    return out


def _by_resources(profiles: list[GiProfile], attrs: Any) -> GiProfile | None:
    """The profile of a GPU instance known only by its attributes (None when none matches)."""
    for p in profiles:
        r = p.resources
        if (r.multiprocessors, r.memory_bytes) == (
            attrs.multiprocessorCount,
            attrs.memorySizeMB * _MIB,
        ):
            return p
    return None


def free_placements(
    all_placements: list[pb.MigPlacement],
    existing: list[pb.Device],
    held: set[int] | frozenset[int] = frozenset(),
) -> list[pb.MigPlacement]:
    """The placements overlapping no existing MIG device and no slice in `held` (GPU instances
    without a MIG device)."""
    used: set[int] = set(held)
    for d in existing:
        if d.placement.size == 0:  # placement unknown: it may cover any slice
            return []
        used |= set(range(d.placement.start, d.placement.start + d.placement.size))
    return [p for p in all_placements if not used & set(range(p.start, p.start + p.size))]
