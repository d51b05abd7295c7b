"""PENDING claim events, claim by claim: decide, reserve, record, announce (mixed into `Worker`).

A PENDING event of a unit member (gang, pod: `gangs.unit_of`) goes to the unit steps
(`gang_steps`); every other claim is decided here on its own. Promises:
- Reserve before announce (`worker`): the decision's devices are held in the reservation bucket,
  then its `c.<uid>` record is created, then the record is announced and the event acknowledged.
  The record is created once: an attempt that loses to another drops its holdings and announces
  the winner's. Deciding and reserving is the one critical section of a
  replica (`_decide_lock`); an attempt whose holdings collide decides again, up to
  `RESERVE_TRIES` times, and then is held (the next change retries it).
- The claim's record is read first (`_settled`): a PENDING event for a decided claim re-announces
  the recorded decision; one of a released claim is acknowledged (a unit member leaves its unit,
  and holdings an attempt wrote after the release, whose replica died before it met the
  tombstone, are dropped); one older than the claim's `cleared` mark (a pending event arriving
  after its claim was allocated and cleared) is not decided again (counted `stale`: the
  claim-writer offers the claim anew); one of a claim whose allocation the API server refused,
  while the claim is unchanged, is not decided again (counted `refused_unchanged`, `releases`).
  Holdings of the claim that no record names (an attempt in flight elsewhere, or one whose
  commit failed) are dropped before deciding once they are `ack_wait` old; younger ones make the
  event wait a second (nak) on delivery, and a retry (`retries`) skip its turn.
- A claim whose device class is missing is held (Kubernetes waits for a missing class too;
  applying the class retries the claim).
- A claim whose CEL selector (its own or its class's) fails at run time on a device
  (`CelRuntimeError`: `device.attributes[...].foo` on a device without `foo`, no `has()` guard)
  is held the same way, with the core's "... CEL runtime error: ..." message as its reason: in
  kube-scheduler that is a Filter error and the pod is retried, and it succeeds once the driver
  republishes the slice or the class is fixed. No backoff of its own: the verdict can only
  change with the slices, the classes or the devices in use (the search skips those), and each
  of those changes retries it already; `retry_interval` bounds the wait without a change (as
  kube-scheduler's maximum backoff does), and such a retry re-reads the failure the core
  cached per device. A claim invalid in itself (it does not parse, a selector that does not
  compile, a feature that is off, a constraint that cannot hold) gets "invalid claim: ..." and
  is acknowledged for good: no change of slices can help it. A unit (gang, pod) is held on
  either error, its members told the reason (`gang_steps`); its members' other events still
  reach it (a changed claim, a deletion).
- The topology reserve (`reserve` > 0, off by default) is told before each decision how many pods
  this replica holds for retry (the claim or unit decided left out) need a whole large NVLink
  domain (`GangSteps._large_waiting`). A claim it holds back gets a reason that says so and is
  retried like any waiting claim (`retries`): a freed domain is a reservation change.
- A decision whose record finds the claim cleared since this event (made and cleared meanwhile)
  announces nothing (counted `stale`).
"""

from __future__ import annotations

import logging
import time
import uuid

from nats.aio.msg import Msg

from gpudra_alloc import AllocationInputError, CelRuntimeError, DeviceID
from gpudra_allocator.engine import Decision, cel_reason
from gpudra_allocator.errors import BadClaimError, ReservationConflict
from gpudra_allocator.events import parse_claim, quietly, stream_pos
from gpudra_allocator.gang_steps import EMPTY_CLAIM, RESERVE_TRIES
from gpudra_allocator.gangs import unit_of
from gpudra_allocator.holdings import ClaimRecord, Holding, holdings_for
from gpudra_allocator.releases import unchanged_since
from gpudra_allocator.steps import Steps, Waiting
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)


