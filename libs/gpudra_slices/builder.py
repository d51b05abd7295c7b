"""NodeInventory → the node's resource.k8s.io/v1 ResourceSlices (one pool per node).

What comes out, for one node:
- Whole GPUs (MIG disabled) as devices `gpu-<i>`.
- For each GPU in MIG mode, a counter set `gpu-<i>-slices` with one counter per memory slice
  (`memory-slice-<k>`, value 1): the KEP-4815 partitionable-device model. Every existing MIG device
  (`gpu-<i>-mig-<gi>-<ci>`) and, with dynamic MIG on, every free placement
  (`gpu-<i>-mig-<profile>-<start>`) consumes the slices it covers, so the allocator can never hand out
  two that overlap — including a profile that does not exist yet.
- Counter sets travel in slices of their own, the layout of Kubernetes 1.35, which forbids devices
  and sharedCounters in one slice. Kubernetes 1.34's alpha DRAPartitionableDevices wanted the
  opposite (a device may only consume a counter set of its own slice) and rejects these slices
  when the gate is on; with it off (its default) it drops the counters. Partitionable MIG needs
  1.35. Limits honoured for both versions: ≤ 128 devices per slice (≤ 64 when any device
  consumes counters or has taints), ≤ 8 counter sets and ≤ 32 counters per counter slice, ≤ 1024
  counter consumptions per slice.
- The pool is named after the node; `generation` is the inventory's and `resourceSliceCount` is the
  number of slices actually returned, so a consumer can tell a complete pool from a partial one.
  A node without devices still gets one slice (no `devices`), so its stale devices vanish.
- No empty list or map anywhere: the API server leaves those out when it returns a slice,
  and a slice must read back exactly as it was written (the inventory's mirror compares them).
Slices are deterministic: the same inventory gives byte-identical output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from gpudra_api.names import dns1123_label_errors, dns1123_subdomain_errors, driver_name_errors
from gpudra_slices import attributes
from gpudra_slices.errors import InvalidInventoryError
from gpudrapb.v1 import inventory_pb2 as pb

API_VERSION = "resource.k8s.io/v1"
DEFAULT_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class SliceOptions:
    driver: str = DEFAULT_DRIVER
    #: Publish free MIG placements of MIG-mode GPUs (dynamic partitioning).
    dynamic_mig: bool = True
    #: Override the pool generation (default: the inventory's generation).
    generation: int | None = None
    max_devices: int = 128
    max_devices_with_counters_or_taints: int = 64
    max_counter_sets: int = 8
    max_counters_per_slice: int = 32
    max_consumptions_per_slice: int = 1024


def placement_device_name(gpu_name: str, profile: str, start: int) -> str:
    """`gpu-2` + `3g.40gb` at slice 4 → `gpu-2-mig-3g-40gb-4` (a DNS label, as devices need)."""
    return f"{gpu_name}-mig-{profile.replace('.', '-').replace('+', '-')}-{start}"


def counter_set_name(gpu: pb.Device) -> str:
    return f"{gpu.name}-slices"


def _consumes(gpu: pb.Device, start: int, size: int) -> list[dict[str, Any]]:
    counters = {f"memory-slice-{k}": {"value": "1"} for k in range(start, start + size)}
    return [{"counterSet": counter_set_name(gpu), "counters": counters}]


def _device(name: str, attrs: dict[str, Any], capacity: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": attrs, "capacity": capacity}


def _check_name(name: str, what: str) -> None:
    errors = dns1123_label_errors(name)
    if errors:
        raise InvalidInventoryError(f"{what} {name!r}: {'; '.join(errors)}")


def _devices(
    inventory: pb.NodeInventory, options: SliceOptions
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(devices, counter sets) for the whole node, in device order."""
    gpus = {d.uuid: d for d in inventory.devices if d.type == pb.Device.TYPE_GPU}
    devices: list[dict[str, Any]] = []
    counter_sets: list[dict[str, Any]] = []
    for d in inventory.devices:
        _check_name(d.name, "device")
        if d.type == pb.Device.TYPE_GPU:
            health = list(d.health)
            if d.mig_enabled:
                slices = d.memory_slices or 8
                counters = {f"memory-slice-{k}": {"value": "1"} for k in range(slices)}
                counter_sets.append({"name": counter_set_name(d), "counters": counters})
                if options.dynamic_mig:
                    for p in d.free_placements:
                        name = placement_device_name(d.name, p.profile, p.start)
                        _check_name(name, "MIG placement")
                        attrs, capacity = attributes.mig(d, p, inventory.versions)
                        dev = _device(name, attrs, capacity)
                        dev["consumesCounters"] = _consumes(d, p.start, p.size)
                        devices.append(_with_taints(dev, options.driver, health))
                continue
            attrs, capacity = attributes.gpu(d, inventory.versions)
            devices.append(_with_taints(_device(d.name, attrs, capacity), options.driver, health))
        elif d.type == pb.Device.TYPE_MIG:
            parent = gpus.get(d.parent_uuid)
            if parent is None:
                raise InvalidInventoryError(
                    f"MIG device {d.name}: parent {d.parent_uuid} not in inventory"
                )
            attrs, capacity = attributes.mig(parent, d.placement, inventory.versions, uuid=d.uuid)
            attrs["profile"] = {"string": d.mig_profile}
            dev = _device(d.name, attrs, capacity)
            # Placement unknown (size 0, e.g. GPU-instance queries not permitted): claim every
            # slice, so nothing the allocator places beside it can overlap it.
            start, size = d.placement.start, d.placement.size
            if size == 0:
                start, size = 0, parent.memory_slices or 8
            dev["consumesCounters"] = _consumes(parent, start, size)
            taints = list(parent.health) + list(d.health)
            devices.append(_with_taints(dev, options.driver, taints))
            if options.dynamic_mig and d.placement.size and d.placement.profile_id:
                # An allocation made while the placement was free names the placement: it must
                # keep consuming the device's slices, or the id-named device looks free.
                alias = placement_device_name(parent.name, d.placement.profile, d.placement.start)
                _check_name(alias, "MIG placement")
                twin = _device(alias, dict(attrs), dict(capacity))
                twin["consumesCounters"] = _consumes(parent, start, size)
                devices.append(_with_taints(twin, options.driver, taints))
        else:
            raise InvalidInventoryError(f"device {d.name}: unknown type {d.type}")
    return devices, counter_sets


