"""Feeds the `HealthHub` from the node-agent's health events on NATS (`gpudra.health.<node>`).

Payload: `gpudra.v1.HealthEvent` (proto/gpudrapb/v1/inventory.proto) under gpudra_bus' schema
header. A set condition (XID, ECC, lost) makes the device unhealthy until it clears.
A message that does not decode or declares another schema is logged and skipped: one bad event
never stops the feed.
"""

from __future__ import annotations

import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gpudra_bus import Codec, CodecError, subjects
from gpudra_kubelet_plugin.health import HealthEvent, HealthHub
from gpudrapb.v1 import inventory_pb2

log = logging.getLogger(__name__)

HEALTH_EVENT: Codec[inventory_pb2.HealthEvent] = Codec(inventory_pb2.HealthEvent)
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


async def subscribe(nc: Client, node: str, hub: HealthHub) -> Subscription:
    """Subscribe the hub to the node's health events; unsubscribe (or drain) to stop."""

    async def handle(msg: Msg) -> None:
        event = decode(msg)
        if event is not None:
            changed = await hub.update(event)
            log.info("health event %s changed %s", event, changed)

    return await nc.subscribe(subjects.health(node), cb=handle)
