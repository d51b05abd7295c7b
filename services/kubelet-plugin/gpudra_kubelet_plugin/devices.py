"""What the plugin needs to know about this node's devices, and how it changes MIG layout.

`DeviceLookup` answers "what is device <name>" (UUID, minor, MIG parent/profile/placement, MIG
capability minors) for the names the allocator put into a claim's results; `DeviceControl` creates
and destroys MIG devices for dynamic MIG. A MIG device that does not exist yet is a *placement*: a
`DeviceInfo` with an empty `uuid` whose name, parent, profile and placement are known.

`DeviceTable` implements both over an in-memory table (loadable from JSON): the backend for tests
and simulated nodes until the NVML adapter (`gpudra_nvml`) is wired in. Its MIG creation behaves
like NVML's: a placement that overlaps an existing MIG device on the same GPU is refused. Given a
`discover` function (NVML, the simulator: `nodedevices`) it can be re-read: devices made after the
start (by an operator, or by dynamic MIG, which the node-agent publishes under their instance ids)
get names without a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from gpudra_kubelet_plugin.errors import DeviceControlError, DeviceError

DeviceKind = Literal["gpu", "mig"]


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One device as the plugin sees it; `minor` is the GPU's (for MIG: the parent GPU's)."""

    name: str
    kind: DeviceKind
    uuid: str
    minor: int
    parent_uuid: str = ""
    profile: str = ""
    placement_start: int = 0
    placement_size: int = 0
    gi_cap: int | None = None
    ci_cap: int | None = None
    profile_id: int | None = None  # NVML's GPU instance profile id (dynamic MIG needs it)
    gi_id: int | None = None  # GPU and compute instance ids of an existing MIG device
    ci_id: int | None = None
    # Named by its instance ids (`gpu-<i>-mig-<gi>-<ci>`), not a placement: NVML may give the ids
    # to another device once this one is gone, so the name goes with it (never made anew).
    by_ids: bool = False

    @property
    def exists(self) -> bool:
        """False for a MIG placement that dynamic MIG has not created yet."""
        return bool(self.uuid)

    def overlaps(self, other: DeviceInfo) -> bool:
        """Two MIG placements on the same GPU that share a memory slice."""
        return (
            self.kind == other.kind == "mig"
            and self.parent_uuid == other.parent_uuid
            and self.placement_start < other.placement_start + other.placement_size
            and other.placement_start < self.placement_start + self.placement_size
        )


class DeviceLookup(Protocol):
    """Read access to this node's devices by ResourceSlice device name."""

    async def device(self, name: str) -> DeviceInfo:
        """The device called `name`; `DeviceError` when this node has none by that name."""
        ...

    async def devices(self) -> list[DeviceInfo]:
        """Every device and MIG placement of this node, sorted by name."""
        ...

    async def reread(self) -> list[str]:
        """Read the node's devices again from their source: add those under names this lookup
        lacks, and record MIG devices made at placements it has as free; returns those names
        (none when the source cannot be re-read, e.g. a table file). What it knows to exist is
        left alone: the source may not know what dynamic MIG made (the simulator's), and
        `DeviceControl.refresh` checks those at use."""
        ...


class DeviceControl(Protocol):
    """Changes to the MIG layout, for dynamic MIG."""

    async def create_mig(self, placement: DeviceInfo) -> DeviceInfo:
        """Create the MIG device for `placement`; returns it with UUID and capability minors."""
        ...

    async def refresh(self, device: DeviceInfo) -> DeviceInfo:
        """`device` (an existing MIG device, as looked up) as it is now: unchanged while a device
        has its UUID; once none has, what its name denotes now (a free placement), or
        `DeviceError` when the name is gone with it (`by_ids`). A table that changes only through
        this control is never stale; one that other processes' changes bypass can be."""
        ...

    async def destroy_mig(self, device: DeviceInfo) -> None:
        """Destroy a MIG device created by `create_mig` under the name `device.name`.

        With a UUID, exactly the device with that UUID: when none has it any more, it is gone
        already (success), even if the name or its GPU/compute instance ids now denote another
        device, which is left alone. Without a UUID, the device at exactly its placement, if any.
        """
        ...


