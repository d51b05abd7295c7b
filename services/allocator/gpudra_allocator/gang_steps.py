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
(alone or in a gang) whose claims are partly allocated already (a shared claim placed with another
pod, a claim allocated before its pod was known, a member decided earlier) is pinned to their
node, and waits with a reason when they sit on different nodes; a gang's members are grouped into
pods (`gangs.pods_of`) and placed with the placement layer's gang step, each pod's claims together
on one node. A pod naming more than `MAX_POD_CLAIMS` claims is refused.

Late members: a claim that joins a unit after its decision (re-created, or deallocated and pending
again) is decided on its own attempt, pinned to the node of its pod's members already placed
(within a gang's `gang_size`) and, when the gang's decision recorded a match attribute group
(`GangRecord.group`), to devices of that group only — with or without a pod-mate placed; no room
there: it waits with the reason ("gang g is in <attribute> c1: no node in c1 has room for pod p")
and is retried on change like any unschedulable claim. Its `c.<uid>` record is created directly
(the unit's record stays as it was). When every member the decision placed has left, the
decision is void and the unit is decided anew.

Never split by a lone decision (a claim the claim-writer sent alone before it knew the pod, whose
lone attempt races the pod's unit decision). A lone attempt can only win by creating `c.<uid>`
first (create-once); the unit decision re-reads its members' records after reserving (a record
that appeared pins the next attempt instead) and then its settlers create the members' records in
one order, the same at every replica: claims that may go alone (not owned by a pod: templates'
claims never go alone) first, then by UID. The first member in that order that is still alive is
created before any other, by whichever settler comes first; if a lone attempt holds it on another
node, no settler ever gets past it, so no member of the unit's decision is committed: the settler
voids the decision (revision-checked, only if unchanged), drops its holdings, and the next attempt
is pinned to the lone record's node. If it is ours, that claim's lone attempt can no longer win.
Residual limit: a pod with two or more claims each sent alone (the second could be taken after
the first is ours: those lone decisions could split the pod by themselves anyway; logged).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpudra_alloc import AllocatedState, AllocationInputError, CelRuntimeError
from gpudra_alloc.placement import Gang, group_nodes, place_gang, why_pending
from gpudra_alloc.placement.waiting import needs_large_domain, pod_devices
from gpudra_allocator.engine import (
    Engine,
    GangDecision,
    cel_reason,
    gang_node,
    held_reason,
    summary,
)
from gpudra_allocator.errors import BadClaimError, ReservationConflict
from gpudra_allocator.events import claim_doc, parse_claim, stream_pos
from gpudra_allocator.gangs import (
    MATCH_ATTRIBUTE_ANNOTATION,
    POD_UNIT_PREFIX,
    GangRecord,
    Members,
    is_pod_unit,
    pods_of,
    unit_of,
    unit_size,
)
from gpudra_allocator.holdings import ClaimRecord, Holding, holdings_for
from gpudra_allocator.steps import Steps, Waiting
from gpudra_api import Node, ResourceClaim, ResourceSlice
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)

RESERVE_TRIES = 8
MAX_POD_CLAIMS = 128  # each is a KV read per attempt; a pod with more is refused, not stalled
EMPTY_CLAIM = ResourceClaim(name="", namespace="", uid="", requests=())


@dataclass
class QueueCount:
    """The pods of a queue that each need a whole large NVLink domain, counted once per change of
    the queue (`placement.waiting`'s rule, `needs_large_domain` of the devices a pod's held claims
    ask for together), with what it takes to leave a claim or unit out of the count without counting
    again: each decision leaves out its own, and a backlog of thousands is decided claim by claim.
    """

    version: int
    devices: dict[str, int]  # held claim UID -> devices it asks for (unparsable claims: absent)
    pod_of: dict[str, str]  # held claim UID -> its pod (`pod_key`)
    pods: dict[str, int]  # pod -> devices its held claims ask for together
    units: dict[str, list[str]]  # unit -> its held claims' UIDs
    large: int

    @staticmethod
    def of(waiting: dict[str, Waiting], version: int) -> QueueCount:
        count = QueueCount(version, {}, {}, {}, {}, 0)
        for uid, held in waiting.items():
            unit = unit_of(held.event)
            if unit:
                count.units.setdefault(unit, []).append(uid)
            claim = held.claim if held.claim is not EMPTY_CLAIM else held.parsed
            if claim is None:
                try:
                    claim = held.parsed = parse_claim(held.event)
                except BadClaimError:
                    continue
            pod = count.pod_of[uid] = pod_key(held.event)
            count.devices[uid] = pod_devices([claim])
            count.pods[pod] = count.pods.get(pod, 0) + count.devices[uid]
        count.large = sum(1 for devices in count.pods.values() if needs_large_domain(devices))
        return count

    def without(self, uids: set[str]) -> int:
        """The count with the claims `uids` left out (their pods may then fall below)."""
        minus: dict[str, int] = {}
        for uid in uids:
            if uid in self.devices:
                pod = self.pod_of[uid]
                minus[pod] = minus.get(pod, 0) + self.devices[uid]
        large = self.large
        for pod, devices in minus.items():
            before = self.pods[pod]
            large -= int(needs_large_domain(before)) - int(needs_large_domain(before - devices))
        return large


@dataclass(frozen=True)
class Plan:
    """What a unit places now: its pods (member events), and per pod the node it is pinned to by
    claims of its own that are allocated already ("" for none)."""

    pods: list[list[claims_pb2.ClaimEvent]]
    pins: tuple[str, ...] = ()

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
    pins: Sequence[str] = (),
    group: str | None = None,
    pod_labels: Sequence[str] = (),
) -> GangDecision:
    """Every claim of every pod placed (each pod on one node), in pod order, or why not.

    `pinned`: every pod on that node; `pins`: per pod, its node ("" for free; over `pinned`).
    `group` (with `match_attribute`): only devices whose attribute has that value (a gang's late
    pods keep the group its decision recorded); `pod_labels`: how reasons name each pod.
    One unpinned pod without a group takes the engine's own pod step; a pinned pod, a group or
    several pods go through the placement layer's gang step. Nothing is reserved here.
    Raises `AllocationInputError` for invalid claims (`CelRuntimeError` for a selector that
    fails at run time on a device: the unit is held and retried like one that does not fit).
    """
    what = label or _what(unit)
    count = sum(len(pod) for pod in pods)
    pod_pins = [(pins[i] if i < len(pins) else "") or pinned for i in range(len(pods))]
    within = group if match_attribute else None
    if len(pods) == 1 and not pod_pins[0] and within is None:
        decision = engine.decide(pods[0], slices, version, state)
        if decision.allocated:
            return GangDecision(placed=tuple((decision.node, r) for r in decision.results))
        return GangDecision(
            reason=f"{what}: its {count} claims do not fit together on one node; {decision.reason}"
        )
    allocator, chooser = engine.placement(slices, version, state)
    nodes = [Node(n) for n in allocator.node_names()]
    gang = Gang(unit, pods, match_attribute)
    placed = place_gang(allocator, nodes, gang, engine.policy, chooser, pod_pins, within)
    if placed.pods is not None:
        return GangDecision(
            placed=tuple(
                (node.name, result) for node, results in placed.pods for result in results
            ),
            group=placed.group,
        )
    held = engine.held_back(
        lambda: gang_node(
            place_gang(allocator, nodes, gang, engine.policy, chooser, pod_pins, within)
        )
    )
    if held is not None:
        return GangDecision(reason=f"{what}: {held_reason(held)}")
    failed = placed.failed_pod or 0
    if pod_pins[failed]:
        explained = [n for n in nodes if n.name == pod_pins[failed]]
    elif match_attribute and within is not None:
        explained = group_nodes(allocator, nodes, match_attribute, within)
    else:
        explained = nodes
    explanation = why_pending(allocator, explained, pods[failed])
    reason = summary(explanation)
    if explanation.get("sentence"):
        reason = f"{explanation['sentence']} ({reason})"
    distinct = sorted({p for p in pod_pins if p})
    if match_attribute and within is not None:
        return GangDecision(
            reason=_group_reason(what, match_attribute, within, pods, pod_labels, distinct)
            + f"; {reason}"
        )
    if len(distinct) == 1 and len(pods) == 1:
        where = f" on {distinct[0]}, where its claims already allocated are"
    elif distinct:
        where = f" beside their claims already allocated (on {', '.join(distinct)})"
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


