"""One pool per node: the node's latest inventory turned into ResourceSlices, with a generation.

Promises of `PoolBook`:
- `update` returns the slices to write (all of the pool, every one carrying the new generation) and
  the names of stale slices to delete, or nothing when the pool's content did not change — so the
  generation grows by exactly one per real change (heartbeats change nothing) and never goes
  backwards across restarts (`load` starts from what the bucket holds).
- A node marked unreachable keeps its devices, each tainted `<driver>/unhealthy` NoSchedule (the
  node-agent's health taints stay as they are); marking it reachable again removes that taint.
  The taint's timeAdded is when the heartbeats became overdue (last inventory + timeout, on the
  server's clock), so every replica, and one restarted later, publishes the same taint.
- A heartbeat is a NodeInventory equal to the last one except for `observed_at`.
- Node-agents number their inventories (`generation`, growing across their restarts). One with a
  lower generation than the pool's inventory (an old agent still running beside its successor
  during a rolling update) is ignored, and is no heartbeat either, as long as the pool is not
  marked unreachable: once the newer publisher has been silent for the timeout, a lower
  generation is taken (an agent that lost its stored generation starts again at 1). Generation 0
  means unnumbered and is always taken.
- An inventory that cannot be sliced raises `SliceError` and leaves the pool as it was (no pool
  at all when there was none: a bad node name does not become a pool).
- `adopt` (a new leader taking over) rebuilds every pool it has an inventory for with a generation
  strictly above the one the bucket holds.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from gpudra_slices import SliceError, SliceOptions, build_slices
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

UNREACHABLE_MESSAGE = "node-agent heartbeat missed"


@dataclass
class PoolState:
    node: str
    generation: int = 0
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    inventory: pb.NodeInventory | None = None
    last_seen: float = 0.0
    unreachable: bool = False
    unreachable_since: float = 0.0


@dataclass(frozen=True)
class Change:
    node: str
    generation: int
    write: list[dict[str, Any]]
    delete: list[str]


def _content(slices: dict[str, dict[str, Any]]) -> str:
    """The pool's content with the generation left out (what decides 'changed')."""
    stripped = []
    for name in sorted(slices):
        s = copy.deepcopy(slices[name])
        s.get("spec", {}).get("pool", {}).pop("generation", None)
        stripped.append(s)
    return json.dumps(stripped, sort_keys=True)


def node_of(s: dict[str, Any]) -> str | None:
    """The node whose pool a slice belongs to (None for what is not one of our slices)."""
    spec = s.get("spec") if isinstance(s, dict) else None
    if not isinstance(spec, dict) or not isinstance(s.get("metadata"), dict):
        return None
    pool = spec.get("pool")
    node = spec.get("nodeName") or (pool.get("name") if isinstance(pool, dict) else None)
    return node if isinstance(node, str) and node else None


def _generation(named: dict[str, dict[str, Any]]) -> int:
    return max(
        (int(s["spec"].get("pool", {}).get("generation", 0)) for s in named.values()), default=0
    )


def _superseded(state: PoolState, inventory: pb.NodeInventory) -> bool:
    """Whether `inventory` is older than the pool's, whose publisher is still heard."""
    current = state.inventory
    return (
        current is not None
        and not state.unreachable
        and 0 < inventory.generation < current.generation
    )


def _signature(inventory: pb.NodeInventory) -> bytes:
    copy_ = pb.NodeInventory()
    copy_.CopyFrom(inventory)
    copy_.ClearField("observed_at")
    return copy_.SerializeToString(deterministic=True)


