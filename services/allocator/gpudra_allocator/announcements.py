"""The allocator's decisions, published for the claim-writer (mixed into `Worker`).

Promises:
- An ALLOCATED decision carries the claim's record (`ClaimRecord`: its allocation, node, the
  replica that decided it and its allocation id), and is published only for a record that exists
  (reserve before announce: `worker`). Decisions are idempotent per claim UID: a PENDING event for
  a decided claim re-announces the recorded decision (same `Nats-Msg-Id`,
  `<uid>/<token>/allocated`, so the stream drops it within its window).
- An unschedulable claim gets an UNSCHEDULABLE decision with the core's explanation, again only
  when the reason changes: a claim held for retry remembers what it was told (`Waiting.reason`),
  and the message id names a digest of the reason, so the stream drops the same reason published
  again within its window.
- `decided`, `unschedulable` and `last_decision_at` (epoch seconds) count what was published, for
  `/statusz`.
"""

from __future__ import annotations

import hashlib
import json
import time

from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.steps import Steps, Waiting
from gpudra_bus import ALLOCATION_DECISION, subjects
from gpudrapb.v1 import claims_pb2


class Announcer(Steps):
    """Publishes the loop's decisions, on the claim's `allocations` subject."""

    decided: int
    unschedulable: int
    last_decision_at: float | None  # epoch seconds; read by `/statusz`

    async def _announce(self, event: claims_pb2.ClaimEvent, record: ClaimRecord) -> None:
        decision = claims_pb2.AllocationDecision(
            claim=event.claim,
            outcome=claims_pb2.AllocationDecision.OUTCOME_ALLOCATED,
            allocation_json=json.dumps(record.allocation, separators=(",", ":")).encode(),
            node_name=record.node,
            gang_id=event.gang_id,
            allocator_id=record.allocator,
            allocation_id=record.claim_id,
        )
        ref = event.claim
        await self._publish_decision(decision, msg_id=f"{ref.uid}/{record.token}/allocated")
        self.decided += 1

    async def _unschedulable(self, waiting: Waiting, reason: str) -> None:
        if reason == waiting.reason:
            return
        waiting.reason = reason
        ref = waiting.event.claim
        decision = claims_pb2.AllocationDecision(
            claim=ref,
            outcome=claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE,
            reason=reason,
            gang_id=waiting.event.gang_id,
            allocator_id=self.replica,
        )
        digest = hashlib.sha256(reason.encode()).hexdigest()[:16]
        await self._publish_decision(decision, msg_id=f"{ref.uid}/unschedulable/{digest}")
        self.unschedulable += 1

    async def _publish_decision(self, decision: claims_pb2.AllocationDecision, msg_id: str) -> None:
        """Stamp `decision` with the time and publish it on its claim's `allocations` subject."""
        decision.decided_at.GetCurrentTime()
        ref = decision.claim
        await self._publisher.publish(
            subjects.allocations(ref.namespace, ref.name),
            decision,
            ALLOCATION_DECISION,
            msg_id=msg_id,
        )
        self.last_decision_at = time.time()
