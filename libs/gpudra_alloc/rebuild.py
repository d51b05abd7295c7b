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

The change itself is found at C speed (identity comparisons from both ends of the two slice
lists, then id sets over the window that differs: one slice replaced in place, added at the end
or removed costs a few microseconds per 1,000 slices), and the new allocator is the old one's
indexes with the changed nodes' and pools' entries redone (`Allocator.updated`), the node list
kept while no node came or went, and the caches of the untouched nodes carried over
(`Allocator.carry_over`): a one-node change costs that node plus copies of a few dicts. When
the kept slices moved relative to each other, a new allocator is built over all slices and
compared pool by pool (slower, still exact). Classes, features and the CEL programs are the old
allocator's: a caller whose classes or features changed builds a new `Allocator` instead. The
result answers every question exactly as `Allocator(classes, slices, features, state)` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress, count

from gpudra_alloc.allocator import Allocator, common_ends
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
    state = state if state is not None else old.state
    now = list(slices)
    change = slice_change(old.slices, now)
    if change is None:  # the same slices in another order: pool by pool
        new = Allocator(
            old.classes.values(), now, old.features, state, old.selectors, old.timeout_s
        )
        touched = _touched_by_pool(old, new)
        if touched is not None:
            new.carry_over(old, touched)
        return Rebuilt(new, touched)
    removed, added = change
    touched = _touched(old, removed, [s for _, s in added])
    if touched is None:
        return Rebuilt(
            Allocator(old.classes.values(), now, old.features, state, old.selectors, old.timeout_s),
            None,
        )
    new = old.updated(now, removed, added, state)
    new.carry_over(old, touched)
    return Rebuilt(new, touched)


def slice_change(
    old: list[ResourceSlice], new: list[ResourceSlice]
) -> tuple[list[ResourceSlice], list[tuple[int, ResourceSlice]]] | None:
    """(the slices of `old` not in `new`, the slices of `new` not in `old` with their positions
    in `new`), compared by identity; None when the slices in both are not in the same relative
    order. Everything runs at C speed; only the window between the longest common head and
    tail is looked at item by item (small for a slice replaced in place, appended or
    removed)."""
    head, tail = common_ends(old, new)
    was = old[head : len(old) - tail]
    now = new[head : len(new) - tail]
    if not was and not now:
        return [], []
    was_ids = set(map(id, was))
    now_ids = set(map(id, now))
    if list(filter(now_ids.__contains__, map(id, was))) != list(
        filter(was_ids.__contains__, map(id, now))
    ):
        return None
    gone = was_ids - now_ids
    removed = list(compress(was, map(gone.__contains__, map(id, was))))
    fresh = list(map((now_ids - was_ids).__contains__, map(id, now)))
    added = list(zip(compress(count(head), fresh), compress(now, fresh), strict=True))
    return removed, added


def _touched(
    old: Allocator, removed: list[ResourceSlice], added: list[ResourceSlice]
) -> frozenset[str] | None:
    """The nodes whose pools may differ after `removed` went and `added` came; None when that
    may be any node (a changed pool with a slice that does not name its node)."""
    touched: set[str] = set()
    pools: set[tuple[str, str]] = set()
    for s in (*removed, *added):
        if not s.node_name:
            return None
        touched.add(s.node_name)
        pools.add((s.driver, s.pool.name))
    by_pool = old.pool_slices()  # kept up to date by `Allocator.updated` after the first
    for key in pools:  # the pools' unchanged slices on other nodes (a pool may span nodes)
        for s in by_pool.get(key, ()):
            if not s.node_name:
                return None
            touched.add(s.node_name)
    return frozenset(touched)


def touched_nodes(old: Allocator, new: Allocator) -> frozenset[str] | None:
    """The nodes whose pools may differ between `old` and `new`; None when that may be any node
    (a changed pool with a slice that does not name its node)."""
    change = slice_change(old.slices, new.slices)
    if change is None:  # the same slices in another order: pool by pool
        return _touched_by_pool(old, new)
    removed, added = change
    return _touched(old, removed, [s for _, s in added])


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
