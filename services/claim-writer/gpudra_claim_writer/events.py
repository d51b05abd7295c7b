"""Publishing ClaimEvents: one place that builds them, names their subjects and de-duplicates.

Message ids (JetStream drops a repeat within its duplicate window): `<uid>/<generation>/pending`
for intake, `<uid>/deleted` for a deletion, `<uid>/deallocated/<resourceVersion>` for a cleared
allocation, `<uid>/external` for an adoption; a repeat outside the window is harmless because the
allocator's decisions are idempotent per claim UID.

A deletion carries no claim JSON and a deallocation carries the claim: that is how the allocator
tells "gone for good" (tombstone) from "allocation cleared, may be allocated again".

A claim of a gang (annotations `gpudra.io/gang`, `gpudra.io/gang-size`) carries `gang_id` (the
gang's name, prefixed with the namespace: gangs never span namespaces) and `gang_size`. Annotations
that do not make sense (a size that is no whole number in range, a size without a name) give
`gang_id` with `gang_size` 0, which the allocator answers as an invalid claim.
"""

from __future__ import annotations

import json
from typing import Any

from gpudra_bus import CLAIM_EVENT, Publisher, subjects
from gpudra_claim_writer.claims import GANG_ANNOTATION, gang_of, ref_of
from gpudrapb.v1 import claims_pb2

Kind = claims_pb2.ClaimEvent.Kind


async def publish_event(
    publisher: Publisher,
    kind: Kind.ValueType,
    claim: dict[str, Any] | None,
    *,
    ref: claims_pb2.ClaimRef | None = None,
    msg_id: str,
) -> None:
    ref = ref if ref is not None else ref_of(claim or {})
    event = claims_pb2.ClaimEvent(kind=kind, claim=ref)
    if claim is not None:
        event.claim_json = json.dumps(claim, separators=(",", ":"), sort_keys=True).encode()
        event.gang_id, event.gang_size = gang_fields(claim, ref.namespace)
    event.observed_at.GetCurrentTime()
    await publisher.publish(
        subjects.claims(ref.namespace, ref.name), event, CLAIM_EVENT, msg_id=msg_id
    )


def gang_fields(claim: dict[str, Any], namespace: str) -> tuple[str, int]:
    """(`gang_id`, `gang_size`) of a ClaimEvent for this claim; ("", 0) outside any gang."""
    try:
        name, size = gang_of(claim)
    except ValueError:
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        name, size = str(annotations.get(GANG_ANNOTATION) or "?"), 0
    return (f"{namespace}/{name}", size) if name else ("", 0)
