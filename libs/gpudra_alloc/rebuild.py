"""An allocator for new slices, built from the one for the old slices: only what changed is redone.

`Allocator.pools_for(node)` reads, of the slices, only those of the pools (driver, pool name)
that have a slice relevant to the node, and of each such pool all of its slices in the order
given (a pool may span slices and nodes: `gather_pools` counts them against
`resourceSliceCount` and keeps the highest generation). So a node's pools can change only when
the slices of one of those pools changed: a slice added, removed, replaced, or the order of a
pool's slices moved. `rebuild` compares the old and the new slices pool by pool, by identity (the
slice index parses a changed object anew and keeps the unchanged ones; `ResourceSlice` compares
by identity too), and:

- a pool whose slices all name one node (`nodeName`) touches the nodes those slices name, before
  and after the change; the other nodes' pools are carried over as they are (the same objects:
  the placement layer's per-node keys and remembered scores rest on that, `groups.NodeKeys`);
- a changed pool with a slice that does not name its node (`nodeSelector`, `allNodes`,
  per-device node selection) may be relevant to any node: everything is recomputed.

What the allocator caches besides (the node list, the full-node memo, the pools by node) is
rebuilt as in a new allocator. Classes, features and the CEL programs are the old allocator's:
a caller whose classes or features changed builds a new `Allocator` instead. The result answers
every question exactly as `Allocator(classes, slices, features, state)` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.state import AllocatedState
from gpudra_api import ResourceSlice


@dataclass(frozen=True)
class Rebuilt:
    """The new allocator and the nodes whose per-node state it recomputes (None: all)."""

    allocator: Allocator
    touched: frozenset[str] | None


def rebuild(
    old: Allocator, slices: Iterable[ResourceSlice], state: AllocatedState | None = None
) -> Rebuilt:
    """An allocator for `slices` (and `state`; None: the old one's) with the old allocator's
    classes, features and selectors, reusing the old one's pools of every node no change touched."""
    new = Allocator(
        old.classes.values(),
        slices,
        old.features,
        state if state is not None else old.state,
        old.selectors,
        old.timeout_s,
    )
    touched = touched_nodes(old, new)
    if touched is not None:
        new.carry_over(old, touched)
    return Rebuilt(new, touched)


def touched_nodes(old: Allocator, new: Allocator) -> frozenset[str] | None:
    """The nodes whose pools may differ between `old` and `new`; None when that may be any node
    (a changed pool with a slice that does not name its node)."""
    old_slices, new_slices = old.slices, new.slices
    old_ids = {id(s) for s in old_slices}
    new_ids = {id(s) for s in new_slices}
    kept = [s for s in new_slices if id(s) in old_ids]
    if any(
        a is not b for a, b in zip(kept, [s for s in old_slices if id(s) in new_ids], strict=True)
    ):
        return _touched_by_pool(old, new)  # the same slices in another order: pool by pool
    changed = [s for s in old_slices if id(s) not in new_ids]
    changed += (s for s in new_slices if id(s) not in old_ids)
    if any(not s.node_name for s in changed):
        return None
    pools = {(s.driver, s.pool.name) for s in changed}
    names = {name for _, name in pools}
    touched = {s.node_name for s in changed}
    # the pools' unchanged slices on other nodes (a pool may span nodes): those nodes read them
    for s in kept:
        if s.pool.name in names and (s.driver, s.pool.name) in pools:
            if not s.node_name:
                return None
            touched.add(s.node_name)
    return frozenset(n for n in touched if n)


def _touched_by_pool(old: Allocator, new: Allocator) -> frozenset[str] | None:
    """`touched_nodes` comparing each pool's slices in order (slower: builds both pool maps)."""
    before = old.pool_slices()
    after = new.pool_slices()
    touched: set[str] = set()
    for key in before.keys() | after.keys():
        was = before.get(key, [])
        now = after.get(key, [])
        if len(was) == len(now) and all(a is b for a, b in zip(was, now, strict=True)):
            continue
        for s in (*was, *now):
            if not s.node_name:
                return None
            touched.add(s.node_name)
    return frozenset(touched)
