"""Device health for the kubelet: `DRAResourceHealth.NodeWatchResources` (v1 and v1alpha1).

`HealthHub` keeps the current health of every device of this node's pool and wakes watchers on
each change. Every stream message is the complete list (as the kubelet expects): a watcher gets the
list at once and again after every change; changes it missed while busy collapse into the newest
list, so a slow kubelet never makes the hub buffer without bound; without changes the list is
re-sent every `refresh_seconds`. The kubelet stamps every device of a report with its own time of
receipt and ignores `last_updated_time`, so its health timeout only fires for devices a report
leaves out: while the feed has been down for longer than that timeout, the stream itself reports
every device "unknown" (`reports`). A GPU's event also applies to the MIG devices (and
placements) on it. A device is unhealthy while any of its conditions is active
(several may be: an XID, then ECC errors; clearing one leaves it unhealthy). Devices start healthy:
the node-agent publishes a device only while it answers, and reports problems as events, which
`reconcile` checks against its complete reports (see `healthfeed`).

The devices follow the node's MIG layout without a restart (`sync`, which `DeviceState` calls after
dynamic MIG made or destroyed devices): an event naming a MIG device the plugin made, by its UUID,
reaches the placement name its claim was allocated as; a device that appears starts with its GPU's
conditions; a destroyed device's own conditions (reported for its UUID or its names) go with it,
and a name that no longer exists leaves the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Literal

from grpc.aio import ServicerContext as Ctx

from gpudra_kubelet_plugin.devices import DeviceInfo
from kubeletpb.drahealth.v1 import api_pb2 as h1
from kubeletpb.drahealth.v1 import api_pb2_grpc as h1_grpc
from kubeletpb.drahealth.v1alpha1 import api_pb2 as h1a1
from kubeletpb.drahealth.v1alpha1 import api_pb2_grpc as h1a1_grpc

Status = Literal["healthy", "unhealthy", "unknown"]
MAX_MESSAGE = 1024
KUBELET_HEALTH_TIMEOUT = 30  # seconds; the kubelet's default when the plugin reports none (0)


@dataclasses.dataclass(frozen=True)
class HealthEvent:
    """A condition of a device appeared (`active`) or cleared. `device_uuid` (a GPU or MIG UUID)
    or `device_name` names the device; `condition` names the kind ("XID", "ECC", ...)."""

    condition: str
    active: bool
    message: str = ""
    device_name: str = ""
    device_uuid: str = ""
    time: float | None = None


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    device: str
    status: Status
    message: str
    updated: float


class HealthHub:
    """Current health per device of one pool; see the module docstring."""

    def __init__(
        self,
        pool: str,
        devices: Iterable[DeviceInfo],
        timeout_seconds: int = 0,
        clock: Callable[[], float] = time.time,
        refresh_seconds: float | None = None,
        is_current: Callable[[], bool] = lambda: True,
    ) -> None:
        self.pool = pool
        self.timeout_seconds = timeout_seconds
        self.refresh_seconds = refresh_seconds
        self._is_current = is_current
        self._clock = clock
        self._devices = {d.name: d for d in devices}
        now = clock()
        self._current_at = now  # when a report last found the feed current (see `reports`)
        self._health = {name: DeviceHealth(name, "healthy", "", now) for name in self._devices}
        # Active conditions per device, keyed by (the device that reported it, condition): a GPU's
        # XID and its MIG device's own XID are different conditions of that MIG device.
        self._conditions: dict[str, dict[tuple[str, str], str]] = {n: {} for n in self._devices}
        self._version = 0
        self._changed = asyncio.Condition()

    def snapshot(self, determined: float | None = None) -> list[DeviceHealth]:
        """Every device's health; with `determined`, stamped as determined at that time."""
        health = [self._health[name] for name in sorted(self._health)]
        if determined is None:
            return health
        return [dataclasses.replace(h, updated=determined) for h in health]

    def affected(self, event: HealthEvent) -> list[str]:
        """Device names an event applies to: the device, and MIG devices on a GPU."""
        names = set()
        for info in self._devices.values():
            if event.device_name and info.name == event.device_name:
                names.add(info.name)
            if event.device_uuid and event.device_uuid in (info.uuid, info.parent_uuid):
                names.add(info.name)
        if event.device_name in names:
            target = self._devices[event.device_name]
            if target.kind == "gpu":
                names.update(n for n, i in self._devices.items() if i.parent_uuid == target.uuid)
        return sorted(names)

    async def update(self, event: HealthEvent) -> list[str]:
        """Apply `event`; returns the devices whose health changed (watchers are woken if any).

        A device is unhealthy while any condition is active; its message lists them."""
        updated = event.time if event.time is not None else self._clock()
        key = _key(event)
        changed = []
        for name in self.affected(event):
            conditions = self._conditions[name]
            if event.active:
                conditions[key] = event.message or event.condition
            else:
                conditions.pop(key, None)
            if self._judge(name, updated):
                changed.append(name)
        await self._notify(changed)
        return changed

    async def reconcile(self, described: Iterable[str], active: Iterable[HealthEvent]) -> list[str]:
        """Take a complete report (the node-agent's inventory): the conditions of the devices
        `described` (by UUID or name) are exactly the `active` events. Returns the devices whose
        health changed. Events are not stored: one missed (NATS away, or sent before the plugin
        subscribed) is corrected by the next report, and a report older than an event applied
        already is corrected by the next one."""
        sources = set(described)
        wanted = {_key(event): event for event in active if event.active}
        touched: set[str] = set()
        for name, conditions in self._conditions.items():
            for key in [k for k in conditions if k[0] in sources and k not in wanted]:
                del conditions[key]
                touched.add(name)
        for key, event in wanted.items():
            for name in self.affected(event):
                self._conditions[name][key] = event.message or event.condition
                touched.add(name)
        now = self._clock()
        changed = [name for name in sorted(touched) if self._judge(name, now)]
        await self._notify(changed)
        return changed

    async def sync(self, devices: Iterable[DeviceInfo]) -> list[str]:
        """Take the node's devices as they are now; returns the names whose entry in the list
        changed (watchers are woken if any). See the module docstring."""
        now = self._clock()
        current = {d.name: d for d in devices}
        changed = sorted(self._devices.keys() - current.keys())
        for name in changed:
            del self._devices[name], self._health[name], self._conditions[name]
        for name in sorted(current):
            info, before = current[name], self._devices.get(name)
            if before is not None and before.uuid == info.uuid:
                self._devices[name] = info
                continue
            self._devices[name] = info
            inherited = self._parent_sources(info)
            if before is None:
                gpu = [n for n, d in self._devices.items() if d.kind == "gpu" and n in inherited]
                self._conditions[name] = dict(self._conditions[gpu[0]]) if gpu else {}
                self._health[name] = DeviceHealth(name, "healthy", "", now)
            else:
                own = [k for k in self._conditions[name] if k[0] not in inherited]
                for key in own:
                    del self._conditions[name][key]
            if self._judge(name, now) or before is None:
                changed.append(name)
        await self._notify(changed)
        return sorted(changed)

    def _parent_sources(self, info: DeviceInfo) -> set[str]:
        """How events about the GPU of MIG device `info` name it (its UUID, its name)."""
        if not info.parent_uuid:
            return set()
        names = {
            n for n, d in self._devices.items() if d.kind == "gpu" and d.uuid == info.parent_uuid
        }
        return names | {info.parent_uuid}

    def _judge(self, name: str, updated: float) -> bool:
        """Set the device's health from its active conditions; True if it changed."""
        conditions = self._conditions[name]
        status: Status = "unhealthy" if conditions else "healthy"
        message = "; ".join(conditions[k] for k in sorted(conditions))[:MAX_MESSAGE]
        before = self._health[name]
        if (before.status, before.message) == (status, message):
            return False
        self._health[name] = DeviceHealth(name, status, message, updated)
        return True

    async def _notify(self, changed: list[str]) -> None:
        if changed:
            async with self._changed:
                self._version += 1
                self._changed.notify_all()

    @property
    def stale_after(self) -> int:
        """Seconds without a current feed after which devices are reported "unknown": the
        timeout the kubelet is told, else the kubelet's default."""
        return self.timeout_seconds or KUBELET_HEALTH_TIMEOUT

    async def reports(self) -> AsyncGenerator[list[DeviceHealth], None]:
        """`watch` as the kubelet must get it: once the feed has not been current (`is_current`)
        for longer than `stale_after`, every device "unknown", until it is current again.

        The kubelet takes a reported device as determined when the report arrives, whatever its
        `last_updated_time` says, so repeating an old list would keep it "healthy" for ever.
        The time the feed was last found current is the hub's, not the stream's: a kubelet that
        reconnects while the feed is down gets "unknown" at once.
        """
        async with contextlib.aclosing(self.watch()) as snapshots:
            async for snapshot in snapshots:
                now = self._clock()
                if self._is_current():
                    self._current_at = now
                elif now - self._current_at > self.stale_after:
                    down = now - self._current_at
                    message = f"not checked for {down:.0f} s: the health feed is down"
                    snapshot = [
                        dataclasses.replace(d, status="unknown", message=message) for d in snapshot
                    ]
                yield snapshot

    async def watch(self) -> AsyncGenerator[list[DeviceHealth], None]:
        """The full list now, then after every change (intermediate changes may collapse), and
        every `refresh_seconds` without one.

        A refresh re-stamps the list as determined now while the feed is current (`is_current`,
        e.g. NATS connected); when the feed is not current it repeats the old times. The kubelet
        reads no times: what it gets is `reports`.
        """
        seen = self._version
        yield self.snapshot()
        while True:
            async with self._changed:
                try:
                    async with asyncio.timeout(self.refresh_seconds):
                        while self._version == seen:
                            await self._changed.wait()
                except TimeoutError:
                    pass
                refreshed = self._version == seen
                seen = self._version
            if refreshed and self._is_current():
                yield self.snapshot(determined=self._clock())
            else:
                yield self.snapshot()


