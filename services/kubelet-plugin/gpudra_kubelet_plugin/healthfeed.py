"""Feeds the `HealthHub` from the node-agent's health events on NATS (`gpudra.health.<node>`).

Payload: `gpudra.v1.HealthEvent` (proto/gpudrapb/v1/inventory.proto) under gpudra_bus' schema
header. A set condition (XID, ECC, lost) makes the device unhealthy until it clears.
A message that does not decode or declares another schema is logged and skipped: one bad event
never stops the feed.

Events are not stored, so a plugin that starts while a GPU is already unhealthy would miss the
event; `seed` therefore first applies the active conditions of the node's last `NodeInventory`
(the inventory stream keeps the latest per node). Without it (no inventory yet, no permission), the
plugin starts from "healthy" and logs why.
"""

from __future__ import annotations

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


async def seed(js: JetStreamContext, node: str, hub: HealthHub) -> int:
    """Apply the active conditions of the node's last inventory; returns how many were applied."""
    subject = subjects.inventory(node)
    try:
        msg = await js.get_last_msg(INVENTORY_STREAM, subject)
        inventory = NODE_INVENTORY.decode(msg.data or b"", msg.headers)
    except NotFoundError:
        log.info("no inventory of node %s yet: devices start healthy", node)
        return 0
    except (NatsError, TimeoutError, CodecError) as exc:
        log.warning("cannot read the last inventory of %s (%s): devices start healthy", node, exc)
        return 0
    applied = 0
    for device in inventory.devices:
        for condition in device.health:
            event = inventory_pb2.HealthEvent(
                node=node,
                device_name=device.name,
                device_uuid=device.uuid,
                condition=condition,
                time=condition.since,
            )
            await hub.update(translate(event))
            applied += 1
    return applied


async def subscribe(nc: Client, node: str, hub: HealthHub) -> Subscription:
    """Subscribe the hub to the node's health events; unsubscribe (or drain) to stop."""

    async def handle(msg: Msg) -> None:
        event = decode(msg)
        if event is not None:
            changed = await hub.update(event)
            log.info("health event %s changed %s", event, changed)

    return await nc.subscribe(subjects.health(node), cb=handle)
