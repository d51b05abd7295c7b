"""Units in the reservations bucket: which members arrived, and the one decision for all of them.

A unit is what the allocator places all or none: a gang (events with `gang_id`; all pods of a job,
`gang_size` claims in all) or a lone pod (events with `pod_uid` and no gang: the pod's claims,
`pod_claims`, on one node). `unit_of` names it: the gang id, or `pod:<pod UID>` (gang ids always
hold a `/`, so the two never meet). Inside a unit the members are grouped into pods by `pod_uid`
(`Members.pods`); a member without one is a pod of its own, as gang members were before pods.

The durable consumer may hand a gang's claims to different replicas, so no replica can wait for
"all members" in memory. Two more kinds of keys in `gpudra-reservations` (beside `p.` and `c.`):
- `m.<gang>`: the members seen so far, `{"gang", "size", "members": {uid: ClaimEvent}, "seqs":
  {uid: claims-stream sequence}, "epochs": {uid: the stream's incarnation}}` (events as base64
  protobuf; `seqs` and `epochs` are absent in keys written before they were kept, and a member
  without one counts as 0: unknown). Every replica that receives a member adds it with a
  revision-checked write, so whichever replica completes the set sees every member's claim, and
  the position of the member's newest event (`incarnations.StreamPos`), which its `c.<uid>` record
  is fenced with (`ClaimRecord.seq`, `.epoch`) as a lone claim's is with its own event's.
- `g.<gang>`: the gang's decision, *created* once (`decide`): the token of the attempt whose
  holdings stand, every member's node and allocation, and the match attribute group it was
  placed in (`group`, `attribute`), which late members keep to. A replica that loses the race uses the
  winner's record and removes its own attempt's holdings.
`<gang>` is a hash of the unit id (gang names are free text; keys are not).

A member whose claim is deleted leaves the gang (`leave`); when the last one left, both keys are
removed, so a gang re-created under the same name (a job run again) starts from nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

import google.protobuf.message
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from gpudra_allocator.errors import ReservationConflict
from gpudra_allocator.holdings import BadReservationError
from gpudra_allocator.incarnations import StreamPos
from gpudra_bus import NATS_ERRORS, translate, wrong_revision
from gpudrapb.v1 import claims_pb2

_MAX_CAS_TRIES = 50
MATCH_ATTRIBUTE_ANNOTATION = "gpudra.io/gang-match-attribute"
POD_UNIT_PREFIX = "pod:"


def unit_of(event: claims_pb2.ClaimEvent) -> str:
    """The unit the event's claim is placed with: its gang, its pod, or "" (alone: no gang, and
    no pod or a pod with no other gpudra claim — nothing to keep together)."""
    if event.gang_id:
        return event.gang_id
    if event.pod_uid and unit_size(event) > 1:
        return f"{POD_UNIT_PREFIX}{event.pod_uid}"
    return ""


def unit_size(event: claims_pb2.ClaimEvent) -> int:
    """Claims the unit has in all, as the event says: `gang_size`, or the pod's claim count."""
    if event.gang_id:
        return event.gang_size
    return len(set(event.pod_claims) | {event.claim.uid}) if event.pod_uid else 1


def is_pod_unit(unit: str) -> bool:
    return unit.startswith(POD_UNIT_PREFIX)


def gang_hash(gang: str) -> str:
    return hashlib.sha256(gang.encode()).hexdigest()[:32]


def members_key(gang: str) -> str:
    return f"m.{gang_hash(gang)}"


def decision_key(gang: str) -> str:
    return f"g.{gang_hash(gang)}"


