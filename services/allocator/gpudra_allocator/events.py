"""Reading claim events: the claim inside, an adopted allocation's holdings, and pulling messages.

Promises: `parse_claim` returns a valid ResourceClaim whose UID matches the event, or raises
`BadClaimError` naming what is wrong (never another exception); `holdings_from_json` turns a
resource.k8s.io/v1 `status.allocation` into holdings (admin-access devices hold nothing), or raises
`BadClaimError` (`held_devices`: just which devices, to compare two allocations); `stream_seq` is a
delivered event's claims-stream sequence (0 when unknown), `stream_pos` the same with the stream's
incarnation (`incarnations`); `quietly` awaits an ack/nak and only logs when the server is away (a lost ack means
a redelivery, which the decision record makes harmless).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import nats.errors

from gpudra_allocator.errors import BadClaimError
from gpudra_allocator.holdings import Holding
from gpudra_allocator.incarnations import StreamPos, epoch_of
from gpudra_api import ApiError, ResourceClaim, parse_resource_claim
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)


def claim_doc(event: claims_pb2.ClaimEvent) -> dict[str, Any]:
    try:
        doc = json.loads(event.claim_json)
    except ValueError as exc:
        raise BadClaimError(f"claim JSON does not parse: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadClaimError("claim JSON is not an object")
    return doc


def parse_claim(event: claims_pb2.ClaimEvent) -> ResourceClaim:
    try:
        claim = parse_resource_claim(claim_doc(event))
    except ApiError as exc:
        raise BadClaimError(f"invalid ResourceClaim: {exc}") from exc
    if claim.uid and claim.uid != event.claim.uid:
        raise BadClaimError(f"claim UID {claim.uid} differs from the event's {event.claim.uid}")
    return claim


def holdings_from_json(
    allocation: dict[str, Any], uid: str, claim: str, token: str
) -> dict[tuple[str, str], list[Holding]]:
    out: dict[tuple[str, str], list[Holding]] = {}
    now = time.time()
    try:
        for r in allocation["devices"]["results"]:
            if r.get("adminAccess") and "shareID" not in r:
                continue
            capacity = {str(k): str(v) for k, v in (r.get("consumedCapacity") or {}).items()}
            out.setdefault((str(r["driver"]), str(r["pool"])), []).append(
                Holding(str(r["device"]), uid, claim, token, now, r.get("shareID"), capacity)
            )
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadClaimError(f"malformed status.allocation: {exc}") from exc
    return out


def held_devices(allocation: dict[str, Any]) -> frozenset[tuple[str, str, str, str | None]]:
    """What an allocation holds, comparable across writers: (driver, pool, device, share)."""
    return frozenset(
        (driver, pool, h.device, h.share_id)
        for (driver, pool), holdings in holdings_from_json(allocation, "", "", "").items()
        for h in holdings
    )


def stream_seq(msg: Any) -> int:
    """The claims-stream sequence of a delivered event (0 when it has none: not from JetStream)."""
    try:
        seq = msg.metadata.sequence.stream
    except (AttributeError, TypeError, ValueError):  # core NATS message, or a test's stand-in
        return 0
    return seq if isinstance(seq, int) else 0


def stream_pos(msg: Any) -> StreamPos:
    """The claims-stream position of a delivered event: its incarnation (as the worker tagged it,
    `Incarnations.tag`; 0 when unknown) and its sequence."""
    return StreamPos(epoch_of(msg), stream_seq(msg))


async def quietly(ack: Any) -> None:
    """Acks are best effort: a lost ack means a redelivery, which the record makes harmless."""
    try:
        await ack
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        log.debug("ack failed: %s", exc)
