"""Feeds the `HealthHub` from the node-agent: its health events (`gpudra.health.<node>`) as they
come, checked against its inventories (the node's last `NodeInventory` in JetStream).

Payloads: `gpudra.v1.HealthEvent` and `gpudra.v1.NodeInventory` (proto/gpudrapb/v1/inventory.proto)
under gpudra_bus' schema header. A set condition (XID, ECC, lost) makes the device unhealthy until
it clears. A message that does not decode or declares another schema is logged and skipped: one
bad message never stops the feed.

Events are core NATS, not stored: one sent while the plugin's connection was away, or before it
subscribed, is lost, and nothing would ever send it again. Each inventory carries every device's
active conditions, and the node-agent stores a new one whenever they change (after that turn's
events). `InventoryCheck` therefore reads the last stored inventory at start (`seed`) and then
every few seconds, and each time its generation is new the hub takes it as the complete state of
the devices it describes (`HealthHub.reconcile`): a missed event is corrected within one period.
Without an inventory (none yet, no permission) the devices start "healthy", and it says why.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from gpudra_bus import INVENTORY_STREAM, Codec, CodecError, subjects
from gpudra_kubelet_plugin.health import HealthEvent, HealthHub
from gpudrapb.v1 import inventory_pb2

log = logging.getLogger(__name__)

HEALTH_EVENT: Codec[inventory_pb2.HealthEvent] = Codec(inventory_pb2.HealthEvent)
NODE_INVENTORY: Codec[inventory_pb2.NodeInventory] = Codec(inventory_pb2.NodeInventory)
_KIND_NAMES = {
    inventory_pb2.HealthCondition.KIND_ECC: "uncorrected ECC errors",
    inventory_pb2.HealthCondition.KIND_LOST: "GPU lost",
    inventory_pb2.HealthCondition.KIND_ROW_REMAP_PENDING: "row remap pending a GPU reset",
    inventory_pb2.HealthCondition.KIND_ROW_REMAP_FAILED: "row remapping failed",
}


def translate(message: inventory_pb2.HealthEvent) -> HealthEvent:
    """The hub's event for one node-agent event."""
    condition = message.condition
    try:
        kind = inventory_pb2.HealthCondition.Kind.Name(condition.kind).removeprefix("KIND_")
    except ValueError:  # a kind newer than this build: still a condition, by number
        kind = f"KIND_{int(condition.kind)}"
    if condition.kind == inventory_pb2.HealthCondition.KIND_XID:
        text = f"XID {condition.code}"
    else:
        text = _KIND_NAMES.get(condition.kind, "unknown condition")
    return HealthEvent(
        condition=kind,
        active=not message.cleared,
        message=f"{text}: {condition.message}" if condition.message else text,
        device_name=message.device_name,
        device_uuid=message.device_uuid,
        time=float(message.time.seconds) if message.HasField("time") else None,
    )


def decode(msg: Msg) -> HealthEvent | None:
    """The event in `msg`, or None (logged) when it is not a HealthEvent we accept."""
    try:
        return translate(HEALTH_EVENT.decode(msg.data, msg.headers))
    except CodecError as exc:
        log.warning("skipping health message on %s: %s", msg.subject, exc)
        return None


def conditions_of(inventory: inventory_pb2.NodeInventory) -> tuple[set[str], list[HealthEvent]]:
    """The devices an inventory describes (UUIDs and names) and their active conditions."""
    described: set[str] = set()
    active = []
    for device in inventory.devices:
        described.update(n for n in (device.uuid, device.name) if n)
        for condition in device.health:
            event = inventory_pb2.HealthEvent(
                node=inventory.node,
                device_name=device.name,
                device_uuid=device.uuid,
                condition=condition,
                time=condition.since,
            )
            active.append(translate(event))
    return described, active


class InventoryCheck:
    """Reconciles a hub with the node's last stored inventory, once per generation."""

    def __init__(self, js: JetStreamContext, node: str, hub: HealthHub) -> None:
        self._js = js
        self._node = node
        self._hub = hub
        self.generation: int | None = None  # of the inventory last reconciled with
        self._failing = False

    async def once(self) -> int | None:
        """Reconcile with the last inventory if its generation is new; returns how many active
        conditions it carried (None: no new inventory, or none readable)."""
        try:
            msg = await self._js.get_last_msg(INVENTORY_STREAM, subjects.inventory(self._node))
            inventory = NODE_INVENTORY.decode(msg.data or b"", msg.headers)
        except NotFoundError:
            self._unreadable(logging.INFO, "none stored yet")
            return None
        except (NatsError, TimeoutError, CodecError) as exc:
            self._unreadable(logging.WARNING, str(exc) or type(exc).__name__)
            return None
        self._failing = False
        if inventory.generation == self.generation:
            return None  # events since are newer than it; a heartbeat says nothing new
        self.generation = inventory.generation
        described, active = conditions_of(inventory)
        changed = await self._hub.reconcile(described, active)
        if changed:
            log.info("inventory of %s changed the health of %s", self._node, changed)
        return len(active)

    def _unreadable(self, level: int, why: str) -> None:
        if not self._failing:  # once per outage, not every period
            state = "devices start healthy" if self.generation is None else "health as it was"
            log.log(level, "no inventory of node %s to check (%s): %s", self._node, why, state)
        self._failing = True

    async def run(self, interval: float) -> None:
        """`once` every `interval` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.once()


async def seed(js: JetStreamContext, node: str, hub: HealthHub) -> int:
    """Reconcile the hub with the node's last stored inventory; returns how many active
    conditions it carried."""
    return await InventoryCheck(js, node, hub).once() or 0


async def subscribe(nc: Client, node: str, hub: HealthHub) -> Subscription:
    """Subscribe the hub to the node's health events; unsubscribe (or drain) to stop."""

    async def handle(msg: Msg) -> None:
        event = decode(msg)
        if event is not None:
            changed = await hub.update(event)
            log.info("health event %s changed %s", event, changed)

    return await nc.subscribe(subjects.health(node), cb=handle)
