"""A claim's history from the bus, for `describe`: what the claim-writer published about it
(`gpudra.claims.<ns>.<name>`: pending, deleted, allocated elsewhere) and what the allocator
decided (`gpudra.allocations.<ns>.<name>`: allocated on a node, unschedulable with its reason,
released), in stream order with their times.

Promises: reads only (an ordered ephemeral consumer per subject); a message that does not decode
is listed as such rather than dropped; a stream that is missing or silent yields no events, never
an error; at most `limit` events per subject (the newest).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from gpudra_bus import ALLOCATION_DECISION, CLAIM_EVENT, RELEASED, CodecError, schema_of, subjects
from gpudrapb.v1 import claims_pb2


@dataclass(frozen=True)
class Event:
    time: str
    source: str
    what: str


def _when(msg: Msg) -> str:
    stamp = msg.metadata.timestamp if msg.metadata else None
    if isinstance(stamp, datetime):
        return stamp.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    return ""


def describe_message(msg: Msg) -> tuple[str, str]:
    """(source, one-line description) of a claim or decision message."""
    try:
        name = schema_of(msg.headers).name
        if name.endswith("ClaimEvent"):
            event = CLAIM_EVENT.decode(msg.data, msg.headers)
            kind = claims_pb2.ClaimEvent.Kind.Name(event.kind).removeprefix("KIND_").lower()
            gang = f" (gang {event.gang_id} of {event.gang_size})" if event.gang_id else ""
            return "claim-writer", f"claim {kind.replace('_', ' ')}{gang}"
        if name.endswith("AllocationDecision"):
            decision = ALLOCATION_DECISION.decode(msg.data, msg.headers)
            who = decision.allocator_id or "allocator"
            if decision.outcome == claims_pb2.AllocationDecision.OUTCOME_ALLOCATED:
                return who, f"allocated on {decision.node_name}"
            return who, f"unschedulable: {decision.reason}"
        if name.endswith("Released"):
            released = RELEASED.decode(msg.data, msg.headers)
            return "allocator", f"released{': ' + released.reason if released.reason else ''}"
        return "?", f"message of schema {name}"
    except CodecError as exc:
        return "?", f"undecodable message: {exc}"


async def _read(nc: Nats, subject: str, limit: int) -> list[Event]:
    js = nc.jetstream()
    out: list[Event] = []
    try:
        sub = await js.subscribe(subject, ordered_consumer=True)
    except (nats.errors.Error, TimeoutError):
        return out
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except (nats.errors.TimeoutError, TimeoutError):
                break
            source, what = describe_message(msg)
            out.append(Event(_when(msg), source, what))
            if msg.metadata is not None and msg.metadata.num_pending == 0:
                break
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    return out[-limit:]


async def claim_events(nc: Nats, namespace: str, name: str, limit: int = 20) -> list[Event]:
    events = await _read(nc, subjects.claims(namespace, name), limit)
    events += await _read(nc, subjects.allocations(namespace, name), limit)
    return sorted(events, key=lambda e: e.time)
