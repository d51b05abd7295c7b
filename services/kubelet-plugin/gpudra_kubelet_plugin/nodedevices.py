"""This node's devices from NVML or a simulator profile, named exactly as gpudra's slices name them.

Names (gpudra_slices): whole GPU `gpu-<i>`; existing MIG device `gpu-<i>-mig-<gi>-<ci>`; free
placement for dynamic MIG `gpu-<i>-mig-<profile>-<start>` (profile with `.`/`+` as `-`). An
allocation made while a placement was free keeps naming the placement after the plugin created it,
so every existing MIG device is also reachable under its placement name. The first name is
`by_ids`: once its device is gone the name is gone too, while a placement name is free again.

MIG devices carry their access-capability minors (`migminors`).

`open_devices(source)` picks the backend: `table:<path>` (a JSON device table), `simulator:<profile>`
(gpudra_nvml's simulator; dynamic MIG is simulated by the table) or `nvml` (the real library;
dynamic MIG through NVML, see `nvmlmig`). The last two keep the library open until `close`, so a
device made after the start (it has no name in the table yet) is found by discovering again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

from gpudra_kubelet_plugin.devices import DeviceControl, DeviceInfo, DeviceLookup, DeviceTable
from gpudra_kubelet_plugin.errors import DeviceError, SettingsError
from gpudra_kubelet_plugin.migminors import MIG_MINORS_FILE, MigMinors
from gpudra_kubelet_plugin.nvmlmig import NvmlMigControl
from gpudra_nvml import NvmlError, Opened, open_adapter, open_simulator
from gpudrapb.v1 import inventory_pb2 as pb


def placement_name(gpu: str, profile: str, start: int) -> str:
    """The slice device name of a MIG placement on GPU `gpu`."""
    return f"{gpu}-mig-{profile.replace('.', '-').replace('+', '-')}-{start}"


def devices_from_inventory(devices: Iterable[pb.Device], minors: MigMinors) -> list[DeviceInfo]:
    """DeviceInfos for a node-agent inventory: GPUs, MIG devices (+ placement aliases), placements."""
    devices = list(devices)
    gpus = {d.uuid: d for d in devices if d.type == pb.Device.TYPE_GPU}
    out: dict[str, DeviceInfo] = {}
    for d in devices:
        if d.type == pb.Device.TYPE_GPU:
            out[d.name] = DeviceInfo(d.name, "gpu", d.uuid, d.minor)
            for p in d.free_placements:
                name = placement_name(d.name, p.profile, p.start)
                out[name] = DeviceInfo(
                    name, "mig", "", d.minor, d.uuid, p.profile, p.start, p.size,
                    profile_id=p.profile_id,
                )  # fmt: skip
        elif d.type == pb.Device.TYPE_MIG:
            parent = gpus.get(d.parent_uuid)
            if parent is None:
                raise DeviceError(f"MIG device {d.name}: parent {d.parent_uuid} not found")
            gi, ci = d.gpu_instance_id, d.compute_instance_id
            for name in (
                d.name,
                placement_name(parent.name, d.placement.profile, d.placement.start),
            ):
                out.setdefault(
                    name,
                    DeviceInfo(
                        name,
                        "mig",
                        d.uuid,
                        parent.minor,
                        parent.uuid,
                        d.mig_profile,
                        d.placement.start,
                        d.placement.size,
                        minors.minor(parent.minor, gi),
                        minors.minor(parent.minor, gi, ci),
                        profile_id=d.placement.profile_id,
                        gi_id=gi,
                        ci_id=ci,
                        by_ids=name == d.name,
                    ),
                )
    return [out[name] for name in sorted(out)]


@dataclasses.dataclass
class OpenedDevices:
    """This node's devices: the lookup, the MIG control, and what to call on the way out."""

    lookup: DeviceLookup
    control: DeviceControl
    close: Callable[[], None] = lambda: None


def open_devices(source: str, minors_file: Path = MIG_MINORS_FILE) -> OpenedDevices:
    """The devices of a source `table:<path>`, `simulator:<profile>` or `nvml`.

    `nvml` and `simulator` keep the library initialized until `close` (dynamic MIG, re-reading
    the devices); a table holds nothing.
    """
    kind, _, argument = source.partition(":")
    if kind == "table" and argument:
        table = DeviceTable.from_json(Path(argument))
        return OpenedDevices(table, table)
    if kind not in ("simulator", "nvml") or (kind == "simulator") != bool(argument):
        raise SettingsError(
            f"device source must be table:<path>, simulator:<profile> or nvml, got {source!r}"
        )
    minors = MigMinors.load(minors_file)
    try:
        opened = open_simulator(argument) if kind == "simulator" else open_adapter()
    except NvmlError as exc:
        raise DeviceError(f"cannot discover devices ({source}): {exc}") from exc
    return discovered_devices(opened, minors)


def discovered_devices(opened: Opened, minors: MigMinors) -> OpenedDevices:
    """The devices of an opened NVML library or simulator, re-read from it when a claim names a
    device they lack (`DeviceTable.reread`); takes `opened` over (`close` stops it)."""
    simulated = opened.source.kind == pb.InventorySource.KIND_SIMULATOR
    label = f"simulator:{opened.source.profile}" if simulated else "nvml"

    def discover() -> list[DeviceInfo]:
        try:
            return devices_from_inventory(opened.adapter.discover().devices, minors)
        except NvmlError as exc:
            raise DeviceError(f"cannot discover devices ({label}): {exc}") from exc

    try:
        table = DeviceTable(discover(), discover)
    except DeviceError:
        opened.adapter.stop()
        raise
    if simulated:  # dynamic MIG is simulated by the table
        return OpenedDevices(table, table, opened.adapter.stop)
    return OpenedDevices(
        table, NvmlMigControl(opened.adapter.nvml, table, minors), opened.adapter.stop
    )
