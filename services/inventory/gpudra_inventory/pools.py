"""One pool per node: the node's latest inventory turned into ResourceSlices, with a generation.

Promises of `PoolBook`:
- `update` returns the slices to write (all of the pool, every one carrying the new generation) and
  the names of stale slices to delete, or nothing when the pool's content did not change — so the
  generation grows by exactly one per real change (heartbeats change nothing) and never goes
  backwards across restarts (`load` starts from what the bucket holds).
- A node marked unreachable keeps its devices, each tainted `<driver>/unhealthy` NoSchedule (the
  node-agent's health taints stay as they are); marking it reachable again removes that taint.
- A heartbeat is a NodeInventory equal to the last one except for `observed_at`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from gpudra_slices import SliceOptions, build_slices
from gpudrapb.v1 import inventory_pb2 as pb

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


def _signature(inventory: pb.NodeInventory) -> bytes:
    copy_ = pb.NodeInventory()
    copy_.CopyFrom(inventory)
    copy_.ClearField("observed_at")
    return copy_.SerializeToString(deterministic=True)


class PoolBook:
    def __init__(self, options: SliceOptions) -> None:
        self._options = options
        self.pools: dict[str, PoolState] = {}

    def load(self, slices: list[dict[str, Any]]) -> None:
        """Adopt the slices a bucket (or the API) already holds, so generations continue."""
        for s in slices:
            spec = s.get("spec", {})
            node = spec.get("nodeName") or spec.get("pool", {}).get("name")
            if not isinstance(node, str) or spec.get("driver") != self._options.driver:
                continue
            state = self.pools.setdefault(node, PoolState(node))
            state.generation = max(state.generation, int(spec["pool"].get("generation", 0)))
            state.slices[s["metadata"]["name"]] = s

    def is_heartbeat(self, inventory: pb.NodeInventory) -> bool:
        state = self.pools.get(inventory.node)
        return (
            state is not None
            and state.inventory is not None
            and _signature(state.inventory) == _signature(inventory)
        )

    def observe(self, inventory: pb.NodeInventory, seen_at: float) -> Change | None:
        """A snapshot or heartbeat arrived (published at `seen_at`, epoch seconds)."""
        state = self.pools.setdefault(inventory.node, PoolState(inventory.node))
        state.last_seen = max(state.last_seen, seen_at)
        heartbeat = self.is_heartbeat(inventory)
        state.inventory = inventory
        if heartbeat and not state.unreachable:
            return None
        state.unreachable = False
        return self._rebuild(state)

    def expire(self, now: float, timeout: float) -> list[Change]:
        """Taint every node whose last inventory is older than `timeout`."""
        changes = []
        for state in self.pools.values():
            if state.inventory is None or state.unreachable or now - state.last_seen <= timeout:
                continue
            state.unreachable = True
            state.unreachable_since = now
            change = self._rebuild(state)
            if change is not None:
                changes.append(change)
        return changes

    def _rebuild(self, state: PoolState) -> Change | None:
        assert state.inventory is not None
        inventory = state.inventory
        if state.unreachable:
            inventory = _tainted(inventory, state.unreachable_since)
        built = build_slices(inventory, replace(self._options, generation=state.generation))
        fresh = {s["metadata"]["name"]: s for s in built}
        if state.slices and _content(fresh) == _content(state.slices):
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