class DeviceTable:
    """An in-memory `DeviceLookup` + `DeviceControl` (simulated MIG creation)."""

    def __init__(
        self,
        devices: Iterable[DeviceInfo],
        discover: Callable[[], list[DeviceInfo]] | None = None,
    ) -> None:
        """`discover` (blocking; run in a worker thread) gives the node's devices now."""
        self._discover = discover
        self._devices: dict[str, DeviceInfo] = {}
        for info in devices:
            if info.name in self._devices:
                raise DeviceError(f"device table names {info.name!r} twice")
            self._devices[info.name] = info
        self._lock = asyncio.Lock()
        self._next_cap = 0
        self._reserve_caps(self._devices.values())

    def _reserve_caps(self, devices: Iterable[DeviceInfo]) -> None:
        """Simulated creation numbers capabilities above every one the table has seen."""
        caps = (c for d in devices for c in (d.gi_cap, d.ci_cap) if c is not None)
        self._next_cap = max(self._next_cap, 1 + max(caps, default=1000))

    @classmethod
    def from_json(cls, path: Path) -> DeviceTable:
        """Load `{"devices": [{"name", "type", "uuid", "minor", ...}]}` (see `parse_device`)."""
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DeviceError(f"cannot read device table {path}: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("devices"), list):
            raise DeviceError(f"device table {path}: expected an object with a 'devices' list")
        return cls(parse_device(item) for item in document["devices"])

    async def device(self, name: str) -> DeviceInfo:
        try:
            return self._devices[name]
        except KeyError:
            raise DeviceError(f"no device {name!r} on this node") from None

    async def devices(self) -> list[DeviceInfo]:
        return [self._devices[name] for name in sorted(self._devices)]

    async def reread(self) -> list[str]:
        if self._discover is None:
            return []
        found = await asyncio.to_thread(self._discover)
        async with self._lock:
            new = [
                d
                for d in found
                if (known := self._devices.get(d.name)) is None or (d.exists and not known.exists)
            ]
            for info in new:
                self._devices[info.name] = info
            self._reserve_caps(new)
        return sorted(d.name for d in new)

    def replace(self, info: DeviceInfo) -> None:
        """Record what a real `DeviceControl` made of the device called `info.name`."""
        if info.name not in self._devices:
            raise DeviceError(f"no device {info.name!r} on this node")
        self._devices[info.name] = info

    def forget(self, uuid: str) -> None:
        """Record that the MIG device `uuid` is gone: its placement names are free placements
        again, and its `by_ids` name is dropped (NVML may give the ids to another device), as
        in a table discovered now. Names that denote another device are left alone."""
        for name, info in list(self._devices.items()):
            if info.kind != "mig" or not uuid or info.uuid != uuid:
                continue
            if info.by_ids:
                del self._devices[name]
            else:
                self._devices[name] = dataclasses.replace(
                    info, uuid="", gi_cap=None, ci_cap=None, gi_id=None, ci_id=None
                )

    async def refresh(self, device: DeviceInfo) -> DeviceInfo:
        return await self.device(device.name)  # the simulated GPUs change only through the table

    async def create_mig(self, placement: DeviceInfo) -> DeviceInfo:
        async with self._lock:
            current = self._devices.get(placement.name)
            if current is None or current.kind != "mig":
                raise DeviceControlError(f"{placement.name!r} is not a MIG placement of this node")
            if current.exists:
                return current
            for other in self._devices.values():
                if other.exists and other.name != current.name and other.overlaps(current):
                    raise DeviceControlError(
                        f"cannot create {current.name}: placement overlaps MIG device {other.name}"
                    )
            created = dataclasses.replace(
                current,
                uuid="MIG-"
                + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{current.parent_uuid}/{current.name}")),
                gi_cap=self._next_cap,
                ci_cap=self._next_cap + 1,
            )
            self._next_cap += 2
            self._devices[current.name] = created
            return created

    async def destroy_mig(self, device: DeviceInfo) -> None:
        async with self._lock:
            current = self._devices.get(device.name)
            if current is None or current.kind != "mig":
                raise DeviceControlError(f"{device.name!r} is not a MIG device of this node")
            self.forget(device.uuid or current.uuid)


def parse_device(item: Any) -> DeviceInfo:
    """One device-table entry: `name`, `type` (gpu|mig), `uuid`, `minor`; MIG adds `parentUUID`,
    `profile`, `placement` {`start`, `size`}, `giCap`, `ciCap` (empty `uuid`: not created yet)."""
    if not isinstance(item, Mapping):
        raise DeviceError(f"device entry must be an object, got {item!r}")
    try:
        kind = item["type"]
        if kind not in ("gpu", "mig"):
            raise DeviceError(f"device {item.get('name')!r}: type must be gpu or mig")
        placement = item.get("placement", {})
        return DeviceInfo(
            name=str(item["name"]),
            kind=kind,
            uuid=str(item.get("uuid", "")),
            minor=int(item["minor"]),
            parent_uuid=str(item.get("parentUUID", "")),
            profile=str(item.get("profile", "")),
            placement_start=int(placement.get("start", 0)),
            placement_size=int(placement.get("size", 0)),
            gi_cap=None if item.get("giCap") is None else int(item["giCap"]),
            ci_cap=None if item.get("ciCap") is None else int(item["ciCap"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DeviceError(f"malformed device entry {item!r}: {exc!r}") from exc
