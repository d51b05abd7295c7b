"""Topology NVML knows and NVIDIA's DRA driver does not publish: NVLink islands and fabric cliques.

- `nvlink_domains`: GPUs joined by active NVLinks — directly (bridges) or through the same NVSwitch
  (identified by the remote end's PCI bus ID and, where the driver tells, its device type) — form
  one domain. A link either end reports active joins both; a bridge to a GPU that is lost right now
  still makes its partner an NVLink GPU. Names are `nvswitch-<k>` when the
  island contains a switch and `nvlink-<k>` otherwise, k counting islands in order of their lowest
  GPU index. GPUs with no active link get no domain. Every link index below NVML_NVLINK_MAX_LINKS
  is read (links are not numbered without gaps: a SKU may disable any of them) and only active ones
  count; one NVML does not support is simply absent. A link whose queries fail counts as inactive;
  a GPU that answers GPU_IS_LOST is left out and added to `lost`, so one GPU never fails the
  whole computation.
- `clique_id`: `<clusterUUID>.<cliqueId>` from `nvmlDeviceGetGpuFabricInfoV` once the fabric manager
  has registered the GPU; empty otherwise (no fabric, registration pending or failed).
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Mapping
from typing import Any

from gpudra_nvml.errors import DeviceLostError, NvmlCallError
from gpudra_nvml.nvcall import Nvml, text


def normalize_bus_id(raw: str) -> str:
    """NVML's "00000000:1B:00.0" as Kubernetes writes PCI addresses: "0000:1b:00.0"."""
    domain, _, rest = raw.strip().partition(":")
    if not rest:
        return raw.strip().lower()
    return f"{int(domain, 16):04x}:{rest.lower()}"


class _Islands:
    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, key: tuple[str, str]) -> tuple[str, str]:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def nvlink_domains(
    nvml: Nvml,
    handles: Mapping[int, Any],
    bus_ids: Mapping[int, str],
    lost: set[int] | None = None,
) -> dict[int, str]:
    """Domain name per GPU index, for GPUs with at least one active NVLink; GPUs found lost
    meanwhile are added to `lost` (when given) and get none."""
    gone: set[int] = set() if lost is None else lost
    local = {normalize_bus_id(b): i for i, b in bus_ids.items()}
    islands = _Islands()
    linked: set[int] = set()
    max_links = int(nvml.const("NVML_NVLINK_MAX_LINKS"))
    npu = nvml.const("NVML_NVLINK_DEVICE_TYPE_IBMNPU")
    gpu_type = nvml.const("NVML_NVLINK_DEVICE_TYPE_GPU")
    for index, handle in sorted(handles.items()):
        gpu = ("gpu", f"{index:06d}")
        for link in range(max_links):
            try:
                # Every index is read: a SKU may disable any of its links (link 0 too), so the
                # first one NVML does not support says nothing about the next.
                state = nvml.optional("nvmlDeviceGetNvLinkState", handle, link)
                if not state:
                    continue  # absent (NOT_SUPPORTED, beyond this GPU's links) or inactive
                kind = nvml.optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
                if kind == npu:
                    continue  # a CPU link (POWER9), not a GPU island
                remote = nvml.optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            except DeviceLostError:
                gone.add(index)
                break
            except NvmlCallError:
                continue  # a link that cannot be read is not counted as active
            if remote is None:
                continue
            remote_bus = normalize_bus_id(text(remote.busId))
            peer = local.get(remote_bus)
            if peer is not None:
                other = ("gpu", f"{peer:06d}")
            elif kind == gpu_type:
                other = ("peer", remote_bus)  # a GPU not discovered now (lost): still a bridge
            else:
                other = ("switch", remote_bus)  # NVSwitch, or unknown type on old drivers
            islands.union(gpu, other)
            linked.add(index)
            if peer is not None:
                linked.add(peer)  # a link one side reports active joins both ends
    components: dict[tuple[str, str], list[int]] = {}
    for index in sorted(linked - gone):
        components.setdefault(islands.find(("gpu", f"{index:06d}")), []).append(index)
    has_switch = {islands.find(k) for k in islands.parent if k[0] == "switch"}
    out: dict[int, str] = {}
    for k, (root, members) in enumerate(sorted(components.items(), key=lambda kv: kv[1][0])):
        prefix = "nvswitch" if root in has_switch else "nvlink"
        for index in members:
            out[index] = f"{prefix}-{k}"
    return out


def clique_id(nvml: Nvml, handle: Any) -> str:
    info = nvml.const("c_nvmlGpuFabricInfoV_t")()
    if nvml.optional("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info)) is None:
        # Drivers before the versioned call (R535) only have the original structure.
        info = nvml.const("c_nvmlGpuFabricInfo_t")()
        if nvml.optional("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info)) is None:
            return ""
    if info.state != nvml.const("NVML_GPU_FABRIC_STATE_COMPLETED"):
        return ""
    if info.status != nvml.const("NVML_SUCCESS"):
        return ""
    raw = bytes(info.clusterUuid)
    if not any(raw):
        return ""
    return f"{uuid.UUID(bytes=raw)}.{info.cliqueId}"
