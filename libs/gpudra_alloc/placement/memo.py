"""Per-node memo of topology scores: a node whose state did not change scores the same again.

The topology policy runs the allocator's search on every feasible node for every claim, but a
claim changes one node, or a few. `ScoreMemo` remembers, per node, the best score the search's
solutions gave for a claim *shape* (requests, constraints and configuration of each claim, not
its name) under the node's in-use state (the exclusively used devices, shares and consumed
capacity of the node's pools) and the pools the allocator sees from the node (the same objects
until the slices change). A changed key misses; nothing is reused across a different state.

Only the score (cost, GPUs left, solution index) is reused, never devices or results: share IDs
are derived from the claim itself, so the winner's results are always recomputed by the search
for the real claims (`Chooser.choose` checks the recomputed score equals the remembered one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from gpudra_alloc.pools import Pool
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import Node, ResourceClaim

MAX_SHAPES = 1024  # distinct claim shapes interned at once
MAX_SHAPES_PER_NODE = 64  # a node's memo is dropped when it holds more claim shapes than this

PoolKey = tuple[str, str]  # (driver, pool)
# (cost, GPUs left, solution index) of the node's best solution, or None: nothing fits
Remembered = tuple[float, int, int] | None


class Shape:
    """What the search reads of some claims, hashed once (nested dataclasses hash slowly)."""

    __slots__ = ("value", "digest")

    def __init__(self, value: Hashable) -> None:
        self.value = value
        self.digest = hash(value)

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Shape):
            return NotImplemented
        return self.digest == other.digest and self.value == other.value


def claims_shape(claims: Sequence[ResourceClaim]) -> Shape | None:
    """What the search reads of the claims, as a dict key; None when it is not hashable."""
    try:
        return Shape(tuple((c.requests, c.constraints, c.config) for c in claims))
    except TypeError:
        return None


@dataclass
class StateIndex:
    """One in-use state grouped by pool, so each node's part is found without a full scan."""

    devices: dict[PoolKey, frozenset[DeviceID]]
    shared: dict[PoolKey, frozenset[tuple[DeviceID, str]]]
    capacity: dict[PoolKey, tuple[tuple[DeviceID, tuple[tuple[str, object], ...]], ...]]

    @classmethod
    def of(cls, state: AllocatedState) -> StateIndex:
        devices: dict[PoolKey, set[DeviceID]] = {}
        for device in state.devices:
            devices.setdefault((device.driver, device.pool), set()).add(device)
        shared: dict[PoolKey, set[tuple[DeviceID, str]]] = {}
        for item in state.shared:
            shared.setdefault((item[0].driver, item[0].pool), set()).add(item)
        capacity: dict[PoolKey, list[tuple[DeviceID, tuple[tuple[str, object], ...]]]] = {}
        for device, amounts in state.capacity.items():
            # present even when empty: `is_allocated` reads presence
            entry = tuple(sorted(amounts.items(), key=lambda item: item[0]))
            capacity.setdefault((device.driver, device.pool), []).append((device, entry))
        return cls(
            {k: frozenset(v) for k, v in devices.items()},
            {k: frozenset(v) for k, v in shared.items()},
            {k: tuple(sorted(v, key=lambda e: str(e[0]))) for k, v in capacity.items()},
        )

    def pools_key(self, pools: Sequence[PoolKey]) -> Hashable:
        """The in-use state of `pools` (devices, shares, capacity): equal keys, equal state."""
        empty: frozenset[DeviceID] = frozenset()
        return tuple(
            (
                self.devices.get(key, empty),
                self.shared.get(key, frozenset()),
                self.capacity.get(key, ()),
            )
            for key in pools
        )

    def node_key(self, pools: Sequence[Pool]) -> Hashable:
        """The in-use state of `pools` (a node's): equal keys, equal state."""
        empty: frozenset[DeviceID] = frozenset()
        parts = []
        for pool in pools:
            key = (pool.driver, pool.name)
            parts.append(
                (
                    self.devices.get(key, empty),
                    self.shared.get(key, frozenset()),
                    self.capacity.get(key, ()),
                )
            )
        return tuple(parts)


@dataclass
class _NodeEntry:
    pools: list[Pool]  # held so that the identity check below cannot match a reused id
    node: Node
    state_key: Hashable
    scores: dict[Shape, Remembered] = field(default_factory=dict)


@dataclass
class ScoreMemo:
    """Remembered best scores per node, valid while the node's pools and state are unchanged."""

    entries: dict[str, _NodeEntry] = field(default_factory=dict)
    shapes: dict[Shape, Shape] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def intern(self, shape: Shape) -> Shape:
        """The remembered `Shape` equal to `shape` (later lookups then compare by identity)."""
        if len(self.shapes) >= MAX_SHAPES:
            self.shapes.clear()
        return self.shapes.setdefault(shape, shape)

    def get(
        self, node: Node, pools: list[Pool], state_key: Hashable, shape: Shape
    ) -> tuple[bool, Remembered]:
        """(found, remembered score) for `shape` on `node` in this state."""
        entry = self.entries.get(node.name)
        if (
            entry is None
            or entry.pools is not pools
            or (entry.node is not node and entry.node != node)
            or entry.state_key != state_key
            or shape not in entry.scores
        ):
            self.misses += 1
            return False, None
        self.hits += 1
        return True, entry.scores[shape]

    def put(
        self,
        node: Node,
        pools: list[Pool],
        state_key: Hashable,
        shape: Shape,
        remembered: Remembered,
    ) -> None:
        entry = self.entries.get(node.name)
        if (
            entry is None
            or entry.pools is not pools
            or (entry.node is not node and entry.node != node)
            or entry.state_key != state_key
            or len(entry.scores) >= MAX_SHAPES_PER_NODE
        ):
            entry = _NodeEntry(pools, node, state_key)
            self.entries[node.name] = entry
        entry.scores[shape] = remembered

    def clear(self) -> None:
        self.entries.clear()