@dataclass(frozen=True)
class Members:
    """The content of an `m.` key."""

    gang: str
    size: int
    events: dict[str, claims_pb2.ClaimEvent] = field(default_factory=dict)
    # claim UID -> claims-stream sequence of the member's newest event (absent: unknown, 0)
    seqs: dict[str, int] = field(default_factory=dict)
    # claim UID -> the incarnation of the stream that event was in (absent: unknown, 0)
    epochs: dict[str, int] = field(default_factory=dict)

    def pos(self, uid: str) -> StreamPos:
        """The claims-stream position of member `uid`'s newest event."""
        return StreamPos(self.epochs.get(uid, 0), self.seqs.get(uid, 0))

    def encode(self) -> bytes:
        members = {
            uid: base64.b64encode(e.SerializeToString()).decode()
            for uid, e in sorted(self.events.items())
        }
        doc: dict[str, Any] = {"gang": self.gang, "size": self.size, "members": members}
        seqs = {uid: seq for uid, seq in sorted(self.seqs.items()) if seq and uid in self.events}
        if seqs:  # absent, not empty: keys without sequences read as before
            doc["seqs"] = seqs
        epochs = {u: e for u, e in sorted(self.epochs.items()) if e and u in self.events}
        if epochs:
            doc["epochs"] = epochs
        return json.dumps(doc).encode()

    @staticmethod
    def decode(data: bytes) -> Members:
        try:
            doc = json.loads(data)
            events = {}
            for uid, text in doc["members"].items():
                event = claims_pb2.ClaimEvent()
                event.ParseFromString(base64.b64decode(text, validate=True))
                events[str(uid)] = event
            seqs, epochs = _wholes(doc, "seqs"), _wholes(doc, "epochs")
            return Members(str(doc["gang"]), int(doc["size"]), events, seqs, epochs)
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            binascii.Error,
            google.protobuf.message.DecodeError,
        ) as exc:
            raise BadReservationError(f"malformed gang members: {exc}") from exc

    def ordered(self) -> list[claims_pb2.ClaimEvent]:
        """Members by claim (namespace/name, then UID): the unit's order, the same everywhere."""
        return sorted(
            self.events.values(), key=lambda e: (e.claim.namespace, e.claim.name, e.claim.uid)
        )

    def needed(self) -> set[str]:
        """UIDs of every claim the members' pods name (`pod_claims`, each claim's own included),
        per pod as its latest event says (`observed_at`: a claim deleted and re-created under
        the same name is named by its new UID from then on); events equally recent all count."""
        latest: dict[str, list[claims_pb2.ClaimEvent]] = {}
        for event in self.events.values():
            pod = event.pod_uid or f"claim:{event.claim.uid}"
            seen = latest.setdefault(pod, [event])
            if _when(event) > _when(seen[0]):
                seen[:] = [event]
            elif _when(event) == _when(seen[0]) and event is not seen[0]:
                seen.append(event)
        return {u for pod in latest.values() for e in pod for u in (*e.pod_claims, e.claim.uid)}


def _wholes(doc: dict[str, Any], name: str) -> dict[str, int]:
    """`doc[name]`: whole numbers >= 0 by claim UID (absent: none)."""
    out = {}
    for uid, value in (doc.get(name) or {}).items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"{name} of {uid} must be a whole number")
        out[str(uid)] = value
    return out


def _when(event: claims_pb2.ClaimEvent) -> tuple[int, int]:
    return (event.observed_at.seconds, event.observed_at.nanos)


def pods_of(events: list[claims_pb2.ClaimEvent]) -> list[list[claims_pb2.ClaimEvent]]:
    """`events` grouped into pods by `pod_uid` (none: a pod of its own), in first-member order."""
    pods: dict[str, list[claims_pb2.ClaimEvent]] = {}
    for event in events:
        pods.setdefault(event.pod_uid or f"claim:{event.claim.uid}", []).append(event)
    return list(pods.values())


