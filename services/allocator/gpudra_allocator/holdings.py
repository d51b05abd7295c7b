"""The values kept in the `gpudra-reservations` bucket, and their JSON form.

Two kinds of keys:
- `p.<driver>.<pool>` (dots in names written as `_`): every device of one pool that some claim
  holds, as `Holding`s. One key per pool, so that reserving all devices of an allocation on one
  node is a single revision-checked write.
- `c.<claim uid>`: the claim's `ClaimRecord` — the decision that won (allocated, with the token
  of the attempt whose holdings are the real ones) or a tombstone once the claim was released;
  a gang member's record names its gang.

(Gangs add `m.<gang>` and `g.<gang>` keys to the same bucket: see `gangs`.)

Decoding is strict: a value that is not what this module writes raises `BadReservationError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_allocator.errors import AllocatorPermanentError
from gpudra_allocator.incarnations import StreamPos
from gpudra_api import AllocationResult, Quantity, QuantityParseError

POOL_PREFIX = "p."
CLAIM_PREFIX = "c."
_UID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_]{0,127}")


class BadReservationError(AllocatorPermanentError):
    """A reservation key or value is not in the form this module writes."""


def _enc(name: str) -> str:
    # DNS names never contain "_", so the mapping is reversible; "/" (pool name parts) is a legal
    # KV key character but not a subject token separator, so it stays.
    return name.replace(".", "_")


def pool_key(driver: str, pool: str) -> str:
    return f"{POOL_PREFIX}{_enc(driver)}.{_enc(pool)}"


def claim_key(uid: str) -> str:
    if not _UID.fullmatch(uid):
        raise BadReservationError(f"claim UID {uid!r} cannot be a reservation key")
    return f"{CLAIM_PREFIX}{uid}"


@dataclass(frozen=True)
class Holding:
    """One device (or one share of it) held by one claim, written by one attempt (`token`)."""

    device: str
    uid: str
    claim: str
    token: str
    at: float
    share_id: str | None = None
    capacity: dict[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "device": self.device,
            "uid": self.uid,
            "claim": self.claim,
            "token": self.token,
            "at": self.at,
        }
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.capacity:
            out["capacity"] = dict(sorted(self.capacity.items()))
        return out

    @staticmethod
    def from_json(data: Any) -> Holding:
        try:
            return Holding(
                device=_str(data["device"]),
                uid=_str(data["uid"]),
                claim=_str(data["claim"]),
                token=_str(data["token"]),
                at=float(data["at"]),
                share_id=_str(data["shareID"]) if "shareID" in data else None,
                capacity={_str(k): _str(v) for k, v in data.get("capacity", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadReservationError(f"malformed holding {data!r}: {exc}") from exc


def _whole(doc: dict[str, Any], name: str) -> int:
    """`doc[name]`, a whole number >= 0 (absent: 0)."""
    value = doc.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{name} must be a whole number")
    return value


def _refused(value: Any) -> tuple[int, str] | None:
    """A cleared mark's `refused`: (generation, resourceVersion), or None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("refused must be an object")
    return _whole(value, "generation"), _str(value["resourceVersion"])


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class PoolHoldings:
    """The content of one `p.` key."""

    driver: str
    pool: str
    holdings: tuple[Holding, ...] = ()

    @property
    def key(self) -> str:
        return pool_key(self.driver, self.pool)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "driver": self.driver,
                "pool": self.pool,
                "holdings": [h.to_json() for h in self.holdings],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(data: bytes) -> PoolHoldings:
        try:
            doc = json.loads(data)
            return PoolHoldings(
                driver=_str(doc["driver"]),
                pool=_str(doc["pool"]),
                holdings=tuple(Holding.from_json(h) for h in doc["holdings"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BadReservationError(f"malformed pool reservations: {exc}") from exc

    def without(self, uid: str, token: str | None = None) -> PoolHoldings:
        """These holdings minus those of `uid` (only the attempt `token`'s, when given)."""
        kept = tuple(
            h for h in self.holdings if h.uid != uid or (token is not None and h.token != token)
        )
        return PoolHoldings(self.driver, self.pool, kept)

    def conflicts(self, new: Iterable[Holding]) -> list[str]:
        """Devices of `new` that another claim holds in a way that excludes them."""
        exclusive = {h.device: h for h in self.holdings if h.share_id is None}
        shared = {h.device for h in self.holdings if h.share_id is not None}
        out = []
        for h in new:
            other = exclusive.get(h.device)
            if other is not None and other.uid != h.uid:
                out.append(f"{h.device} (held by {other.claim})")
            elif h.share_id is None and h.device in shared:
                out.append(f"{h.device} (shared by other claims)")
        return out


def apply_holdings(state: AllocatedState, pool: PoolHoldings, sign: int) -> None:
    """Add (`sign=1`) or remove (`sign=-1`) a pool's holdings to/from an allocated state."""
    for h in pool.holdings:
        device = DeviceID(pool.driver, pool.pool, h.device)
        if h.share_id is None:
            if sign > 0:
                state.devices.add(device)
            else:
                state.devices.discard(device)
            continue
        # Capacity only when the share consumed some, as `AllocatedState.apply` (kube-scheduler
        # gives a share without consumption no entry, so the next share checks its counters).
        consumed = _quantities(h.capacity)
        if sign > 0:
            state.add_share(device, h.share_id)
            if consumed:
                state.add_capacity(device, consumed)
        else:
            state.remove_share(device, h.share_id)
            if consumed:
                state.remove_capacity(device, consumed)


def _quantities(capacity: dict[str, str]) -> dict[str, Quantity]:
    try:
        return {k: Quantity.parse(v) for k, v in capacity.items()}
    except QuantityParseError as exc:
        raise BadReservationError(f"malformed consumed capacity {capacity}: {exc}") from exc


def holdings_for(
    results: Iterable[AllocationResult], uid: str, claim: str, token: str, at: float
) -> dict[tuple[str, str], list[Holding]]:
    """What an allocation holds, by (driver, pool). Admin-access devices hold nothing, shared or
    not (kube-scheduler does not count an admin-access result as allocated at all)."""
    out: dict[tuple[str, str], list[Holding]] = {}
    for result in results:
        for r in result.results:
            if r.admin_access:
                continue
            capacity = {k: str(v) for k, v in (r.consumed_capacity or {}).items()}
            out.setdefault((r.driver, r.pool), []).append(
                Holding(r.device, uid, claim, token, at, r.share_id, capacity)
            )
    return out


@dataclass(frozen=True)
class ClaimRecord:
    """The content of a `c.` key: the decision that won, a tombstone (`released`: the claim is
    gone), or the mark of a cleared allocation (`cleared`: the claim lives on, nothing is held).

    `seq` is the claims-stream sequence of the event that wrote the record (for a unit's
    member: of the member's own newest event, `gangs.Members.seqs`; 0 when unknown: records of
    older replicas), and `epoch` the incarnation of the claims stream it was in (0 when unknown:
    records written before incarnations were kept; `incarnations`). An event of the claim at an
    earlier position (`pos`, `StreamPos.after`) that arrives afterwards (redelivered, or handled
    late by another replica) is older news than the record and changes nothing (`Worker`: a late
    adoption after the deallocation that followed it must not hold the devices again); an event
    of a newer incarnation of the stream is never older, whatever its sequence.

    `refused` (a cleared mark only): the API server refused to store the allocation, and the
    claim is not decided again until it has changed: (generation, resourceVersion) of the claim
    as the claim-writer reported the refusal (`Worker`)."""

    state: str  # "allocated", "released" or "cleared"
    claim: str = ""
    generation: int = 0
    token: str = ""
    node: str = ""
    allocation: dict[str, Any] | None = field(default=None, hash=False)
    allocator: str = ""
    gang: str = ""  # the gang id, for a member of a gang
    # The `gpudra.io/allocation-id` the claim carried when this allocation was adopted; "" for
    # gpudra's own decisions, whose id is their token (`claim_id`).
    allocation_id: str = ""
    seq: int = 0
    epoch: int = 0
    refused: tuple[int, str] | None = None

    @property
    def pos(self) -> StreamPos:
        """The claims-stream position of the event that wrote the record."""
        return StreamPos(self.epoch, self.seq)

    @property
    def released(self) -> bool:
        return self.state == "released"

    @property
    def cleared(self) -> bool:
        return self.state == "cleared"

    @property
    def claim_id(self) -> str:
        """The allocation id the claim carries with this allocation (`gpudra.io/allocation-id`)."""
        return self.allocation_id or self.token

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"state": self.state, "claim": self.claim}
        if self.gang:
            doc["gang"] = self.gang
        if self.seq:
            doc["seq"] = self.seq
        if self.epoch:
            doc["epoch"] = self.epoch
        if self.refused is not None:
            doc["refused"] = {"generation": self.refused[0], "resourceVersion": self.refused[1]}
        if self.state == "allocated":
            doc.update(
                generation=self.generation,
                token=self.token,
                node=self.node,
                allocation=self.allocation,
                allocator=self.allocator,
            )
            if self.allocation_id:
                doc["allocationId"] = self.allocation_id
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> ClaimRecord:
        try:
            doc = json.loads(data)
            state = _str(doc["state"])
            gang = doc.get("gang", "")
            if not isinstance(gang, str):
                raise TypeError("gang must be a string")
            seq, epoch = _whole(doc, "seq"), _whole(doc, "epoch")
            if state in ("released", "cleared"):
                return ClaimRecord(
                    state,
                    claim=str(doc.get("claim", "")),
                    gang=gang,
                    seq=seq,
                    epoch=epoch,
                    refused=_refused(doc.get("refused")),
                )
            if state != "allocated":
                raise ValueError(f"unknown state {state!r}")
            allocation = doc["allocation"]
            if not isinstance(allocation, dict):
                raise TypeError("allocation must be an object")
            return ClaimRecord(
                state,
                claim=_str(doc["claim"]),
                generation=int(doc["generation"]),
                token=_str(doc["token"]),
                node=_str(doc["node"]),
                allocation=allocation,
                allocator=_str(doc["allocator"]),
                gang=gang,
                allocation_id=_str(doc.get("allocationId", "")),
                seq=seq,
                epoch=epoch,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BadReservationError(f"malformed claim record: {exc}") from exc
