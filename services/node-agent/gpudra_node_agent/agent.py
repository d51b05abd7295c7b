"""The node-agent loop: discover, watch health, publish.

Promises:
- The full NodeInventory goes to `gpudra.inventory.<node>` (JetStream, last value per node)
  whenever its content changes — with `generation` bumped — and at least every heartbeat interval
  otherwise (same generation). After a restart the generation continues above the last stored one,
  so consumers keeping "only the highest generation" accept the new agent at once: while the
  stored one cannot be read (a timeout, JetStream unavailable), nothing is published; only "none
  stored" starts generations at 1.
- A GPU that is lost (or cannot be described) when the agent starts keeps the description the
  previous agent stored in the same boot (same boot ID and inventory source), marked by its
  health conditions: a restart does not turn a lost GPU into a vanished, untainted one.
- Health transitions go to `gpudra.health.<node>` as HealthEvents and also change the inventory
  (the device's conditions), which the inventory service turns into device taints.
- Utilisation samples go to `gpudra.utilization.<node>`.
- A NATS outage never stops discovery: a publish that cannot complete is abandoned after a
  deadline and the current state is republished once NATS is back (on reconnect and on every
  loop turn until a publish succeeds).
- NVML is called from one worker thread at a time (`asyncio.to_thread`), never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats.errors
from nats.aio.client import Client
from nats.js.errors import NotFoundError
from opentelemetry import trace
from opentelemetry.trace import Tracer

from gpudra_bus import Codec, Publisher, subjects, tracing
from gpudra_bus.errors import BusError
from gpudra_bus.streams import INVENTORY_STREAM
from gpudra_node_agent.settings import Settings
from gpudra_nvml import DeviceLostError, HealthMonitor, NvmlError, Opened, Transition, snapshot
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

NODE_INVENTORY: Codec[pb.NodeInventory] = Codec(pb.NodeInventory)
HEALTH_EVENT: Codec[pb.HealthEvent] = Codec(pb.HealthEvent)
UTILIZATION_SAMPLE: Codec[pb.UtilizationSample] = Codec(pb.UtilizationSample)


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _content(inventory: pb.NodeInventory) -> bytes:
    """The inventory without what changes on every snapshot (time, generation)."""
    copy = pb.NodeInventory()
    copy.CopyFrom(inventory)
    copy.ClearField("observed_at")
    copy.generation = 0
    return copy.SerializeToString(deterministic=True)


@dataclass
class _Tick:
    inventory: pb.NodeInventory
    transitions: list[Transition] = field(default_factory=list)


class NodeAgent:
    """One node's agent over one NVML adapter (real or simulated) and one NATS connection."""

    def __init__(
        self,
        settings: Settings,
        opened: Opened,
        nc: Client,
        *,
        tracer: Tracer | None = None,
        publish_deadline: float | None = None,
    ) -> None:
        self.settings = settings
        self.node = subjects.validate_node_name(settings.node)
        self.opened = opened
        self._nc = nc
        self._publisher = Publisher(nc)
        self._tracer = tracer or trace.get_tracer("gpudra_node_agent")
        self._deadline = publish_deadline or max(1.0, settings.heartbeat_interval)
        self._health = HealthMonitor(opened.adapter.nvml, xid_hold_s=settings.xid_hold)
        self._boot_id = boot_id()
        self.inventory: pb.NodeInventory | None = None
        # What the previous agent stored in this boot: the last description of GPUs that do not
        # answer at start. Indexes and UUIDs hold within a boot, not across a reboot.
        self._stored: pb.NodeInventory | None = None
        self.generation = 0
        self._generation_known = False  # the stored generation has been read (or none exists)
        self._published_content = b""
        self._generation_content = b""  # the content the current generation was assigned to
        self._last_publish = 0.0
        self._last_discovery = 0.0
        self._last_utilization = 0.0
        self._dirty = True
        self.published = 0  # inventories stored, for tests and metrics
        self.last_turn: float | None = None  # loop time the last turn finished

    def live(self) -> bool:
        """The loop turned recently (a stuck NVML call or a dead loop fails the liveness probe)."""
        if self.last_turn is None:
            return True  # still starting; the startup probe bounds this
        limit = max(30.0, 10 * self.settings.poll_interval)
        return asyncio.get_running_loop().time() - self.last_turn < limit

    def ready(self) -> bool:
        """This node's inventory is stored and NATS is connected."""
        return self.published > 0 and self._nc.is_connected

    def mark_dirty(self) -> None:
        """Republish the current state at the next turn (called on NATS reconnect)."""
        self._dirty = True

    async def start(self) -> None:
        """Open the health event set and continue the generation stored in JetStream."""
        handles, _ = await asyncio.to_thread(self.opened.adapter.handles)
        await asyncio.to_thread(self._health.open, handles)
        await self._continue_generation()

    async def close(self) -> None:
        await asyncio.to_thread(self._health.close)

    async def _continue_generation(self) -> bool:
        """Continue above the stored generation; False while it cannot be read."""
        if not self._generation_known:
            stored = await self._stored_generation()
            if stored is not None:
                self.generation = max(self.generation, stored)
                self._generation_known = True
        return self._generation_known

    async def _stored_generation(self) -> int | None:
        """The generation of the stored inventory: 0 when none is stored, None when unknown."""
        try:
            msg = await self._nc.jetstream().get_last_msg(
                INVENTORY_STREAM, subjects.inventory(self.node)
            )
        except NotFoundError:
            log.info("no stored inventory for %s; generations start at 1", self.node)
            return 0
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            # Starting at 1 now could republish a generation already stored with other content.
            log.warning(
                "stored inventory for %s not readable (%s); publishing once it is",
                self.node,
                str(exc) or type(exc).__name__,
            )
            return None
        try:
            stored = NODE_INVENTORY.decode(msg.data or b"", msg.headers)
        except BusError as exc:
            log.warning(
                "stored inventory for %s unreadable (%s); generations start at 1", self.node, exc
            )
            return 0
        if (
            stored.boot_id
            and stored.boot_id == self._boot_id
            and stored.source == self.opened.source
        ):
            self._stored = stored
        return stored.generation

    def _observe(self, now: float) -> _Tick:
        """NVML work for one turn (runs in a worker thread)."""
        adapter = self.opened.adapter
        transitions = self._health.poll(adapter.gpu_count(), timeout_ms=0)
        rediscover = (
            self.inventory is None
            or bool(transitions)
            or now - self._last_discovery >= self.settings.discovery_interval
        )
        if rediscover:
            self._last_discovery = now
            found = adapter.discover()
            for index, why in sorted(found.failed.items()):
                log.warning("GPU %d not described this time, last description kept: %s", index, why)
            previous = self.inventory if self.inventory is not None else self._stored
            inventory = snapshot(found, self.node, self.opened.source, previous, self._boot_id)
        else:
            assert self.inventory is not None
            inventory = pb.NodeInventory()
            inventory.CopyFrom(self.inventory)
            inventory.observed_at.FromNanoseconds(time.time_ns())
        for device in inventory.devices:
            del device.health[:]
            if device.type == pb.Device.TYPE_GPU:
                device.health.extend(self._health.conditions(device.index))
        return _Tick(inventory, transitions)

    async def turn(self) -> None:
        """One loop turn: observe, then publish what changed (or a heartbeat)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        try:
            tick = await asyncio.to_thread(self._observe, now)
        except DeviceLostError as exc:
            log.warning("GPU lost during discovery: %s", exc)
            return
        with self._tracer.start_as_current_span(
            "node-agent turn", attributes={"gpudra.node": self.node}
        ):
            for t in tick.transitions:
                await self._publish_health(t, tick.inventory)
            self.inventory = tick.inventory
            content = _content(tick.inventory)
            changed = content != self._published_content
            heartbeat = now - self._last_publish >= self.settings.heartbeat_interval
            if changed or heartbeat or self._dirty:
                await self._publish_inventory(tick.inventory, content, changed, now)
            if (
                self.settings.utilization_interval
                and now - self._last_utilization >= self.settings.utilization_interval
            ):
                self._last_utilization = now
                await self._publish_utilization()

    async def _publish_inventory(
        self, inventory: pb.NodeInventory, content: bytes, changed: bool, now: float
    ) -> None:
        if not await self._continue_generation():
            self._dirty = True
            return
        if changed and content != self._generation_content:
            # One bump per distinct content: retries during an outage do not inflate it.
            self.generation += 1
            self._generation_content = content
        inventory.generation = self.generation
        try:
            await self._publisher.publish(
                subjects.inventory(self.node), inventory, NODE_INVENTORY, deadline=self._deadline
            )
        except BusError as exc:
            # Keep the bumped generation: the next success publishes the then-current state.
            log.warning("inventory for %s not published (%s); will republish", self.node, exc)
            self._dirty = True
            return
        self._published_content, self._last_publish, self._dirty = content, now, False
        self.published += 1
        log.debug("published inventory %s generation %d", self.node, self.generation)

    async def _core_publish(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        """Fire-and-forget on core NATS (health/utilisation are also reflected in the inventory)."""
        with tracing.publish_span(subject, size=len(data)):
            try:
                await self._nc.publish(subject, data, headers=tracing.inject(headers))
            except (nats.errors.Error, TimeoutError, OSError) as exc:  # never fatal here
                log.warning("publish to %s failed: %s", subject, exc)

    async def _publish_health(self, t: Transition, inventory: pb.NodeInventory) -> None:
        device = next(
            (d for d in inventory.devices if d.type == pb.Device.TYPE_GPU and d.index == t.index),
            None,
        )
        event = pb.HealthEvent(
            node=self.node,
            device_name=device.name if device else f"gpu-{t.index}",
            device_uuid=device.uuid if device else "",
            condition=t.condition,
            cleared=t.cleared,
        )
        event.time.FromNanoseconds(time.time_ns())
        log.warning(
            "%s %s: %s%s",
            self.node,
            event.device_name,
            t.condition.message,
            " cleared" if t.cleared else "",
        )
        data, headers = HEALTH_EVENT.encode(event)
        await self._core_publish(subjects.health(self.node), data, headers)

    async def _publish_utilization(self) -> None:
        try:
            devices = await asyncio.to_thread(self.opened.adapter.utilization)
        except NvmlError as exc:
            log.warning("utilisation sample failed: %s", exc)
            return
        sample = pb.UtilizationSample(node=self.node, devices=devices)
        sample.time.FromNanoseconds(time.time_ns())
        data, headers = UTILIZATION_SAMPLE.encode(sample)
        await self._core_publish(subjects.utilization(self.node), data, headers)

    async def run(self, stop: asyncio.Event) -> None:
        """Turn every poll interval until `stop` is set."""
        while not stop.is_set():
            try:
                await self.turn()
            except NvmlError as exc:
                log.error("NVML failed this turn: %s", exc)
            self.last_turn = asyncio.get_running_loop().time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.poll_interval)