class PoolBook:
    def __init__(self, options: SliceOptions) -> None:
        self._options = options
        self.pools: dict[str, PoolState] = {}

    def _ours(self, slices: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
        """Our driver's slices by node and name."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for s in slices:
            node = node_of(s)
            if node is None or s["spec"].get("driver") != self._options.driver:
                continue
            out.setdefault(node, {})[s["metadata"]["name"]] = s
        return out

    def load(self, slices: list[dict[str, Any]]) -> None:
        """Adopt the slices a bucket (or the API) already holds, so generations continue."""
        for node, named in self._ours(slices).items():
            state = self.pools.setdefault(node, PoolState(node))
            state.generation = max(state.generation, _generation(named))
            state.slices.update(named)

    def adopt(self, written: list[dict[str, Any]]) -> list[Change]:
        """Take over from another writer, whose slices (`written`) are what the bucket holds.

        Every pool with an inventory is rebuilt with the generation after the bucket's (1 for a
        pool the bucket lacks), so readers see the new writer's pools as newer than anything
        written before, even where the content is the same; its change deletes the bucket's
        slices of that node it no longer has. What the book counted while it did not write never
        reached a reader and does not count. Pools known only from the bucket are adopted as
        they are (no change).
        """
        theirs = self._ours(written)
        changes = []
        for node in sorted(set(theirs) | set(self.pools)):
            state = self.pools.setdefault(node, PoolState(node))
            named = theirs.get(node, {})
            state.slices = dict(named)
            if state.inventory is None:
                state.generation = max(state.generation, _generation(named))
            else:
                state.generation = _generation(named)
                change = self._rebuild(state, force=True)
                assert change is not None
                changes.append(change)
        return changes

    def is_heartbeat(self, inventory: pb.NodeInventory) -> bool:
        state = self.pools.get(inventory.node)
        return (
            state is not None
            and state.inventory is not None
            and _signature(state.inventory) == _signature(inventory)
        )

    def observe(self, inventory: pb.NodeInventory, seen_at: float) -> Change | None:
        """A snapshot or heartbeat arrived (published at `seen_at`, epoch seconds)."""
        known = inventory.node in self.pools
        state = self.pools.setdefault(inventory.node, PoolState(inventory.node))
        if _superseded(state, inventory):
            log.info(
                "node %s: inventory generation %d ignored, generation %d is newer",
                inventory.node,
                inventory.generation,
                state.inventory.generation if state.inventory is not None else 0,
            )
            return None
        heartbeat = self.is_heartbeat(inventory)
        if heartbeat and not state.unreachable:
            state.last_seen = max(state.last_seen, seen_at)
            state.inventory = inventory
            return None
        # An inventory that cannot be sliced (SliceError) leaves the pool as it was.
        before = (state.inventory, state.unreachable)
        state.inventory, state.unreachable = inventory, False
        try:
            change = self._rebuild(state)
        except SliceError:
            state.inventory, state.unreachable = before
            if not known:
                del self.pools[inventory.node]  # never published: no pool (bad names pile up)
            raise
        state.last_seen = max(state.last_seen, seen_at)
        return change

    def expire(self, now: float, timeout: float, not_before: float = float("-inf")) -> list[Change]:
        """Taint every node whose last inventory is older than `timeout`, silence counted from
        `not_before` at the earliest (when the bus came back after the nodes could not publish)."""
        changes = []
        for state in self.pools.values():
            silent_since = max(state.last_seen, not_before)
            if state.inventory is None or state.unreachable or now - silent_since <= timeout:
                continue
            state.unreachable = True
            # Dated when the heartbeats became overdue, not when this replica noticed: every
            # replica (and one restarted later) then publishes the same taint timeAdded.
            state.unreachable_since = silent_since + timeout
            change = self._rebuild(state)
            if change is not None:
                changes.append(change)
        return changes

    def _rebuild(self, state: PoolState, *, force: bool = False) -> Change | None:
        assert state.inventory is not None
        inventory = state.inventory
        if state.unreachable:
            inventory = _tainted(inventory, state.unreachable_since)
        built = build_slices(inventory, replace(self._options, generation=state.generation))
        fresh = {s["metadata"]["name"]: s for s in built}
        if not force and state.slices and _content(fresh) == _content(state.slices):
            return None
        state.generation += 1
        for s in built:
            s["spec"]["pool"]["generation"] = state.generation
        stale = sorted(set(state.slices) - set(fresh))
        state.slices = fresh
        return Change(state.node, state.generation, built, stale)


def _tainted(inventory: pb.NodeInventory, since: float) -> pb.NodeInventory:
    out = pb.NodeInventory()
    out.CopyFrom(inventory)
    stamp = Timestamp()
    stamp.FromSeconds(int(since))
    for device in out.devices:
        condition = device.health.add()
        condition.kind = pb.HealthCondition.KIND_UNSPECIFIED
        condition.message = UNREACHABLE_MESSAGE
        condition.since.CopyFrom(stamp)
    return out
