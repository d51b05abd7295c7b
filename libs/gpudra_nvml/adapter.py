"""The one NVML adapter: turns a pynvml-shaped library into gpudra's NodeInventory devices.

The same code runs on a real GPU (the `pynvml` module) and in tests (`FakeNvml`); it knows nothing
about which one it holds. Promises:
- `discover()` describes every GPU that answers; a GPU that is lost is reported in `lost` (by
  index), one whose description fails with another NVML error (a MIG query its driver refuses, an
  unknown error) in `failed`, instead of failing the whole discovery, so the agent can keep its
  last description. A GPU in `lost` or `failed` contributes no device at all, not half of one.
- Devices come out in GPU index order, each GPU followed by its MIG devices; names are stable.
- A GPU in MIG mode carries its free placements (dynamic MIG) and is itself marked `mig_enabled`;
  whole GPUs are MIG-disabled ones.
- An optional attribute (architecture, VBIOS version, fabric clique, NVML's version) whose query
  fails with an NVML error leaves the GPU described without it, never dropped; the failure is
  logged once per GPU and attribute until the query answers again. What the GPU is (UUID, PCI
  address, memory, MIG mode, MIG devices) is not optional: failing, the GPU is in `failed`.
- `memory_bytes` is 0 for a GPU without memory of its own: unified memory shared with the host
  (GB10, DGX Spark), where `nvmlDeviceGetMemoryInfo` answers NOT_SUPPORTED. The host's memory is
  not the GPU's to promise (the CPU and every process share it), so none is claimed, as NVIDIA's
  DRA driver publishes no memory capacity there; its utilisation samples carry no memory bytes.
- `numa_node` is the NUMA node the kernel gives the GPU's PCI function (its CPU and host-memory
  affinity, as `nvidia-smi topo -m` shows it), not `nvmlDeviceGetNumaNodeId`: that one answers
  only where the GPU's memory is a NUMA node itself (Grace), and then names that node.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpudra_nvml import mig, topology
from gpudra_nvml.errors import DeviceLostError, NvmlCallError
from gpudra_nvml.nvcall import Nvml, text
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

PcieRootResolver = Callable[[str], str]
NumaResolver = Callable[[str], "int | None"]

_BRANDS = {
    "NVIDIA": "Nvidia",
    "TESLA": "Tesla",
    "QUADRO": "Quadro",
    "GEFORCE": "GeForce",
    "TITAN": "Titan",
    "NVIDIA_RTX": "NvidiaRTX",
    "QUADRO_RTX": "QuadroRTX",
    "NVS": "NVS",
    "GRID": "Grid",
}
_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED

_ARCHITECTURES = {
    "KEPLER": "Kepler",
    "MAXWELL": "Maxwell",
    "PASCAL": "Pascal",
    "VOLTA": "Volta",
    "TURING": "Turing",
    "AMPERE": "Ampere",
    "ADA": "Ada Lovelace",
    "HOPPER": "Hopper",
    "BLACKWELL": "Blackwell",
    "RUBIN": "Rubin",
}


def sysfs_pcie_root(bus_id: str, sysfs: str = "/sys") -> str:
    """The PCI root complex of a device ("pci0000:15") from the sysfs path; "" when unknown."""
    path = os.path.realpath(os.path.join(sysfs, "bus", "pci", "devices", bus_id))
    for part in path.split(os.sep):
        if part.startswith("pci") and ":" in part:
            return part
    return ""


def sysfs_numa_node(bus_id: str, sysfs: str = "/sys") -> int | None:
    """The NUMA node of a PCI device from sysfs; None when the platform does not tell (-1) or
    the device is unknown."""
    path = os.path.join(sysfs, "bus", "pci", "devices", bus_id, "numa_node")
    try:
        with open(path, encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


@dataclass
class Discovery:
    versions: pb.Versions
    devices: list[pb.Device] = field(default_factory=list)
    #: GPU indexes that did not answer (NVML_ERROR_GPU_IS_LOST) or that NVML refuses as unusable
    #: (INSUFFICIENT_POWER, IRQ_ISSUE).
    lost: list[int] = field(default_factory=list)
    #: GPU index -> the NVML error that stopped its description (any other than GPU_IS_LOST).
    failed: dict[int, str] = field(default_factory=dict)


class NvmlAdapter:
    """Discovery and sampling over one NVML library object. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        lib: Any,
        pcie_root: PcieRootResolver = sysfs_pcie_root,
        numa_node: NumaResolver = sysfs_numa_node,
    ) -> None:
        self.nvml = Nvml(lib)
        self._pcie_root = pcie_root
        self._numa_node = numa_node
        self._started = False
        #: (GPU or "node", attribute) whose optional query is failing now: logged once per streak.
        self._broken: set[tuple[str, str]] = set()

    def start(self) -> None:
        self.nvml.call("nvmlInit")
        self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.nvml.call("nvmlShutdown")

    def gpu_count(self) -> int:
        return int(self.nvml.call("nvmlDeviceGetCount"))

    def handles(self) -> tuple[dict[int, Any], list[int]]:
        """Handles of GPUs that answer, and indexes of lost ones (a GPU refused for another
        reason is in neither)."""
        handles, lost, _ = self._probe()
        return handles, lost

    def _probe(self) -> tuple[dict[int, Any], list[int], dict[int, str]]:
        """Handles of GPUs that answer, indexes of lost ones, and why the others were refused.

        NVML refuses a handle with more than GPU_IS_LOST (INSUFFICIENT_POWER when a power cable
        is loose, NO_PERMISSION on a device node the container may not open, IRQ_ISSUE,
        UNKNOWN): that is one GPU's trouble, never the whole node's. The first two make it lost
        (unusable), the others failed (its last description is kept without a condition)."""
        handles: dict[int, Any] = {}
        lost: list[int] = []
        failed: dict[int, str] = {}
        for index in range(self.gpu_count()):
            try:
                handles[index] = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
            except DeviceLostError:
                lost.append(index)
            except NvmlCallError as exc:
                failed[index] = str(exc)
        return handles, lost, failed

    def versions(self) -> pb.Versions:
        cuda = int(self.nvml.call("nvmlSystemGetCudaDriverVersion"))
        nvml_version = self._attribute(
            "node", "NVML version", lambda: self.nvml.optional("nvmlSystemGetNVMLVersion")
        )
        return pb.Versions(
            driver=text(self.nvml.call("nvmlSystemGetDriverVersion")),
            cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}",
            nvml=text(nvml_version) if nvml_version is not None else "",
        )

    def discover(self) -> Discovery:
        result = Discovery(versions=self.versions())
        handles, result.lost, result.failed = self._probe()
        gpus: dict[int, pb.Device] = {}
        for index, handle in sorted(handles.items()):
            try:
                gpus[index] = self._gpu(index, handle)
            except DeviceLostError:
                result.lost.append(index)
            except NvmlCallError as exc:
                result.failed[index] = str(exc)
        live = {i: handles[i] for i in gpus}
        gone: set[int] = set()
        domains = topology.nvlink_domains(
            self.nvml, live, {i: d.pci_bus_id for i, d in gpus.items()}, gone
        )
        result.lost.extend(gone)
        for index, device in sorted(gpus.items()):
            if index in gone:
                continue
            device.nvlink_domain = domains.get(index, "")
            # A GPU is added with its MIG devices or not at all: one that stops answering half-way
            # must not appear both described afresh and carried over from the last inventory.
            handle = live[index]
            try:
                clique = self._attribute(
                    device.name, "fabric clique", partial(topology.clique_id, self.nvml, handle)
                )
                device.clique_id = clique or ""
                children = self._mig(handle, device) if device.mig_enabled else []
            except DeviceLostError:
                result.lost.append(index)
                continue
            except NvmlCallError as exc:
                result.failed[index] = str(exc)
                continue
            result.versions.vbios[device.uuid] = device.vbios_version
            result.devices.append(device)
            result.devices.extend(children)
        result.lost.sort()
        return result

    def _gpu(self, index: int, handle: Any) -> pb.Device:
        call, name = self.nvml.call, f"gpu-{index}"

        def optional(function: str) -> Any:
            return self._attribute(name, function, lambda: self.nvml.optional(function, handle))

        major, minor = call("nvmlDeviceGetCudaComputeCapability", handle)
        bus_id = topology.normalize_bus_id(text(call("nvmlDeviceGetPciInfo", handle).busId))
        device = pb.Device(
            name=name,
            type=pb.Device.TYPE_GPU,
            uuid=text(call("nvmlDeviceGetUUID", handle)),
            index=index,
            minor=int(call("nvmlDeviceGetMinorNumber", handle)),
            product_name=text(call("nvmlDeviceGetName", handle)),
            brand=self._brand(int(call("nvmlDeviceGetBrand", handle))),
            architecture=self._architecture(optional("nvmlDeviceGetArchitecture")),
            cuda_compute_capability=f"{major}.{minor}",
            pci_bus_id=bus_id,
            pcie_root=self._pcie_root(bus_id),
            memory_bytes=self._memory_total(handle),
            vbios_version=text(optional("nvmlDeviceGetVbiosVersion") or ""),
        )
        numa = self._numa_node(bus_id)
        if numa is not None:
            device.numa_node = numa
        mode = self.nvml.optional("nvmlDeviceGetMigMode", handle)
        device.mig_capable = mode is not None
        device.mig_enabled = mode is not None and mode[0] == self.nvml.const(
            "NVML_DEVICE_MIG_ENABLE"
        )
        return device

    def _memory_info(self, handle: Any) -> Any | None:
        """NVML's memory info, or None where the GPU has no memory of its own (unified memory).
        Only NOT_SUPPORTED means that: any other error is the GPU's description failing."""
        try:
            return self.nvml.call("nvmlDeviceGetMemoryInfo", handle)
        except NvmlCallError as exc:
            if exc.code == _NOT_SUPPORTED:
                return None
            raise

    def _memory_total(self, handle: Any) -> int:
        memory = self._memory_info(handle)
        return 0 if memory is None else int(memory.total)

    def _attribute(self, gpu: str, what: str, read: Callable[[], Any]) -> Any | None:
        """`read()`, or None when it fails with an NVML error (logged once per streak). A GPU that
        is lost (DeviceLostError) is still lost: that is not an attribute failing."""
        try:
            value = read()
        except NvmlCallError as exc:
            if (gpu, what) not in self._broken:
                self._broken.add((gpu, what))
                log.warning("%s: %s unreadable (%s): described without it", gpu, what, exc)
            return None
        if (gpu, what) in self._broken:
            self._broken.discard((gpu, what))
            log.info("%s: %s readable again", gpu, what)
        return value

    def _mig(self, handle: Any, gpu: pb.Device) -> list[pb.Device]:
        profiles = mig.gi_profiles(self.nvml, handle)
        possible = [p for prof in profiles for p in mig.placements(self.nvml, handle, prof)]
        gpu.memory_slices = max((p.start + p.size for p in possible), default=0)
        devices = mig.mig_devices(self.nvml, handle, gpu, profiles)
        held = mig.gpu_instance_slices(self.nvml, handle, profiles) or set()
        gpu.free_placements.extend(mig.free_placements(possible, devices, held))
        return devices

    def _brand(self, value: int) -> str:
        for key, label in _BRANDS.items():
            if getattr(self.nvml.lib, f"NVML_BRAND_{key}", None) == value:
                return label
        return "Unknown"

    def _architecture(self, value: Any) -> str:
        if value is None:
            return ""
        for key, label in _ARCHITECTURES.items():
            if self.nvml.const(f"NVML_DEVICE_ARCH_{key}") == value:
                return label
        return ""

    def utilization(self) -> list[pb.DeviceUtilization]:
        """One sample per GPU that answers (NVML does not sample MIG devices separately); a GPU
        whose queries fail is left out of this sample."""
        handles, _ = self.handles()
        out: list[pb.DeviceUtilization] = []
        for index, handle in sorted(handles.items()):
            try:
                rates = self.nvml.call("nvmlDeviceGetUtilizationRates", handle)
                memory = self._memory_info(handle)
                uuid = text(self.nvml.call("nvmlDeviceGetUUID", handle))
            except (DeviceLostError, NvmlCallError):
                continue  # no sample for this GPU this time; the others are still sampled
            out.append(
                pb.DeviceUtilization(
                    device_name=f"gpu-{index}",
                    device_uuid=uuid,
                    gpu_percent=int(rates.gpu),
                    memory_percent=int(rates.memory),
                    memory_used_bytes=0 if memory is None else int(memory.used),
                    memory_total_bytes=0 if memory is None else int(memory.total),
                )
            )
        return out
