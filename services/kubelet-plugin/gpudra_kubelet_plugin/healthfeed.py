"""Feeds the `HealthHub` from the node-agent's health events on NATS (`gpudra.health.<node>`).

Payload: `gpudra.v1.HealthEvent` (proto/gpudrapb/v1/inventory.proto). A set condition (XID, ECC,
lost) makes the device unhealthy, a cleared one healthy again. A message that does not decode, or
carries a `Gpudra-Schema` header naming another type, is logged and skipped: one bad event never
stops the feed.
"""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gpudra_kubelet_plugin.health import HealthEvent, HealthHub
from gpudrapb.v1 import inventory_pb2

log = logging.getLogger(__name__)

SCHEMA_HEADER = "Gpudra-Schema"
_KIND_NAMES = {
    inventory_pb2.HealthCondition.KIND_XID: "XID",
    inventory_pb2.HealthCondition.KIND_ECC: "uncorrected ECC errors",
    inventory_pb2.HealthCondition.KIND_LOST: "GPU lost",
}


def health_subject(node: str) -> str:
    """`gpudra.health.<node>`, the node name's dots written as `_` (one subject token)."""
    return f"gpudra.health.{node.replace('.', '_')}"


def translate(message: inventory_pb2.HealthEvent) -> HealthEvent:
    """The hub's event for one node-agent event."""
    condition = message.condition
    kind = _KIND_NAMES.get(condition.kind, "unknown condition")
    if condition.kind == inventory_pb2.HealthCondition.KIND_XID:
        kind = f"XID {condition.code}"
    text = f"{kind}: {condition.message}" if condition.message else kind
    return HealthEvent(
        status="healthy" if message.cleared else "unhealthy",
        message=("cleared: " + text) if message.cleared else text,
        device_name=message.device_name,
        device_uuid=message.device_uuid,
        time=message.time.seconds if message.HasField("time") else None,
    )


def decode(msg: Msg) -> HealthEvent | None:
    """The event in `msg`, or None (logged) when it is not a HealthEvent."""
    schema = (msg.headers or {}).get(SCHEMA_HEADER, "")
    expected = inventory_pb2.HealthEvent.DESCRIPTOR.full_name
    if schema and schema.split(";", 1)[0].strip() != expected:
        log.warning("skipping %s message with schema %r", msg.subject, schema)
        return None
    try:
        return translate(inventory_pb2.HealthEvent.FromString(msg.data))
    except DecodeError as exc:
        log.warning("skipping undecodable health event on %s: %s", msg.subject, exc)
        return None


async def subscribe(nc: Client, node: str, hub: HealthHub) -> Subscription:
    """Subscribe the hub to the node's health events; unsubscribe (or drain) to stop."""

    async def handle(msg: Msg) -> None:
        event = decode(msg)
        if event is not None:
            changed = await hub.update(event)
            log.info("health event %s changed %s", event, changed)

    return await nc.subscribe(health_subject(node), cb=handle)
