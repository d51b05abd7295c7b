"""A simulated heterogeneous GPU fleet as resource.k8s.io/v1 ResourceSlices (JSON).

Promises: one pool per node, named after the node, generation 1, an honest `resourceSliceCount`;
attribute names as `docs/DEVICES.md` lists them (driver `gpu.nvidia.com`); at most 64 devices per
slice when devices consume counters. MIG-capable GPUs are published the way KEP-4815
(partitionable devices) models dynamic MIG: one counter set per GPU with one counter per memory
slice, the full GPU consuming all of them and each MIG placement consuming the slices it covers,
so a GPU is either whole or partitioned, never both. The same `Fleet` and seed always give the
same JSON, byte for byte.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.workload.errors import WorkloadError
from gpudra_alloc.workload.machines import MACHINE_TYPES, MachineType, MigProfile

DRIVER = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
MACHINE_LABEL = "gpudra.io/machine"
_MAX_COUNTER_DEVICES_PER_SLICE = 64
_CLIQUE_SIZE = 18  # GB200 NVL72: 18 compute trays per NVLink fabric clique
_NODE_PREFIX = {
    "dgx-h100": "dgx",
    "hgx-b200": "b200",
    "a100-mig": "a100",
    "l4-pcie": "l4",
    "gb200-tray": "gb200",
}

# The fleet the churn benchmark loads: eight-GPU NVLink nodes of two generations, MIG-capable
# A100s, a few PCIe-only L4s, and one GB200 NVL72 rack (18 trays, one clique).
DEFAULT_FLEET: dict[str, int] = {
    "a100-mig": 4,
    "dgx-h100": 10,
    "gb200-tray": 18,
    "hgx-b200": 4,
    "l4-pcie": 4,
}


@dataclass(frozen=True)
class Fleet:
    """Node counts per machine type (keys of `MACHINE_TYPES`) and the seed for identifiers."""

    counts: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_FLEET))
    seed: int = 0

    def __post_init__(self) -> None:
        for key, count in self.counts.items():
            if key not in MACHINE_TYPES:
                raise WorkloadError(
                    f"unknown machine type {key!r}; known: {', '.join(sorted(MACHINE_TYPES))}"
                )
            if not isinstance(count, int) or count < 0:
                raise WorkloadError(f"machine type {key}: count must be a non-negative integer")


@dataclass(frozen=True)
class FleetObjects:
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    gpus: int


def node_names(fleet: Fleet) -> list[tuple[str, MachineType]]:
    """(node name, machine type) in name order."""
    out: list[tuple[str, MachineType]] = []
    for key in sorted(fleet.counts):
        machine = MACHINE_TYPES[key]
        out.extend((f"{_NODE_PREFIX[key]}-{i:02d}", machine) for i in range(fleet.counts[key]))
    return sorted(out, key=lambda item: item[0])


def build_fleet(fleet: Fleet) -> FleetObjects:
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    gpus = 0
    tray = 0
    for name, machine in node_names(fleet):
        nodes.append({"name": name, "labels": {MACHINE_LABEL: machine.key}})
        clique = ""
        if machine.clique_tray:
            clique = (
                f"{_uuid(fleet.seed, 'cluster', str(tray // _CLIQUE_SIZE))}.{tray // _CLIQUE_SIZE}"
            )
            tray += 1
        slices.extend(_node_slices(fleet.seed, name, machine, clique))
        gpus += machine.gpus
    return FleetObjects(nodes=nodes, slices=slices, gpus=gpus)


def _uuid(seed: int, *parts: str) -> str:
    digest = hashlib.sha256("/".join((str(seed), *parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _node_slices(seed: int, node: str, machine: MachineType, clique: str) -> list[dict[str, Any]]:
    gpu_devices = [_gpu_device(seed, node, machine, index, clique) for index in range(machine.gpus)]
    if not machine.mig_profiles:
        return [_slice(f"{node}-gpus", node, 1, devices=gpu_devices)]
    per_gpu = [[gpu_devices[i], *_mig_devices(seed, node, machine, i)] for i in range(machine.gpus)]
    groups: list[list[dict[str, Any]]] = [[]]
    for devices in per_gpu:
        if len(groups[-1]) + len(devices) > _MAX_COUNTER_DEVICES_PER_SLICE:
            groups.append([])
        groups[-1].extend(devices)
    count = 1 + len(groups)
    counter_sets = [
        {
            "name": f"gpu-{i}",
            "counters": {
                f"memory-slice-{s}": {"value": "1"} for s in range(machine.mig_memory_slices)
            },
        }
        for i in range(machine.gpus)
    ]
    out = [_slice(f"{node}-counters", node, count, counters=counter_sets)]
    out.extend(
        _slice(f"{node}-gpus-{n}", node, count, devices=group) for n, group in enumerate(groups)
    )
    return out


def _slice(
    name: str,
    node: str,
    count: int,
    devices: list[dict[str, Any]] | None = None,
    counters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
        "nodeName": node,
    }
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def _common_attributes(machine: MachineType, index: int) -> dict[str, Any]:
    numa = 0 if index < machine.gpus // 2 else 1
    return {
        "index": {"int": index},
        "productName": {"string": machine.product_name},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": machine.architecture},
        "cudaComputeCapability": {"version": machine.compute_capability},
        "driverVersion": {"version": machine.driver_version},
        "cudaDriverVersion": {"version": machine.cuda_driver_version},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{16 * (index // 2) + 16:02x}"},
        "numaNode": {"int": numa},
    }


def _gpu_device(
    seed: int, node: str, machine: MachineType, index: int, clique: str
) -> dict[str, Any]:
    attributes = {
        "type": {"string": "gpu"},
        "uuid": {"string": f"GPU-{_uuid(seed, node, str(index))}"},
        "minor": {"int": index},
        **_common_attributes(machine, index),
        "resource.kubernetes.io/pciBusID": {"string": f"0000:{16 * index + 24:02x}:00.0"},
    }
    if machine.nvlink_group:
        domain = index // machine.nvlink_group
        attributes["nvlinkDomain"] = {"string": f"{machine.nvlink_prefix}-{domain}"}
    if clique:
        attributes["cliqueID"] = {"string": clique}
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": f"{machine.memory_mib}Mi"}},
    }
    if machine.mig_profiles:
        device["consumesCounters"] = [
            {
                "counterSet": f"gpu-{index}",
                "counters": {
                    f"memory-slice-{s}": {"value": "1"} for s in range(machine.mig_memory_slices)
                },
            }
        ]
    return device


def _mig_devices(seed: int, node: str, machine: MachineType, index: int) -> list[dict[str, Any]]:
    parent = f"GPU-{_uuid(seed, node, str(index))}"
    return [
        _mig_device(machine, index, parent, profile, start)
        for profile in machine.mig_profiles
        for start in profile.placements
    ]


def _mig_device(
    machine: MachineType, index: int, parent: str, profile: MigProfile, start: int
) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}-mig-{profile.name.replace('.', '-')}-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile.name},
            "parentUUID": {"string": parent},
            **_common_attributes(machine, index),
        },
        "capacity": {
            "memory": {"value": f"{profile.memory_mib}Mi"},
            "multiprocessors": {"value": str(profile.multiprocessors)},
            "copyEngines": {"value": str(profile.copy_engines)},
            "decoders": {"value": str(profile.decoders)},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": str(profile.jpeg_engines)},
            "ofaEngines": {"value": str(profile.ofa_engines)},
        },
        "consumesCounters": [
            {
                "counterSet": f"gpu-{index}",
                "counters": {
                    f"memory-slice-{s}": {"value": "1"} for s in range(start, start + profile.size)
                },
            }
        ],
    }