def _key(event: HealthEvent) -> tuple[str, str]:
    """Which condition an event sets or clears: the reporting device, the kind."""
    return (event.device_uuid or event.device_name, event.condition)


_STATUS_V1 = {"healthy": h1.HEALTHY, "unhealthy": h1.UNHEALTHY, "unknown": h1.UNKNOWN}
_STATUS_V1ALPHA1 = {
    "healthy": h1a1.HEALTHY,
    "unhealthy": h1a1.UNHEALTHY,
    "unknown": h1a1.UNKNOWN,
}


class HealthServicerV1(h1_grpc.DRAResourceHealthServicer):
    """`v1.DRAResourceHealth`."""

    def __init__(self, hub: HealthHub) -> None:
        self._hub = hub

    async def NodeWatchResources(
        self,
        request: h1.NodeWatchResourcesRequest,
        context: Ctx[h1.NodeWatchResourcesRequest, h1.NodeWatchResourcesResponse],
    ) -> AsyncIterator[h1.NodeWatchResourcesResponse]:
        async for snapshot in self._hub.reports():
            yield h1.NodeWatchResourcesResponse(
                devices=[
                    h1.DeviceHealth(
                        device=h1.DeviceIdentifier(pool_name=self._hub.pool, device_name=d.device),
                        health=_STATUS_V1[d.status],
                        last_updated_time=int(d.updated),
                        health_check_timeout_seconds=self._hub.timeout_seconds,
                        message=d.message,
                    )
                    for d in snapshot
                ]
            )


class HealthServicerV1alpha1(h1a1_grpc.DRAResourceHealthServicer):
    """`v1alpha1.DRAResourceHealth` (kubelets 1.34 and 1.35)."""

    def __init__(self, hub: HealthHub) -> None:
        self._hub = hub

    async def NodeWatchResources(
        self,
        request: h1a1.NodeWatchResourcesRequest,
        context: Ctx[h1a1.NodeWatchResourcesRequest, h1a1.NodeWatchResourcesResponse],
    ) -> AsyncIterator[h1a1.NodeWatchResourcesResponse]:
        async for snapshot in self._hub.reports():
            yield h1a1.NodeWatchResourcesResponse(
                devices=[
                    h1a1.DeviceHealth(
                        device=h1a1.DeviceIdentifier(
                            pool_name=self._hub.pool, device_name=d.device
                        ),
                        health=_STATUS_V1ALPHA1[d.status],
                        last_updated_time=int(d.updated),
                        health_check_timeout_seconds=self._hub.timeout_seconds,
                        message=d.message,
                    )
                    for d in snapshot
                ]
            )
