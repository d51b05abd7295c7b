"""ALLOCATED_EXTERNALLY claim events: allocations gpudra did not make (mixed into `Worker`).

Promises:
- An ALLOCATED_EXTERNALLY event adopts an allocation gpudra did not make (kube-scheduler's, for a
  pod without gpudra's scheduling gate): its devices are held in the reservations and the claim
  gets a record (allocator "external", the allocation id the claim carries). A claim already
  decided keeps its record, unless the event names the record's allocation as the one it may
  replace (`replaces_allocation`, the allocation id the claim carries, `ClaimRecord.claim_id`)
  and holds other devices: gpudra's decision beaten to the claim by kube-scheduler, or an
  allocation cleared and made again while no claim-writer watched. Then the record's devices are
  freed and the claim's are held (counted `replaced`). A released claim adopts nothing (its
  tombstone stays).
- Fenced as every event is (`worker`): an adoption older than the claim's `cleared` mark (the
  deallocation that followed it) changes nothing and is acknowledged (counted `stale`), so it
  holds nothing; one newer than the mark is a new allocation.
- An allocation made outside gpudra on devices some other claim holds is logged as an error and
  acknowledged, holding nothing; pools that keep changing under the reservation defer the event
  (`BusRetryableError`: redelivered).
"""

from __future__ import annotations

import logging
import uuid

from nats.aio.msg import Msg

from gpudra_allocator.errors import BadClaimError, ReservationConflict
from gpudra_allocator.events import claim_doc, held_devices, holdings_from_json, stream_pos
from gpudra_allocator.gang_steps import RESERVE_TRIES
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.releases import pools_of
from gpudra_allocator.steps import Steps
from gpudra_api import ALLOCATION_ID_ANNOTATION
from gpudra_bus import BusRetryableError
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)


class AdoptSteps(Steps):
    """Takes allocations made outside gpudra into the reservations."""

    replaced: int

    async def _adopt(self, msg: Msg, event: claims_pb2.ClaimEvent) -> None:
        """Take an allocation gpudra did not make into the reservations (kube-scheduler's).

        A claim already decided is left as it is, unless the event says that this allocation may
        have taken the place of the one the record holds (`replaces_allocation` is the record's
        allocation id) and its devices differ. Then the record's devices are freed and these
        held: keeping it would hold devices nobody uses and leave the ones in use free for the
        next claim.
        """
        ref = event.claim
        pos = stream_pos(msg)
        record = await self._res.stored(ref.uid)
        if record is not None and record.cleared:
            if record.pos.after(pos):
                self.stale += 1  # cleared after this allocation was made: old news
                await self._finish(ref.uid, msg)
                return
            record = None  # cleared before: this is a new allocation
        if record is not None and (record.released or record.claim_id != event.replaces_allocation):
            # Ours, adopted before, or news of a decision this one has since replaced.
            await self._finish(ref.uid, msg)
            return
        doc = claim_doc(event)
        meta = doc.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if not isinstance(annotations, dict):
            annotations = {}
        allocation = (doc.get("status") or {}).get("allocation")
        if not isinstance(allocation, dict):
            raise BadClaimError(f"claim {ref.namespace}/{ref.name} is not allocated")
        if record is not None:
            if held_devices(allocation) == held_devices(record.allocation or {}):
                await self._finish(ref.uid, msg)  # the decision's own devices after all
                return
            log.warning(
                "claim %s/%s carries another allocation than %s (made outside gpudra in its "
                "place); freeing that one's devices and adopting this one",
                ref.namespace,
                ref.name,
                record.claim_id,
            )
            if record.gang:
                await self._gangs.leave(record.gang, ref.uid)
            await self._res.forget(
                ref.uid,
                f"{ref.namespace}/{ref.name}",
                pos.seq,
                pools_of(record),
                epoch=pos.epoch,
            )
            self.replaced += 1
        token = f"adopted-{self.replica}-{uuid.uuid4().hex[:12]}"
        by_pool = holdings_from_json(allocation, ref.uid, f"{ref.namespace}/{ref.name}", token)
        for _ in range(RESERVE_TRIES):
            try:
                await self._res.reserve(by_pool)
                break
            except ReservationConflict as exc:
                held = [
                    c for (d, p), hs in by_pool.items() for c in self._res.pool(d, p).conflicts(hs)
                ]
                if held:
                    log.error(
                        "claim %s/%s was allocated outside gpudra on devices already held: %s",
                        ref.namespace,
                        ref.name,
                        ", ".join(held),
                    )
                    await self._finish(ref.uid, msg)
                    return
                log.debug("adopting %s/%s: %s; trying again", ref.namespace, ref.name, exc)
        else:
            raise BusRetryableError(f"adopting {ref.namespace}/{ref.name}: pools keep changing")
        record = ClaimRecord(
            "allocated",
            claim=f"{ref.namespace}/{ref.name}",
            generation=ref.generation,
            token=token,
            allocation=allocation,
            allocator="external",
            allocation_id=str(annotations.get(ALLOCATION_ID_ANNOTATION) or ""),
            seq=pos.seq,
            epoch=pos.epoch,
        )
        winner = await self._res.commit(ref.uid, record)
        if winner.token != token:
            await self._res.drop(ref.uid, token)
        if winner.cleared:
            self.stale += 1  # cleared meanwhile by a later event: nothing is held
        await self._finish(ref.uid, msg)
