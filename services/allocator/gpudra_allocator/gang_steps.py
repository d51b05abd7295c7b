"""The gang half of the allocator's loop (mixed into `Worker`), and the held-claim record.

Promises (the module docstring of `worker` states them for the whole loop): a gang member is held
until all `gang_size` members arrived at any replica (membership in the reservations bucket,
`gangs.GangBook`); the replica that completes the set decides every member at once with the
placement layer's gang step, reserves all their devices or none (one revision-checked write per
pool), creates the gang's record `g.<gang>` once and each member's `c.<uid>` record from it, then
announces every member. A gang that does not fit reserves nothing and every member is told why.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from gpudra_alloc import AllocationInputError
from gpudra_allocator.engine import Engine
from gpudra_allocator.errors import BadClaimError, ReservationConflict
from gpudra_allocator.events import claim_doc, parse_claim
from gpudra_allocator.gangs import MATCH_ATTRIBUTE_ANNOTATION, GangBook, GangRecord, Members
from gpudra_allocator.holdings import ClaimRecord, Holding, holdings_for
from gpudra_allocator.index import KvIndex
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_api import ResourceClaim, ResourceSlice
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)

RESERVE_TRIES = 8
EMPTY_CLAIM = ResourceClaim(name="", namespace="", uid="", requests=())


@dataclass
class Waiting:
    """An unschedulable claim held (unacknowledged) for retry."""

    msg: Msg
    event: claims_pb2.ClaimEvent
    claim: ResourceClaim
    reason: str = ""
    seen_version: tuple[int, int, int] = (-1, -1, -1)
    last_try: float = 0.0
    last_touch: float = field(default_factory=time.monotonic)


class GangSteps:
    """Gang handling for `Worker`, which provides the attributes and the steps declared here."""

    replica: str
    _settings: Settings
    _engine: Engine
    _index: KvIndex[ResourceSlice]
    _res: Reservations
    _gangs: GangBook
    _gang_reasons: dict[str, str]
    _decide_lock: asyncio.Lock

    def _versions(self) -> tuple[int, int, int]:
        raise NotImplementedError

    def _refresh_classes(self) -> None:
        raise NotImplementedError

    def _hold(self, waiting: Waiting) -> None:
        raise NotImplementedError

    async def _unschedulable(self, waiting: Waiting, reason: str) -> None:
        raise NotImplementedError

    async def _finish(self, uid: str, msg: Msg) -> None:
        raise NotImplementedError

    async def _announce(self, event: claims_pb2.ClaimEvent, record: ClaimRecord) -> None:
        raise NotImplementedError

    async def _attempt_gang(self, waiting: Waiting) -> None:
        event, uid = waiting.event, waiting.event.claim.uid
        waiting.seen_version = self._versions()
        waiting.last_try = time.monotonic()
        gang = event.gang_id
        if event.gang_size == 0:
            await self._unschedulable(
                waiting,
                "invalid claim: gpudra.io/gang needs gpudra.io/gang-size, a whole number >= 1",
            )
            await self._finish(uid, waiting.msg)
            return
        members = await self._gangs.join(event)
        record = await self._gangs.decision(gang)
        if record is None and len(members.events) >= members.size:
            record = await self._decide_gang(waiting, members)
        if record is None:
            if len(members.events) < members.size:
                await self._unschedulable(
                    waiting,
                    f"gang {gang}: {len(members.events)} of {members.size} claims present; "
                    "waiting for the rest before allocating any",
                )
            self._hold(waiting)
            return
        if uid not in record.placed:
            await self._unschedulable(
                waiting, f"gang {gang} was allocated without this claim (it has {members.size})"
            )
            self._hold(waiting)
            return
        await self._settle_gang(record, members)
        await self._finish(uid, waiting.msg)

    async def _live_members(self, members: Members) -> list[claims_pb2.ClaimEvent] | None:
        """The gang's first `size` members still alive (deleted ones leave); None if too few."""
        alive = []
        for event in members.ordered():
            record = await self._res.record(event.claim.uid)
            if record is not None and record.released:
                await self._gangs.leave(members.gang, event.claim.uid)
                continue
            alive.append(event)
        return alive[: members.size] if len(alive) >= members.size else None

    async def _decide_gang(self, waiting: Waiting, members: Members) -> GangRecord | None:
        gang = members.gang
        events = await self._live_members(members)
        if events is None:
            return None
        for event in events:
            if not await self._res.drop_stale(event.claim.uid, stale_after=self._settings.ack_wait):
                return None  # another replica's attempt is in flight; its record will settle us
        try:
            claims = [parse_claim(e) for e in events]
        except BadClaimError as exc:
            await self._gang_unschedulable(waiting, events, f"gang {gang}: invalid claim: {exc}")
            return None
        annotations = (claim_doc(events[0]).get("metadata") or {}).get("annotations") or {}
        match = annotations.get(MATCH_ATTRIBUTE_ANNOTATION) or None
        self._refresh_classes()
        missing = self._engine.missing_classes(claims)
        if missing:
            reason = f"gang {gang}: device class {', '.join(missing)} not found"
            await self._gang_unschedulable(waiting, events, reason)
            return None
        for _ in range(RESERVE_TRIES):
            token = f"{self.replica}-{uuid.uuid4().hex[:12]}"
            async with self._decide_lock:
                try:
                    decision = self._engine.decide_gang(
                        gang,
                        claims,
                        str(match) if match else None,
                        self._index.slices.values(),
                        self._index.version,
                        self._res.state,
                    )
                except AllocationInputError as exc:
                    await self._gang_unschedulable(waiting, events, f"gang {gang}: {exc}")
                    return None
                if not decision.allocated:
                    await self._gang_unschedulable(waiting, events, decision.reason)
                    return None
                by_pool: dict[tuple[str, str], list[Holding]] = {}
                now = time.time()
                for claim, (_, result) in zip(claims, decision.placed, strict=True):
                    for pool, holdings in holdings_for(
                        [result], claim.uid, claim.key, token, now
                    ).items():
                        by_pool.setdefault(pool, []).extend(holdings)
                try:
                    await self._res.reserve(by_pool)
                except ReservationConflict as exc:
                    log.debug("gang %s: %s; deciding again", gang, exc)
                    continue
            record = GangRecord(
                gang,
                token,
                decision.group,
                {
                    e.claim.uid: (node, result.to_json())
                    for e, (node, result) in zip(events, decision.placed, strict=True)
                },
            )
            winner = await self._gangs.decide(record)
            if winner.token != token:
                for event in events:
                    await self._res.drop(event.claim.uid, token)
            return winner
        return None

    async def _settle_gang(self, record: GangRecord, members: Members) -> None:
        """Every member's `c.<uid>` record from the gang's decision, then its announcement."""
        for uid, (node, allocation) in sorted(record.placed.items()):
            event = members.events.get(uid)
            if event is None:
                continue
            winner = await self._res.commit(
                uid,
                ClaimRecord(
                    "allocated",
                    claim=f"{event.claim.namespace}/{event.claim.name}",
                    generation=event.claim.generation,
                    token=record.token,
                    node=node,
                    allocation=allocation,
                    allocator=self.replica,
                    gang=record.gang,
                ),
            )
            if winner.released:
                await self._res.drop(uid, record.token)  # deleted meanwhile: free its part
            else:
                await self._announce(event, winner)
        self._gang_reasons.pop(record.gang, None)

    async def _gang_unschedulable(
        self, waiting: Waiting, events: list[claims_pb2.ClaimEvent], reason: str
    ) -> None:
        """Every member learns why the gang waits (once per reason, from this replica)."""
        if self._gang_reasons.get(waiting.event.gang_id) == reason:
            return
        self._gang_reasons[waiting.event.gang_id] = reason
        for event in events:
            if event.claim.uid == waiting.event.claim.uid:
                await self._unschedulable(waiting, reason)
            else:
                await self._unschedulable(Waiting(waiting.msg, event, EMPTY_CLAIM), reason)
