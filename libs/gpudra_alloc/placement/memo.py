"""Memo of topology scores: a node in a state already scored scores the same again.

The topology policy runs the allocator's search on every feasible node for every claim, but a
claim changes one node, or a few, and a fleet is many copies of a few machine types.
`ScoreMemo` remembers the best score the search's solutions gave for a claim *shape* (requests,
constraints and configuration of each claim, not its name) on a node *key* (`groups.NodeKeys`:
the node's pools up to names, the shape's selector outcomes on them, the in-use state of those
pools by device name, the domains the reserve holds there). Equal keys score equally, so the
score is reused for every node with that key, the same node later or its identical twin; a
changed key misses.

Only the score (cost, GPUs left, solution index) is reused, never devices or results: names and
share IDs differ, so the winner's results are always recomputed by the search on the real node
for the real claims (`Chooser.choose` checks the recomputed score equals the remembered one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from gpudra_api import ResourceClaim

MAX_SHAPES = 1024  # distinct claim shapes interned at once
MAX_SCORES = 200_000  # remembered (node key, shape) scores before they are all dropped

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
class ScoreMemo:
    """Remembered best scores per (node key, claim shape); see the module docstring."""

    scores: dict[tuple[Hashable, Shape], Remembered] = field(default_factory=dict)
    shapes: dict[Shape, Shape] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def intern(self, shape: Shape) -> Shape:
        """The remembered `Shape` equal to `shape` (later lookups then compare by identity)."""
        if len(self.shapes) >= MAX_SHAPES:
            self.shapes.clear()
        return self.shapes.setdefault(shape, shape)

    def get(self, key: Hashable, shape: Shape) -> tuple[bool, Remembered]:
        """(found, remembered score) for `shape` on a node whose key is `key`."""
        entry = (key, shape)
        if entry in self.scores:
            self.hits += 1
            return True, self.scores[entry]
        self.misses += 1
        return False, None

    def put(self, key: Hashable, shape: Shape, remembered: Remembered) -> None:
        if len(self.scores) >= MAX_SCORES:
            self.scores.clear()  # states move on; old ones are rarely met again
        self.scores[(key, shape)] = remembered

    def clear(self) -> None:
        self.scores.clear()