@dataclass(frozen=True)
class GangRecord:
    """The content of a `g.` key: the decision that stands for every member."""

    gang: str
    token: str
    group: str | None = None
    placed: dict[str, tuple[str, dict[str, Any]]] = field(
        default_factory=dict
    )  # uid -> node, alloc
    # the match attribute whose value `group` is (None: no group, or a record written before
    # the attribute was kept; then the members' annotation names it)
    attribute: str | None = None

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "gang": self.gang,
            "token": self.token,
            "group": self.group,
            "members": {
                uid: {"node": node, "allocation": allocation}
                for uid, (node, allocation) in sorted(self.placed.items())
            },
        }
        if self.attribute is not None:  # absent, not null: records without one read as before
            doc["attribute"] = self.attribute
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> GangRecord:
        try:
            doc = json.loads(data)
            placed = {}
            for uid, member in doc["members"].items():
                if not isinstance(member["allocation"], dict):
                    raise TypeError("allocation must be an object")
                placed[str(uid)] = (str(member["node"]), member["allocation"])
            group, attribute = doc.get("group"), doc.get("attribute")
            return GangRecord(
                str(doc["gang"]),
                str(doc["token"]),
                None if group is None else str(group),
                placed,
                None if attribute is None else str(attribute),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadReservationError(f"malformed gang record: {exc}") from exc


class GangBook:
    """Gang membership and decisions, shared by every replica through the reservations bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def _get(self, key: str) -> tuple[int, bytes | None]:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return 0, None
        except NATS_ERRORS as exc:
            raise translate(exc, f"reading {key}") from exc
        return entry.revision or 0, entry.value or None

    async def _write(self, key: str, revision: int, value: bytes) -> bool:
        """A revision-checked write; False when someone else wrote first."""
        try:
            if revision == 0:
                await self._kv.create(key, value)
            else:
                await self._kv.update(key, value, last=revision)
        except NATS_ERRORS as exc:
            if wrong_revision(exc):
                return False
            raise translate(exc, f"writing {key}") from exc
        return True

    async def members(self, gang: str) -> Members | None:
        _, value = await self._get(members_key(gang))
        return Members.decode(value) if value else None

    async def join(self, event: claims_pb2.ClaimEvent, seq: int = 0, epoch: int = 0) -> Members:
        """Add the event's claim to its unit (no write when it is there already); all members.

        `seq` is the event's claims-stream sequence (0: unknown) in the stream's incarnation
        `epoch` (0: unknown); a member known already keeps its event unless this one is of a
        newer generation, and takes the newer position (the claim offered again, e.g. after an
        allocation made outside gpudra was cleared; `StreamPos.after`)."""
        unit, size = unit_of(event), unit_size(event)
        key, uid = members_key(unit), event.claim.uid
        for _ in range(_MAX_CAS_TRIES):
            revision, value = await self._get(key)
            current = Members.decode(value) if value else Members(unit, size)
            known = current.events.get(uid)
            newer_seq = StreamPos(epoch, seq).after(current.pos(uid))
            events = dict(current.events)
            if known is None or known.claim.generation < event.claim.generation:
                events[uid] = event
            elif not newer_seq:
                return current
            seqs, epochs = dict(current.seqs), dict(current.epochs)
            if newer_seq:
                seqs[uid] = seq
                epochs[uid] = epoch
            updated = Members(current.gang, max(current.size, size), events, seqs, epochs)
            if await self._write(key, revision, updated.encode()):
                return updated
        raise ReservationConflict(f"unit {unit}: members keep changing")

    async def leave(self, gang: str, uid: str) -> None:
        """The claim is gone (or its allocation cleared): out of the gang and of its decision, so
        a claim coming back is never handed the devices it gave up. The last to leave removes the
        gang's keys."""
        await self._out_of_decision(gang, uid)
        key = members_key(gang)
        for _ in range(_MAX_CAS_TRIES):
            revision, value = await self._get(key)
            if not value:
                return
            current = Members.decode(value)
            if uid not in current.events:
                return
            events = {u: e for u, e in current.events.items() if u != uid}
            seqs = {u: s for u, s in current.seqs.items() if u != uid}
            epochs = {u: e for u, e in current.epochs.items() if u != uid}
            if events:
                left = Members(gang, current.size, events, seqs, epochs)
                if await self._write(key, revision, left.encode()):
                    return
                continue
            try:
                await self._kv.delete(decision_key(gang))
                await self._kv.delete(key, last=revision)
            except NATS_ERRORS as exc:
                # A revision-checked delete that lost comes back as a plain APIError.
                if wrong_revision(exc):
                    continue
                raise translate(exc, f"removing gang {gang}") from exc
            return
        raise ReservationConflict(f"gang {gang}: members keep changing")

    async def _out_of_decision(self, gang: str, uid: str) -> None:
        key = decision_key(gang)
        for _ in range(_MAX_CAS_TRIES):
            revision, value = await self._get(key)
            if not value:
                return
            record = GangRecord.decode(value)
            if uid not in record.placed:
                return
            placed = {u: p for u, p in record.placed.items() if u != uid}
            updated = replace(record, placed=placed)
            if await self._write(key, revision, updated.encode()):
                return
        raise ReservationConflict(f"gang {gang}: decision keeps changing")

    async def decision(self, gang: str) -> GangRecord | None:
        _, value = await self._get(decision_key(gang))
        return GangRecord.decode(value) if value else None

    async def void(self, record: GangRecord) -> bool:
        """Remove the unit's decision if it is still exactly `record` (revision-checked); False
        when it changed or is gone. Only for a decision none of whose members was committed."""
        key = decision_key(record.gang)
        revision, value = await self._get(key)
        if not value or GangRecord.decode(value).encode() != record.encode():
            return False
        try:
            await self._kv.delete(key, last=revision)
        except NATS_ERRORS as exc:
            # A revision-checked delete that lost comes back as a plain APIError.
            if wrong_revision(exc):
                return False
            raise translate(exc, f"voiding the decision of {record.gang}") from exc
        return True

    async def decide(self, record: GangRecord) -> GangRecord:
        """Record `record` unless the gang has a decision already; returns the one that stands."""
        key = decision_key(record.gang)
        for _ in range(_MAX_CAS_TRIES):
            if await self._write(key, 0, record.encode()):
                return record
            existing = await self.decision(record.gang)
            if existing is not None:
                return existing
        raise ReservationConflict(f"gang {record.gang}: decision keeps changing")
