"""The unit half of the allocator's loop (mixed into `Worker`): gangs and pods, all or none.

A unit (`gangs.unit_of`) is a gang (`gang_id`) or a lone pod with several claims (`pod_uid`, no
gang). Promises (the module docstring of `worker` states them for the whole loop): a member is held
until its unit is complete at any replica (membership in the reservations bucket,
`gangs.GangBook`) — a gang when all `gang_size` members arrived, a pod when each claim it names
(`pod_claims`) arrived or is already allocated; the replica that completes it decides every member
at once, reserves all their devices or none (one revision-checked write per pool), creates the
unit's record `g.<unit>` once and each member's `c.<uid>` record from it, then announces every
member. A unit that does not fit reserves nothing and every member is told why.

Placement (`place_unit`): a pod's claims go to one node together with the core's pod step; a pod
whose other claims are already allocated (a shared claim placed with another pod, a claim allocated
before its pod was known) is pinned to their node, and waits with a reason when they sit on
different nodes; a gang's members are grouped into pods (`gangs.pods_of`) and placed with the
placement layer's gang step, each pod's claims together on one node. Limits: a gang's pods are
not pinned (gang members are only ever allocated by their gang's decision); a claim that joins a
unit after its decision (re-created, or deallocated and pending again) waits with a reason; a pod
naming more than `MAX_POD_CLAIMS` claims is refused. A claim the claim-writer sent alone before
it knew the pod (a claim the pod names directly, seen first) is normally pinned-to; only if that
lone attempt and the pod's decision commit at the same moment does the claim's own record win
and the pod end up split (the claim's devices are not double-held: the pod's part is dropped).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from gpudra_alloc import AllocatedState, AllocationInputError
from gpudra_alloc.placement import Gang, place_gang, why_pending
from gpudra_allocator.engine import Engine, GangDecision, summary
from gpudra_allocator.errors import BadClaimError, ReservationConflict
from gpudra_allocator.events import claim_doc, parse_claim
from gpudra_allocator.gangs import (
    MATCH_ATTRIBUTE_ANNOTATION,
    POD_UNIT_PREFIX,
    GangBook,
    GangRecord,
    Members,
    is_pod_unit,
    pods_of,
    unit_of,
    unit_size,
)
from gpudra_allocator.holdings import ClaimRecord, Holding, holdings_for
from gpudra_allocator.index import KvIndex
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_api import Node, ResourceClaim, ResourceSlice
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)

RESERVE_TRIES = 8
MAX_POD_CLAIMS = 128  # each is a KV read per attempt; a pod with more is refused, not stalled
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


@dataclass(frozen=True)
class Plan:
    """What a complete unit places now: its pods (member events), and the node they are pinned
    to by claims of theirs that are allocated already ("" for none)."""

    pods: list[list[claims_pb2.ClaimEvent]]
    pinned: str = ""

    @property
    def events(self) -> list[claims_pb2.ClaimEvent]:
        return [e for pod in self.pods for e in pod]


def place_unit(
    engine: Engine,
    unit: str,
    pods: list[list[ResourceClaim]],
    match_attribute: str | None,
    slices: Iterable[ResourceSlice],
    version: int,
    state: AllocatedState,
    pinned: str = "",
    label: str = "",
) -> GangDecision:
    """Every claim of every pod placed (each pod on one node), in pod order, or why not.

    One unpinned pod takes the engine's own pod step; a pinned pod or several pods go through the
    placement layer's gang step over the allowed nodes. Nothing is reserved here.
    Raises `AllocationInputError` for invalid claims.
    """
    what = label or _what(unit)
    count = sum(len(pod) for pod in pods)
    if len(pods) == 1 and not pinned:
        decision = engine.decide(pods[0], slices, version, state)
        if decision.allocated:
            return GangDecision(placed=tuple((decision.node, r) for r in decision.results))
        return GangDecision(
            reason=f"{what}: its {count} claims do not fit together on one node; {decision.reason}"
        )
    # The engine keeps its per-version Allocator and topology chooser to itself; the gang step
    # needs them too (Engine.decide_gang places one claim per pod, a unit has pods of several).
    allocator = engine._for(version, slices, state)
    chooser = engine._chooser if engine.policy == "topology" else None
    names = allocator.node_names()
    nodes = [Node(n) for n in names if not pinned or n == pinned]
    placed = place_gang(allocator, nodes, Gang(unit, pods, match_attribute), engine.policy, chooser)
    if placed.pods is not None:
        return GangDecision(
            placed=tuple(
                (node.name, result) for node, results in placed.pods for result in results
            ),
            group=placed.group,
        )
    failed = placed.failed_pod or 0
    explanation = why_pending(allocator, nodes, pods[failed])
    reason = summary(explanation)
    if explanation.get("sentence"):
        reason = f"{explanation['sentence']} ({reason})"
    if pinned:
        where = f" on {pinned}, where its claims already allocated are"
    elif match_attribute:
        where = f" in one {match_attribute}"
    else:
        where = ""
    return GangDecision(
        reason=(
            f"{what}: its {count} claims in {len(pods)} pod(s) do not fit together{where} "
            f"(at most {failed} pod(s) placed); {reason}"
        )
    )


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
        unit = unit_of(event)
        if event.gang_id and event.gang_size == 0:
            await self._unschedulable(
                waiting,
                "invalid claim: gpudra.io/gang needs gpudra.io/gang-size, a whole number >= 1",
            )
            await self._finish(uid, waiting.msg)
            return
        if is_pod_unit(unit) and unit_size(event) > MAX_POD_CLAIMS:
            await self._unschedulable(
                waiting,
                f"invalid claim: pod {event.pod_name or event.pod_uid} names "
                f"{unit_size(event)} claims (gpudra places at most {MAX_POD_CLAIMS} per pod)",
            )
            await self._finish(uid, waiting.msg)
            return
        members = await self._gangs.join(event)
        record = await self._gangs.decision(unit)
        if record is None:
            plan, why = await self._plan(members)
            if plan is None:
                if why:
                    await self._unschedulable(waiting, why)
                self._hold(waiting)
                return
            record = await self._decide_gang(waiting, members, plan)
            if record is None:
                self._hold(waiting)
                return
        if uid not in record.placed:
            await self._unschedulable(
                waiting,
                f"{_what(unit, members)} was allocated without this claim "
                f"(it has {members.size})",
            )
            self._hold(waiting)
            return
        await self._settle_gang(record, members)
        await self._finish(uid, waiting.msg)

    async def _plan(self, members: Members) -> tuple[Plan | None, str]:
        """The unit's plan once it is complete; else (None, why it waits — "" to say nothing)."""
        if not is_pod_unit(members.gang):
            # Counted first: reading every member's record on each arrival would be quadratic.
            complete = len(members.events) >= members.size
            events = await self._live_members(members) if complete else None
            if events is None:
                return None, (
                    f"gang {members.gang}: {len(members.events)} of {members.size} claims "
                    "present; waiting for the rest before allocating any"
                )
            return Plan(pods_of(events)), ""
        pending: list[claims_pb2.ClaimEvent] = []
        pinned: set[str] = set()
        missing = 0
        present = set()
        for event in members.ordered():
            record = await self._res.record(event.claim.uid)
            if record is not None and record.released:
                await self._gangs.leave(members.gang, event.claim.uid)
                continue
            present.add(event.claim.uid)
            if record is None:
                pending.append(event)
            elif record.node:
                pinned.add(record.node)
        for uid in sorted(members.needed() - present):
            record = await self._res.record(uid)
            if record is None or record.released:
                missing += 1
            elif record.node:
                pinned.add(record.node)
        what = _what(members.gang, members)
        if missing:
            total = len(members.needed())
            return None, (
                f"{what}: {total - missing} of {total} claims present; "
                "waiting for the rest before allocating any"
            )
        if len(pinned) > 1:
            return None, (
                f"{what}: its claims already allocated are on different nodes "
                f"({', '.join(sorted(pinned))}); the rest cannot join all of them"
            )
        if not pending:
            return None, ""  # every member is decided; their records settle them
        return Plan([pending], next(iter(pinned), "")), ""

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

    async def _decide_gang(
        self, waiting: Waiting, members: Members, plan: Plan
    ) -> GangRecord | None:
        gang, what = members.gang, _what(members.gang, members)
        events = plan.events
        for event in events:
            if not await self._res.drop_stale(event.claim.uid, stale_after=self._settings.ack_wait):
                return None  # another replica's attempt is in flight; its record will settle us
        try:
            claims = [parse_claim(e) for e in events]
        except BadClaimError as exc:
            reason = f"{what}: invalid claim: {exc}"
            await self._gang_unschedulable(waiting, events, reason)
            return None
        by_uid = {c.uid or e.claim.uid: c for c, e in zip(claims, events, strict=True)}
        pods = [[by_uid[e.claim.uid] for e in pod] for pod in plan.pods]
        match = None
        if not is_pod_unit(gang):
            annotations = (claim_doc(events[0]).get("metadata") or {}).get("annotations") or {}
            match = annotations.get(MATCH_ATTRIBUTE_ANNOTATION) or None
        self._refresh_classes()
        missing = self._engine.missing_classes(claims)
        if missing:
            reason = f"{what}: device class {', '.join(missing)} not found"
            await self._gang_unschedulable(waiting, events, reason)
            return None
        for _ in range(RESERVE_TRIES):
            token = f"{self.replica}-{uuid.uuid4().hex[:12]}"
            async with self._decide_lock:
                try:
                    decision = place_unit(
                        self._engine,
                        gang,
                        pods,
                        str(match) if match else None,
                        self._index.slices.values(),
                        self._index.version,
                        self._res.state,
                        plan.pinned,
                        what,
                    )
                except AllocationInputError as exc:
                    await self._gang_unschedulable(waiting, events, f"{what}: {exc}")
                    return None
                if not decision.allocated:
                    await self._gang_unschedulable(waiting, events, decision.reason)
                    return None
                by_pool: dict[tuple[str, str], list[Holding]] = {}
                now = time.time()
                placed = [c for pod in pods for c in pod]
                for claim, (_, result) in zip(placed, decision.placed, strict=True):
                    for pool, holdings in holdings_for(
                        [result], claim.uid, claim.key, token, now
                    ).items():
                        by_pool.setdefault(pool, []).extend(holdings)
                try:
                    await self._res.reserve(by_pool)
                except ReservationConflict as exc:
                    log.debug("%s: %s; deciding again", gang, exc)
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
            if winner.token != record.token or winner.released:
                # Deleted meanwhile, or decided by an older attempt of its own: free our part.
                await self._res.drop(uid, record.token)
            if not winner.released:
                await self._announce(event, winner)
        self._gang_reasons.pop(record.gang, None)

    async def _gang_unschedulable(
        self, waiting: Waiting, events: list[claims_pb2.ClaimEvent], reason: str
    ) -> None:
        """Every member learns why the unit waits (once per reason, from this replica)."""
        unit = unit_of(waiting.event)
        if self._gang_reasons.get(unit) == reason:
            return
        self._gang_reasons[unit] = reason
        for event in events:
            if event.claim.uid == waiting.event.claim.uid:
                await self._unschedulable(waiting, reason)
            else:
                await self._unschedulable(Waiting(waiting.msg, event, EMPTY_CLAIM), reason)


def _what(unit: str, members: Members | None = None) -> str:
    """How reasons name a unit: `gang <id>`, or `pod <namespace/name>` (its UID if unnamed)."""
    if not is_pod_unit(unit):
        return f"gang {unit}"
    named = [e.pod_name for e in (members.events.values() if members else ()) if e.pod_name]
    return f"pod {min(named) if named else unit.removeprefix(POD_UNIT_PREFIX)}"
