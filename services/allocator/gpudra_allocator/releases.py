"""DELETED claim events: deletions, cleared allocations and refused ones (mixed into `Worker`).

Promises:
- A DELETED event releases the claim (tombstone, then every device of its UID; holdings an
  attempt wrote after that, whose replica died before it found the tombstone, go with the
  claim's next event) and publishes `Released`; a unit member deleted before its unit was decided
  leaves the unit's members (at the replica holding it, now or at its next retry), so it is never
  decided once its tombstone is gone. A DELETED event that carries the claim is a cleared
  allocation of a claim that lives on: its devices and its record are removed, so it can be
  allocated again later (the record gives way to a `cleared` mark that keeps the event's
  claims-stream position, `Reservations.forget`).
- Fenced as every event is (`worker`): a deallocation older than the claim's record or mark (a
  redelivery, or another replica was faster) changes nothing and is acknowledged (counted
  `stale`): the allocation it clears was cleared already, and a deallocation arriving after the
  next decision keeps that decision. A claim deleted stays released: a deallocation arriving after
  the deletion leaves the tombstone in place.
- An allocation the API server refused to store for good (422: validation, an admission policy)
  comes back from the claim-writer as a deallocation naming it (`refused_allocation`): as
  kube-scheduler un-reserves after a failed status write, its devices are freed (the cleared
  mark remembers the claim's generation and resourceVersion at the refusal; counted `refused`)
  and `Released` says "refused". A refusal of another allocation than the record's (an earlier
  decision's) changes nothing (`stale`). A pending event of the claim is not decided again while
  the claim is unchanged, of the refused generation and resourceVersion (or an older
  generation; counted `refused_unchanged`: `claim_steps`, with `unchanged_since`), so the
  refusal does not repeat in a loop; one of a newer generation, or another resourceVersion (the
  claim edited), is decided as usual.
- The stream keeps one `Released` per claim, reason and resourceVersion (its `Nats-Msg-Id`).
"""

from __future__ import annotations

import logging

from nats.aio.msg import Msg

from gpudra_allocator.errors import BadClaimError
from gpudra_allocator.events import held_devices, stream_pos
from gpudra_allocator.gangs import unit_of
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.steps import Steps
from gpudra_bus import RELEASED, subjects
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)


class ReleaseSteps(Steps):
    """Frees the devices of a deleted claim or of a cleared or refused allocation."""

    released: int
    refused: int  # allocations the API server refused, their devices freed

    async def _deleted(self, msg: Msg, event: claims_pb2.ClaimEvent) -> None:
        ref = event.claim
        if not ref.uid:
            raise BadClaimError("claim event without a claim UID")
        # A deletion carries no claim; a cleared allocation (the claim lives on) carries it.
        deallocated = bool(event.claim_json)
        refused = event.refused_allocation if deallocated else ""
        pos = stream_pos(msg)
        before = await self._res.stored(ref.uid)
        if (
            deallocated
            and before is not None
            and (
                before.released
                or before.pos.after(pos)
                or (refused and not before.cleared and before.claim_id != refused)
            )
        ):
            # Older than what the record says (a redelivery, or another replica was faster):
            # the allocation it clears was cleared already, and a newer one must stay. A claim
            # deleted stays released: a cleared mark in place of its tombstone would let a late
            # pending event of the claim allocate devices to a claim that no longer exists. A
            # refusal of another allocation than the record's is of an earlier decision.
            self.stale += 1
            await self._finish(ref.uid, msg)
            return
        if before is not None and before.gang and not before.cleared:
            await self._gangs.leave(before.gang, ref.uid)
        elif not deallocated:
            await self._left_unit(ref.uid)
        # The record's pools too: a decision another replica just made may not have reached
        # this replica's mirror yet, and a release frees what it finds there.
        pools = pools_of(before)
        if refused:
            log.warning(
                "claim %s/%s: the API server refused allocation %s; its devices are freed, and "
                "the claim waits for a change (resourceVersion %s, generation %d refused)",
                ref.namespace,
                ref.name,
                refused,
                ref.resource_version,
                ref.generation,
            )
            self.refused += 1
        if deallocated:
            await self._res.forget(
                ref.uid,
                f"{ref.namespace}/{ref.name}",
                pos.seq,
                pools,
                epoch=pos.epoch,
                refused=(ref.generation, ref.resource_version) if refused else None,
            )
        else:
            await self._res.release(ref.uid, f"{ref.namespace}/{ref.name}", pools)
        reason = "refused" if refused else "deallocated" if deallocated else "deleted"
        released = claims_pb2.Released(claim=ref, reason=reason)
        released.released_at.GetCurrentTime()
        await self._publisher.publish(
            subjects.allocations(ref.namespace, ref.name),
            released,
            RELEASED,
            msg_id=f"{ref.uid}/released/{reason}/{ref.resource_version}",
        )
        self.released += 1
        await self._finish(ref.uid, msg)

    async def _left_unit(self, uid: str) -> None:
        """A claim deleted while this replica holds it waiting for its unit leaves the unit.

        A deletion carries no unit, and a member left in the unit's members would be counted
        and decided like a live one once its tombstone is collected (`tombstones`: ten minutes
        on), holding devices for a claim that no longer exists. The replica that holds the
        member's PENDING event knows its unit: here, or on its next retry or redelivery
        (`_settled`, which finds the tombstone)."""
        held = self._waiting.get(uid)
        unit = unit_of(held.event) if held is not None else ""
        if unit:
            await self._gangs.leave(unit, uid)


def unchanged_since(event: claims_pb2.ClaimEvent, refused: tuple[int, str]) -> bool:
    """Whether the event's claim is the one whose allocation was refused at (generation,
    resourceVersion) `refused`, or older: by generation when both know theirs and they differ,
    else by resourceVersion (any other: changed since; they are opaque, not ordered)."""
    generation, resource_version = refused
    if event.claim.generation and generation and event.claim.generation != generation:
        return event.claim.generation < generation
    return event.claim.resource_version == resource_version


def pools_of(record: ClaimRecord | None) -> set[tuple[str, str]]:
    """The (driver, pool)s an allocated record's allocation holds devices in (none for other
    records, or an allocation that does not read as one)."""
    if record is None or record.cleared or record.released or not record.allocation:
        return set()
    try:
        return {(driver, pool) for driver, pool, _, _ in held_devices(record.allocation)}
    except BadClaimError:
        return set()