class ClaimSteps(Steps):
    """Decides PENDING claims one by one; hands unit members to `GangSteps`."""

    refused_unchanged: int  # pending events of a refused claim, unchanged: not decided

    async def _pending(self, msg: Msg, event: claims_pb2.ClaimEvent) -> None:
        uid = event.claim.uid
        if not uid:
            raise BadClaimError("claim event without a claim UID")
        if await self._settled(msg, event):
            return
        if unit_of(event):
            # A unit's holdings are judged by its decision record, never per member (gangs.py).
            old = self._waiting.get(uid)
            if old is not None and old.msg is not msg:
                await quietly(old.msg.ack())  # the newer delivery replaces the held one
            await self._attempt(Waiting(msg, event, EMPTY_CLAIM, reason=old.reason if old else ""))
            return
        try:
            claim = parse_claim(event)
        except BadClaimError as exc:
            # The person who wrote the claim must see why it will never be allocated.
            await self._unschedulable(Waiting(msg, event, EMPTY_CLAIM), f"invalid claim: {exc}")
            await self._finish(uid, msg)
            return
        if not await self._res.drop_stale(uid, stale_after=self._settings.ack_wait):
            # A young attempt for the same claim is in flight elsewhere; look again shortly.
            await quietly(msg.nak(delay=1.0))
            return
        old = self._waiting.get(uid)
        if old is not None and old.msg is not msg:
            await quietly(old.msg.ack())  # the newer delivery replaces the held one
        await self._attempt(Waiting(msg, event, claim, reason=old.reason if old else ""))

    async def _settled(self, msg: Msg, event: claims_pb2.ClaimEvent) -> bool:
        """True (and the event acked) when the claim was already decided or released, or its
        allocation was cleared after this event was published (old news), or refused by the API
        server and the claim has not changed since (counted `refused_unchanged`)."""
        record = await self._res.stored(event.claim.uid)
        if record is None:
            return False
        if record.cleared:
            if record.pos.after(stream_pos(msg)):
                self.stale += 1
            elif record.refused is not None and unchanged_since(event, record.refused):
                # Decided again, it would be refused again: wait for the claim to change.
                self.refused_unchanged += 1
            else:
                return False
        elif not record.released:
            await self._announce(event, record)
        else:
            if unit_of(event):
                # Deleted before its unit was decided (the deletion names no unit): out of the
                # unit's members now, while the tombstone still says so (`_left_unit`).
                await self._gangs.leave(unit_of(event), event.claim.uid)
            if self._res.holdings_of(event.claim.uid):
                # Reserved after the release freed the claim's devices, by an attempt whose
                # replica died before it met the tombstone: nothing else would ever free them.
                await self._res.drop(event.claim.uid)
        await self._finish(event.claim.uid, msg)
        return True

    async def _attempt(self, waiting: Waiting) -> None:
        if unit_of(waiting.event):
            await self._attempt_gang(waiting)
            return
        event, claim = waiting.event, waiting.claim
        uid = claim.uid or event.claim.uid
        waiting.seen_version = self._versions()
        waiting.last_try = time.monotonic()
        self._refresh_classes()
        missing = self._engine.missing_classes([claim])
        if missing:
            # Kubernetes waits for a missing class too; applying the class retries the claim.
            await self._unschedulable(waiting, f"device class {', '.join(missing)} not found")
            self._hold(waiting)
            return
        for _ in range(RESERVE_TRIES):
            # Deciding and reserving is the one critical section of a replica: concurrent claims
            # of this replica would otherwise all pick the same first free device and collide.
            decision: Decision | None = None
            invalid: AllocationInputError | None = None
            held: list[DeviceID] | None = None
            async with self._decide_lock:
                self._engine.waiting_large = self._large_waiting(waiting)
                try:
                    decision = self._engine.decide(
                        [claim], self._index.slices.values(), self._index.version, self._res.state
                    )
                except AllocationInputError as exc:
                    invalid = exc
                token = f"{self.replica}-{uuid.uuid4().hex[:12]}"
                if decision is not None and decision.allocated:
                    by_pool = holdings_for(decision.results, uid, claim.key, token, time.time())
                    # Exclusive devices are marked in use here and written after the lock, so the
                    # lock covers deciding only; shares add up, so they are written under it.
                    held = self._res.hold(by_pool)
                    if held is None and not await self._reserved(claim.key, by_pool):
                        continue
            if held is not None:
                try:
                    reserved = await self._reserved(claim.key, by_pool)
                finally:
                    self._res.unhold(held)
                if not reserved:
                    continue
            if isinstance(invalid, CelRuntimeError):
                # kube-scheduler's Filter error: the pod is retried, and allocated once the
                # driver republishes the slice or the class is fixed. Held, not refused.
                await self._unschedulable(waiting, cel_reason(invalid))
                self._hold(waiting)
                return
            if invalid is not None or decision is None:
                await self._unschedulable(waiting, f"invalid claim: {invalid}")
                await self._finish(uid, waiting.msg)
                return
            if not decision.allocated:
                await self._unschedulable(waiting, decision.reason)
                self._hold(waiting)
                return
            await self._commit(waiting, decision, token)
            return
        self._hold(waiting)  # kept losing races; the next change retries it

    async def _reserved(self, key: str, by_pool: dict[tuple[str, str], list[Holding]]) -> bool:
        """Write a decision's holdings; False when they collided (decide again)."""
        try:
            await self._res.reserve(by_pool)
        except ReservationConflict as exc:
            log.debug("claim %s: %s; deciding again", key, exc)
            return False
        return True

    async def _commit(self, waiting: Waiting, decision: Decision, token: str) -> None:
        event, uid = waiting.event, waiting.event.claim.uid
        pos = stream_pos(waiting.msg)
        record = ClaimRecord(
            "allocated",
            claim=waiting.claim.key,
            generation=event.claim.generation,
            token=token,
            node=decision.node,
            allocation=decision.results[0].to_json(),
            allocator=self.replica,
            seq=pos.seq,
            epoch=pos.epoch,
        )
        winner = await self._res.commit(uid, record)
        if winner.token != token:
            await self._res.drop(uid, token)
        if winner.cleared:
            self.stale += 1  # its allocation was made and cleared since this event: old news
        elif not winner.released:
            await self._announce(event, winner)
        await self._finish(uid, waiting.msg)