def _group_reason(
    what: str,
    attribute: str,
    value: str,
    pods: list[list[ResourceClaim]],
    pod_labels: Sequence[str],
    pins: list[str],
) -> str:
    """Why pods kept to their gang's group wait: "gang g is in <attribute> c1: no node in c1
    has room for pod p" (the pods named when there is one, counted otherwise)."""
    if len(pods) == 1:
        who = pod_labels[0] if pod_labels else "its pod"
    else:
        who = f"its {len(pods)} pods together"
    where = f" beside its claims already allocated (on {', '.join(pins)})" if pins else ""
    return f"{what} is in {attribute} {value}: no node in {value} has room for {who}{where}"


class GangSteps(Steps):
    """Gang handling for `Worker`, which provides the attributes and the steps `Steps` declares."""

    _queue_count: QueueCount | None = None

    def _large_waiting(self, deciding: Waiting) -> int | None:
        """Pods held for retry here, but the claim or unit being decided, that each need a
        whole large NVLink domain (`placement.waiting.large_pods`): the topology reserve's
        `waiting_large`. None (not counted) when the engine runs no reserve. Only this replica's
        queue: with several replicas each counts the claims it holds."""
        if not self._engine.reserving:
            return None
        count = self._queue_count
        if count is None or count.version != self._held_version:
            count = self._queue_count = QueueCount.of(self._waiting, self._held_version)
        unit, own = unit_of(deciding.event), deciding.event.claim.uid
        return count.without({own, *count.units.get(unit, ())} if unit else {own})

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
        pos = stream_pos(waiting.msg)
        members = await self._gangs.join(event, pos.seq, pos.epoch)
        record = await self._gangs.decision(unit)
        if record is not None and not record.placed:
            # Every member it placed has left: nothing holds the unit together any more.
            await self._gangs.void(record)
            record = None
        if record is None or uid not in record.placed:
            # No decision yet, or this claim joined after it (a late member, see the docstring).
            plan, why = await self._plan(members, record)
            if plan is None:
                if why:
                    await self._unschedulable(waiting, why)
                self._hold(waiting)
                return
            decided = await self._decide_gang(waiting, members, plan, record)
            if decided is None:
                self._hold(waiting)
                return
            record = decided
        if not await self._settle_gang(record, members):
            self._hold(waiting)  # a lone decision took a member first: decided again, pinned
            return
        if uid not in record.placed:
            await self._unschedulable(
                waiting,
                f"{_what(unit, members)} was allocated without this claim "
                f"(it has {members.size})",
            )
            self._hold(waiting)
            return
        await self._finish(uid, waiting.msg)

    async def _plan(
        self, members: Members, decided: GangRecord | None = None
    ) -> tuple[Plan | None, str]:
        """What the unit places now; else (None, why it waits — "" to say nothing).

        Without a decision, the whole unit once complete; with one (`decided`), the members it
        lacks (late members), pinned beside their pod's members it placed."""
        gang = not is_pod_unit(members.gang)
        what = _what(members.gang, members)
        waits = (
            f"{what}: {len(members.events)} of {members.size} claims present; "
            "waiting for the rest before allocating any"
        )
        if gang and decided is None and len(members.events) < members.size:
            return None, waits  # counted first: reading every record on each arrival is quadratic
        pending: list[claims_pb2.ClaimEvent] = []
        pins: dict[str, set[str]] = {}
        present: set[str] = set()
        for event in members.ordered():
            uid = event.claim.uid
            record = await self._res.record(uid)
            if record is not None and record.released:
                await self._gangs.leave(members.gang, uid)
                continue
            present.add(uid)
            if decided is not None and uid in decided.placed:
                node = decided.placed[uid][0]
            elif record is None:
                if not gang or decided is not None or len(present) <= members.size:
                    pending.append(event)
                continue
            else:
                node = record.node
            if node:
                pins.setdefault(pod_key(event), set()).add(node)
        if gang and decided is None and len(present) < members.size:
            return None, waits.replace(f"{len(members.events)} of", f"{len(present)} of", 1)
        if gang and decided is not None:
            # A gang is never more than its size: late members only take the places left.
            room = members.size - len(present.intersection(decided.placed))
            if pending and room <= 0:
                return None, f"{what} was allocated without this claim (it has {members.size})"
            pending = pending[: max(room, 0)]
        missing = 0
        for uid in sorted(members.needed() - present):
            naming = {pod_key(e) for e in members.events.values() if uid in e.pod_claims}
            record = await self._res.record(uid)
            if record is None or record.released:
                missing += 1
            elif record.node:
                for key in naming:
                    pins.setdefault(key, set()).add(record.node)
        if missing and not gang:
            total = len(members.needed())
            return None, (
                f"{what}: {total - missing} of {total} claims present; "
                "waiting for the rest before allocating any"
            )
        if not pending:
            return None, ""  # every member is decided; their records settle them
        pods = pods_of(pending)
        pod_pins = []
        for pod in pods:
            nodes = pins.get(pod_key(pod[0]), set())
            if len(nodes) > 1:
                who = what if not gang else f"{what}: pod {pod[0].pod_name or pod[0].pod_uid}"
                return None, (
                    f"{who}: its claims already allocated are on different nodes "
                    f"({', '.join(sorted(nodes))}); the rest cannot join all of them"
                )
            pod_pins.append(next(iter(nodes), ""))
        return Plan(pods, tuple(pod_pins)), ""

    async def _decide_gang(
        self, waiting: Waiting, members: Members, plan: Plan, decided: GangRecord | None = None
    ) -> GangRecord | None:
        """Place and reserve the plan's members; the decision that stands (None: not now).

        The unit's decision is created once in `g.<unit>`; a late plan's record (the unit was
        `decided` already) is only this attempt's, settled by this replica, and its members stay
        in the group that decision recorded (if any)."""
        gang, what = members.gang, _what(members.gang, members)
        late = decided is not None
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
            if decided is not None and decided.attribute:
                match = decided.attribute  # the gang's constraint, whatever a late claim says
        group = decided.group if decided is not None and match else None
        labels = [_pod_label(pod[0]) for pod in plan.pods]
        self._refresh_classes()
        missing = self._engine.missing_classes(claims)
        if missing:
            reason = f"{what}: device class {', '.join(missing)} not found"
            await self._gang_unschedulable(waiting, events, reason)
            return None
        for _ in range(RESERVE_TRIES):
            token = f"{self.replica}-{uuid.uuid4().hex[:12]}"
            async with self._decide_lock:
                self._engine.waiting_large = self._large_waiting(waiting)
                try:
                    decision = place_unit(
                        self._engine,
                        gang,
                        pods,
                        str(match) if match else None,
                        self._index.slices.values(),
                        self._index.version,
                        self._res.state,
                        label=what,
                        pins=plan.pins,
                        group=group,
                        pod_labels=labels,
                    )
                except AllocationInputError as exc:
                    why = cel_reason(exc) if isinstance(exc, CelRuntimeError) else str(exc)
                    await self._gang_unschedulable(waiting, events, f"{what}: {why}")
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
            # Held now. A member decided meanwhile (a lone attempt) must pin the plan instead.
            for event in events:
                if await self._res.record(event.claim.uid) is not None:
                    for dropped in events:
                        await self._res.drop(dropped.claim.uid, token)
                    return None
            record = GangRecord(
                gang,
                token,
                decision.group,
                {
                    e.claim.uid: (node, result.to_json())
                    for e, (node, result) in zip(events, decision.placed, strict=True)
                },
                str(match) if match and decision.group is not None else None,
            )
            if late:
                return record
            winner = await self._gangs.decide(record)
            if winner.token != token:
                for event in events:
                    await self._res.drop(event.claim.uid, token)
            return winner
        return None

    async def _settle_gang(self, record: GangRecord, members: Members) -> bool:
        """Every member's `c.<uid>` record from the unit's decision, then its announcement, in
        the order of the module docstring; False (nothing committed, the decision void) when a
        lone decision holds the first live member on another node."""
        if not record.placed.keys() <= members.events.keys():
            # Read before a member joined: every settler must see each member it may commit.
            members = await self._gangs.members(record.gang) or members
        first = True
        for uid in sorted(record.placed, key=lambda u: (not _may_go_alone(members, u), u)):
            node, allocation = record.placed[uid]
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
                    seq=members.seqs.get(uid, 0),
                    epoch=members.epochs.get(uid, 0),
                ),
            )
            if winner.token != record.token or winner.released:
                # Deleted meanwhile, or decided by another attempt of its own: free our part.
                await self._res.drop(uid, record.token)
            if winner.released or winner.cleared:
                # Gone, or its allocation was cleared after the event this decision answers
                # (a settler slower than the member's deallocation): nothing to announce.
                continue
            if winner.token != record.token and winner.node and winner.node != node:
                if first:
                    log.info(
                        "%s: %s was decided alone on %s first; deciding the unit again",
                        record.gang,
                        uid,
                        winner.node,
                    )
                    await self._gangs.void(record)
                    for other in record.placed:
                        theirs = await self._res.record(other)
                        if theirs is None or theirs.token != record.token:
                            await self._res.drop(other, record.token)
                    await self._announce(event, winner)
                    return False
                log.warning(
                    "%s: %s was decided alone on %s; its pod may be split",
                    record.gang,
                    uid,
                    winner.node,
                )
            first = False
            await self._announce(event, winner)
        self._gang_reasons.pop(record.gang, None)
        return True

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


