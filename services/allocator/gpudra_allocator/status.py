"""What the allocator's `/statusz` serves: one replica's state at a glance, as a JSON object.

Promises: `AllocatorStatus()` only reads state and counters the loop keeps anyway (the slice
index, the reservation mirror, the worker's counters and its held claims); it adds no work to
deciding a claim. The slice/pool/device totals are counted once per index version, on the first
request that sees it. The shape is stable (every key always present; see `deploy/README.md`):

- `replica`, `policy`, `ready`;
- `index`: `version` (grows on every slice change), `slices`, `pools` (driver/pool pairs),
  `devices`, `rejected` (slices that did not parse), `rewatches` (watches of the slice bucket
  opened again after one failed or ended), `classesVersion`;
- `reservations`: `version` (the mirror's);
- `claims`: `decided` (allocations announced, repeats included), `unschedulable` (reasons
  published), `released`, `replaced` (decisions given up for an allocation written in their
  place, kube-scheduler's, which was adopted instead), `stale` (events older than the claim's
  record, acknowledged without effect), `refused` (allocations the API server refused to store,
  422, their devices freed), `refusedUnchanged` (events of such a claim, unchanged since, not
  decided again), `inFlight` (events being handled now);
- `waiting`: claims held for retry here — `claims`, `lone` (claims placed alone), `gangs` and
  `pods` (distinct units with a member held), `reasons` (distinct reasons) and `topReasons`
  (up to `TOP_REASONS` of `{"reason", "claims"}`, most claims first; "" is a unit member still
  waiting for the rest of its unit without a reason of its own);
- `deadLetters`: `total` and `byKind` (malformed events parked);
- `engine`: `builds` (per-node state rebuilt for new slices or classes, by a warm-up or by a
  decision), `nodesRebuilt` (nodes whose per-node state those builds recomputed: after a slice
  change only the nodes it touched), `warmUps` (warm-ups run: builds minus those are roughly
  what claims paid);
- `reserve`: the topology whole-domain reserve (opt-in settings): `reserve` and `reserveFloor`
  (0 when off: first-fit, or reserve 0), `migHomes`, `waitingLarge` (pods waiting for a whole large
  NVLink domain, as the last decision counted them; null when off) and `heldBack` (claims that
  would have fit but were held back);
- `lastDecisionAt`: when this replica last published a decision (RFC 3339 UTC), or null.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from gpudra_allocator.gangs import is_pod_unit, unit_of
from gpudra_allocator.index import KvIndex
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.worker import Worker
from gpudra_api import DeviceClass, ResourceSlice

TOP_REASONS = 5


def rfc3339(epoch: float | None) -> str | None:
    """`epoch` seconds as an RFC 3339 UTC time with milliseconds; None stays None."""
    if epoch is None:
        return None
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


class AllocatorStatus:
    """A `gpudra_service.Status` callable over one replica's worker and indexes."""

    def __init__(
        self,
        worker: Worker,
        index: KvIndex[ResourceSlice],
        reservations: Reservations,
        classes: KvIndex[DeviceClass] | None = None,
        *,
        policy: str,
    ) -> None:
        self._worker = worker
        self._policy = policy
        self._index = index
        self._res = reservations
        self._classes = classes
        self._counted: tuple[int, dict[str, int]] = (-1, {})

    def _index_totals(self) -> dict[str, int]:
        version, totals = self._counted
        if version != self._index.version:
            slices = list(self._index.slices.values())
            totals = {
                "slices": len(slices),
                "pools": len({(s.driver, s.pool.name) for s in slices}),
                "devices": sum(len(s.devices) for s in slices),
            }
            self._counted = (self._index.version, totals)
        return totals

    def _waiting(self) -> dict[str, object]:
        held = list(self._worker.waiting.values())
        units = {unit_of(w.event) for w in held} - {""}
        reasons = Counter(w.reason for w in held)
        top = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[:TOP_REASONS]
        return {
            "claims": len(held),
            "lone": sum(1 for w in held if not unit_of(w.event)),
            "gangs": sum(1 for u in units if not is_pod_unit(u)),
            "pods": sum(1 for u in units if is_pod_unit(u)),
            "reasons": len(reasons),
            "topReasons": [{"reason": reason, "claims": count} for reason, count in top],
        }

    def __call__(self) -> dict[str, object]:
        worker = self._worker
        dead = dict(worker.dead_letters)
        return {
            "replica": worker.replica,
            "policy": self._policy,
            "ready": worker.ready,
            "index": {
                "version": self._index.version,
                **self._index_totals(),
                "rejected": self._index.rejected,
                "rewatches": self._index.rewatches,
                "classesVersion": self._classes.version if self._classes is not None else None,
            },
            "reservations": {"version": self._res.version},
            "claims": {
                "decided": worker.decided,
                "unschedulable": worker.unschedulable,
                "released": worker.released,
                "replaced": worker.replaced,
                "stale": worker.stale,
                "refused": worker.refused,
                "refusedUnchanged": worker.refused_unchanged,
                "inFlight": worker.in_flight,
            },
            "waiting": self._waiting(),
            "deadLetters": {"total": sum(dead.values()), "byKind": dead},
            "engine": {
                "builds": worker.engine_builds,
                "nodesRebuilt": worker.engine_nodes_rebuilt,
                "warmUps": worker.warmer.runs,
            },
            "reserve": worker.reserve_status,
            "lastDecisionAt": rfc3339(worker.last_decision_at),
        }