def _with_taints(
    device: dict[str, Any], driver: str, health: list[pb.HealthCondition]
) -> dict[str, Any]:
    taints = attributes.taints(driver, health)
    if taints:
        device["taints"] = taints
    return device


def _pack_devices(
    devices: list[dict[str, Any]], options: SliceOptions
) -> list[list[dict[str, Any]]]:
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    consumptions = 0
    strict = False
    for dev in devices:
        n = sum(len(c["counters"]) for c in dev.get("consumesCounters", ()))
        dev_strict = bool(n or dev.get("taints"))
        limit = (
            options.max_devices_with_counters_or_taints
            if strict or dev_strict
            else options.max_devices
        )
        if current and (
            len(current) + 1 > limit or consumptions + n > options.max_consumptions_per_slice
        ):
            chunks.append(current)
            current, consumptions, strict = [], 0, False
        current.append(dev)
        consumptions += n
        strict = strict or dev_strict
    if current:
        chunks.append(current)
    return chunks


def _pack_counter_sets(
    sets: list[dict[str, Any]], options: SliceOptions
) -> list[list[dict[str, Any]]]:
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    counters = 0
    for s in sets:
        n = len(s["counters"])
        if n > options.max_counters_per_slice:
            raise InvalidInventoryError(f"counter set {s['name']} has {n} counters")
        if current and (
            len(current) + 1 > options.max_counter_sets
            or counters + n > options.max_counters_per_slice
        ):
            chunks.append(current)
            current, counters = [], 0
        current.append(s)
        counters += n
    if current:
        chunks.append(current)
    return chunks


def slice_name(node: str, driver: str, k: int) -> str:
    name = f"{node}-{driver}-{k}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(f"{node}/{driver}".encode()).hexdigest()[:10]
    return f"{node[:200].rstrip('.-')}-{digest}-{k}"


def build_slices(
    inventory: pb.NodeInventory, options: SliceOptions | None = None
) -> list[dict[str, Any]]:
    """The ResourceSlices (v1 JSON objects) that publish `inventory`; see the module docstring."""
    options = options or SliceOptions()
    node = inventory.node
    if dns1123_subdomain_errors(node):
        raise InvalidInventoryError(
            f"node name {node!r}: {'; '.join(dns1123_subdomain_errors(node))}"
        )
    if driver_name_errors(options.driver):
        raise InvalidInventoryError(
            f"driver {options.driver!r}: {'; '.join(driver_name_errors(options.driver))}"
        )
    devices, counter_sets = _devices(inventory, options)
    names = [d["name"] for d in devices]
    if len(set(names)) != len(names):
        raise InvalidInventoryError(f"node {node}: duplicate device names")
    set_names = [c["name"] for c in counter_sets]
    if len(set(set_names)) != len(set_names):
        raise InvalidInventoryError(f"node {node}: duplicate MIG GPU names (counter sets)")
    specs: list[dict[str, Any]] = [
        {"sharedCounters": chunk} for chunk in _pack_counter_sets(counter_sets, options)
    ]
    specs += [{"devices": chunk} for chunk in _pack_devices(devices, options)]
    if not specs:
        # An empty pool is still published, so stale devices vanish; without a `devices` key,
        # as the API server (omitempty) returns it, or the mirror would see it differ forever.
        specs = [{}]
    generation = inventory.generation if options.generation is None else options.generation
    pool = {"name": node, "generation": generation, "resourceSliceCount": len(specs)}
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, options.driver, k)},
            "spec": {"driver": options.driver, "pool": dict(pool), "nodeName": node, **spec},
        }
        for k, spec in enumerate(specs)
    ]