def pod_key(event: claims_pb2.ClaimEvent) -> str:
    """The pod a member belongs to, as `gangs.pods_of` groups them."""
    return event.pod_uid or f"claim:{event.claim.uid}"


def _pod_label(event: claims_pb2.ClaimEvent) -> str:
    """How a reason names the pod of a member: `pod <namespace/name>`, else its claim."""
    if event.pod_name or event.pod_uid:
        return f"pod {event.pod_name or event.pod_uid}"
    return f"claim {event.claim.namespace}/{event.claim.name}"


def _may_go_alone(members: Members, uid: str) -> bool:
    """Whether the claim-writer may have sent the member alone: not owned by a pod (a template's
    claim is owned by its pod and only ever goes with it). Unreadable claims count as may."""
    event = members.events.get(uid)
    if event is None:
        return False
    try:
        owners = (claim_doc(event).get("metadata") or {}).get("ownerReferences") or []
    except BadClaimError:
        return True
    return not any(
        isinstance(o, dict) and o.get("kind") == "Pod" and o.get("controller") for o in owners
    )


def _what(unit: str, members: Members | None = None) -> str:
    """How reasons name a unit: `gang <id>`, or `pod <namespace/name>` (its UID if unnamed)."""
    if not is_pod_unit(unit):
        return f"gang {unit}"
    named = [e.pod_name for e in (members.events.values() if members else ()) if e.pod_name]
    return f"pod {min(named) if named else unit.removeprefix(POD_UNIT_PREFIX)}"
