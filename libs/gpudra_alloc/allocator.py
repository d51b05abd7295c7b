"""The allocator front: cluster state in, per-node decisions out.

`Allocator` holds the classes, an index of slices by node, and what is in use; `allocate` runs
Kubernetes' search for one node (what kube-scheduler's filter asks), `choose_node` tries nodes in
order until one fits (first-fit placement), and `candidates` yields several solutions for one node
in Kubernetes' order so that a placement layer can score them.
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from gpudra_alloc.features import Features
from gpudra_alloc.pools import Pool, entries_of, gather_pools
from gpudra_alloc.search import Search, SearchTimeout
from gpudra_alloc.selection import Selectors
from gpudra_alloc.state import AllocatedState, DeviceID, InUseDevices
from gpudra_api import AllocationResult, DeviceClass, Node, ResourceClaim, ResourceSlice

# kube-scheduler's default DRA filter timeout: one node's search may not take longer.
DEFAULT_TIMEOUT_S = 10.0
# `_free_devices` of a node with a shareable device: no count of devices tells it is too full
_UNBOUNDED = sys.maxsize
# Node lists that differ in at most this many nodes (a node joined or left) are edits of each
# other: what is remembered per node of the one carries over to the other (`choose_node`).
MAX_EDIT = 64

T = TypeVar("T")


@dataclass
class _KnownFull:
    """Nodes of `nodes` that had too few free devices, by name, valid up to the point where the
    removal log was `log_seen` long. By name, not position: a node list that differs by a node
    that joined or left keeps the others' entries (`choose_node`); the node object is kept so
    that another node of the same name (other labels) is not taken for it."""

    nodes: list[Node]
    full: dict[str, Node] = field(default_factory=dict)
    log_seen: int = -1


@dataclass
class NodeOutcome:
    """What one node said: results (allocated), or none with the reason and the progress made."""

    node: Node
    results: list[AllocationResult] | None
    reason: str = ""
    closest: int = 0
    search: Search | None = field(default=None, repr=False)


class Allocator:
    def __init__(
        self,
        classes: Iterable[DeviceClass],
        slices: Iterable[ResourceSlice],
        features: Features | None = None,
        state: AllocatedState | None = None,
        selectors: Selectors | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.features = features or Features()
        self.timeout_s = timeout_s
        self.state = state or AllocatedState()
        self.selectors = selectors or Selectors(self.features)
        self.classes = {c.name: c for c in classes}
        self.slices: list[ResourceSlice] = []
        self.by_node: dict[str, list[ResourceSlice]] = {}
        self.shared: list[ResourceSlice] = []
        self._pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        self._node_names: list[str] | None = None
        # exclusive devices needed -> which nodes of one list are known to be too full
        self._known_full: dict[int, _KnownFull] = {}
        self._slice_generation = 0
        self._free: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[tuple[int, ...], int]] = {}
        self._pools_by_node: dict[tuple[str, str], set[str]] | None = None
        self._by_pool: dict[tuple[str, str], list[ResourceSlice]] | None = None
        self._labelled = False  # whether a node with labels was asked about (`carry_over`)
        # `add_slice` for each, without emptying the (still empty) caches every time
        by_node = self.by_node
        for s in slices:
            self.slices.append(s)
            if s.node_name:
                if s.node_name in by_node:
                    by_node[s.node_name].append(s)
                else:
                    by_node[s.node_name] = [s]
            else:
                self.shared.append(s)
        self._slice_generation = len(self.slices)

    def add_slice(self, s: ResourceSlice) -> None:
        self.slices.append(s)
        # new lists: an allocator from `updated` shares them with the one it came from
        if s.node_name:
            self.by_node[s.node_name] = [*self.by_node.get(s.node_name, ()), s]
        else:
            self.shared = [*self.shared, s]
        self._pools.clear()
        self._node_names = None
        self._known_full.clear()
        self._free.clear()
        self._pools_by_node = None
        self._by_pool = None
        self._slice_generation += 1

    def node_names(self) -> list[str]:
        """Nodes the slices name, sorted: the candidates when a problem lists none."""
        if self._node_names is None:
            names = set(self.by_node)
            for s in self.shared:
                for d in s.devices:
                    if d.node_name:
                        names.add(d.node_name)
            self._node_names = sorted(names)
        return self._node_names

    def pools_for(self, node: Node) -> list[Pool]:
        """Pools as seen from `node`; cached until the slices change."""
        key = (node.name, tuple(sorted(node.labels.items())))
        pools = self._pools.get(key)
        if pools is None:
            if key[1]:
                self._labelled = True
            candidates = self.by_node.get(node.name, []) + self.shared
            pools = gather_pools(candidates, node, self.features, self.slices)
            self._pools[key] = pools
        return pools

    def pool_slices(self) -> dict[tuple[str, str], list[ResourceSlice]]:
        """(driver, pool) -> its slices in the order given, whatever node they name: everything
        `pools_for` reads of the slices about one pool (kept until the slices change)."""
        if self._by_pool is None:
            found: dict[tuple[str, str], list[ResourceSlice]] = {}
            for s in self.slices:
                found.setdefault((s.driver, s.pool.name), []).append(s)
            self._by_pool = found
        return self._by_pool

    def updated(
        self,
        slices: list[ResourceSlice],
        removed: list[ResourceSlice],
        added: list[tuple[int, ResourceSlice]],
        state: AllocatedState,
    ) -> Allocator:
        """A new allocator (same classes, features and selectors) for `slices` and `state`: these
        slices less `removed`, plus `added` (each with its position in `slices`), every other
        one in the same relative order. The caller (`rebuild.rebuild`) vouches for that, and
        that every removed or added slice names its node and belongs to a pool none of whose
        slices is shared. Costs what the change touched: the indexes by node and by pool and
        the node list move over from this allocator, with the changed nodes' and pools' entries
        redone; no cache is taken yet (`carry_over` does that, and then retires this one)."""
        new = Allocator(
            self.classes.values(), (), self.features, state, self.selectors, self.timeout_s
        )
        new.slices = slices
        new.shared = self.shared  # unchanged: no shared slice was removed or added
        new._slice_generation = len(slices)
        gone = {id(s) for s in removed}
        positions = _Positions(slices)
        by_node = self.by_node
        nodes = {s.node_name for s in removed if s.node_name}  # all of them: see above
        nodes.update(s.node_name for _, s in added if s.node_name)
        moved = [name for name in nodes if name not in by_node]  # nodes that come
        for name in nodes:
            merged = _merged(by_node.get(name, ()), gone, added, name, _node_of, positions)
            if merged:
                by_node[name] = merged
            else:
                by_node.pop(name, None)
                moved.append(name)  # a node that goes
        new.by_node = by_node
        if self._by_pool is not None:
            by_pool = self._by_pool
            pools = {(s.driver, s.pool.name) for s in removed}
            pools.update((s.driver, s.pool.name) for _, s in added)
            for key in pools:
                merged = _merged(by_pool.get(key, ()), gone, added, key, _pool_of, positions)
                if merged:
                    by_pool[key] = merged
                else:
                    by_pool.pop(key, None)
            new._by_pool = by_pool
            if self._pools_by_node is not None:  # the changed pools are node-local
                pool_nodes = self._pools_by_node
                for key in pools:
                    if key in by_pool:
                        pool_nodes[key] = {s.node_name for s in by_pool[key] if s.node_name}
                    else:
                        pool_nodes.pop(key, None)
                new._pools_by_node = pool_nodes
        if self._node_names is not None:
            # the same list object while no node came or went (callers key memos on it)
            names = new._node_names = self._node_names
            elsewhere: set[str] | None = None  # nodes that shared slices name per device
            for name in moved:
                at = bisect.bisect_left(names, name)
                present = at < len(names) and names[at] == name
                if name in by_node and not present:
                    names = new._node_names = names[:] if names is self._node_names else names
                    names.insert(at, name)
                elif name not in by_node and present:
                    if elsewhere is None:
                        elsewhere = {
                            d.node_name for s in self.shared for d in s.devices if d.node_name
                        }
                    if name not in elsewhere:
                        names = new._node_names = names[:] if names is self._node_names else names
                        del names[at]
        return new

    def carry_over(self, old: Allocator, touched: Collection[str]) -> None:
        """Take `old`'s pools of every node not named in `touched`, and under the same state its
        free-device counts of them and the nodes it knows to be too full: the caller
        (`rebuild.rebuild`) vouches that those nodes' pools read only slices both allocators
        share, in the same order, for the same classes and features. The caches move over
        (costs what `touched` names, unless `old` was asked about nodes with labels: then
        every cached entry is looked at) and `old` is retired: it must not be used again (its
        classes, features, selectors and state stay readable)."""
        self._labelled = self._labelled or old._labelled
        same_state = old.state is self.state
        if old._labelled:
            pools = {key: pools for key, pools in old._pools.items() if key[0] not in touched}
            free = {key: free for key, free in old._free.items() if key[0] not in touched}
        else:  # every key is (node name, ())
            pools, free = old._pools, old._free
            for name in touched:
                pools.pop((name, ()), None)
                free.pop((name, ()), None)
        pools.update(self._pools)
        self._pools = pools
        if same_state:
            free.update(self._free)
            self._free = free
            for need, known in old._known_full.items():
                if need in self._known_full:
                    continue
                for name in touched:  # a touched node may have more free devices now
                    known.full.pop(name, None)
                self._known_full[need] = known
        old._retire()

    def _retire(self) -> None:
        """Give up the slices, indexes and caches (another allocator owns them now): any use
        but reading the classes, features, selectors and state fails."""
        del self.slices, self.by_node, self.shared, self._pools, self._free
        del self._known_full, self._by_pool, self._pools_by_node, self._node_names

    def _search(
        self, node: Node, claims: list[ResourceClaim], state: AllocatedState | None
    ) -> Search:
        search = Search(
            self.features,
            state if state is not None else self.state,
            self.selectors,
            node,
            self.pools_for(node),
            claims,
            self.classes,
        )
        search.prepare()
        return search

    def allocate(
        self, node: Node, claims: list[ResourceClaim], state: AllocatedState | None = None
    ) -> NodeOutcome:
        """Kubernetes' Allocate for one node; raises AllocationInputError for invalid input.

        `state` is what is in use (None: the allocator's own `state`). A placement layer may pass
        a stricter one (more devices in use) to steer the search: validity is monotone in the
        in-use set, so a solution under it is valid under the real state too."""
        if not claims:
            return NodeOutcome(node, [])
        search = self._search(node, claims, state)
        if self.timeout_s is not None:
            search.deadline = time.monotonic() + self.timeout_s
        try:
            results = search.run()
        except SearchTimeout:
            # kube-scheduler gives up on the node the same way (DRASchedulerFilterTimeout)
            reason = f"timed out trying to allocate devices (after {self.timeout_s:g}s)"
            return NodeOutcome(node, None, reason, search.closest, search)
        if results is not None:
            return NodeOutcome(node, results, closest=search.closest, search=search)
        reason = "cannot allocate all claims"
        if search.has_invalid_pools():
            reason = "invalid resource pools were encountered"
        return NodeOutcome(node, None, reason, search.closest, search)

    def candidates(
        self,
        node: Node,
        claims: list[ResourceClaim],
        limit: int = 16,
        state: AllocatedState | None = None,
    ) -> Iterator[list[AllocationResult]]:
        """Up to `limit` solutions on `node`, in the order Kubernetes' search meets them (the
        first is `allocate`'s answer); `state` as for `allocate`. The search stops at the same
        timeout as `allocate`, with the solutions found until then."""
        found: list[list[AllocationResult]] = []

        def collect(results: list[AllocationResult]) -> bool:
            found.append(results)
            return len(found) >= limit

        search = self._search(node, claims, state)
        search.on_solution = collect
        if self.timeout_s is not None:
            search.deadline = time.monotonic() + self.timeout_s
        with contextlib.suppress(SearchTimeout):  # what was found until then stays valid
            search.run()
        yield from found

    def choose_node(self, nodes: list[Node], claims: list[ResourceClaim]) -> NodeOutcome | None:
        """The first node (in the given order) where all claims fit; otherwise the outcome of the
        node that came closest (most devices placed), or None when there are no nodes.

        A node with fewer free devices than the claims need at least is passed over without a
        search (it cannot fit), and remembered as such until one of its devices is released, so
        filling a cluster in order does not rescan full nodes. Keep the `nodes` list object the
        same between calls to benefit (a list that differs from the last one by up to
        `MAX_EDIT` nodes, one that joined or left, keeps what is known of the others). Invalid
        input raises AllocationInputError as `allocate` does, also when every node is passed over: Kubernetes' checks before the search do not
        depend on the node (with a positive `need` no request asks for "All" devices). A CEL
        run-time error is found only by a search, so one that only the devices of nodes passed
        over would raise is not raised (the answer is "unschedulable"; Kubernetes, which filters
        every node, would report the error), as for the nodes after the one chosen."""
        need = _exclusive_need(claims)
        if need and nodes:
            self._search(nodes[0], claims, None)  # `Search.prepare` raises what every node would
        best: NodeOutcome | None = None
        known = self._known_full.get(need) if need else None
        if need and (known is None or known.nodes is not nodes):
            known = _edited(known, nodes)
            self._known_full[need] = known
        full = self._refresh(known) if known is not None else {}
        for node in nodes:
            if full.get(node.name) is node:
                continue
            if need and self._free_devices(node) < need:
                full[node.name] = node
                if best is None:
                    best = NodeOutcome(node, None, "not enough free devices")
                continue
            outcome = self.allocate(node, claims)
            if outcome.results is not None:
                return outcome
            if best is None or outcome.closest > best.closest:
                best = outcome
        if best is None and nodes:
            best = NodeOutcome(nodes[-1], None, "not enough free devices")
        return best

    def _refresh(self, known: _KnownFull) -> dict[str, Node]:
        """Forget nodes that lost an in-use device since `known` was last brought up to date
        (all of them when that cannot be told)."""
        devices = self.state.devices
        if not isinstance(devices, InUseDevices):
            known.full.clear()
            return known.full
        log = devices.removal_log
        if known.log_seen < 0:
            known.full.clear()
        else:
            for key in log[known.log_seen :]:
                names = self._pool_nodes().get(key)
                if names is None:  # a pool that may serve any node
                    known.full.clear()
                    break
                for name in names:
                    known.full.pop(name, None)
        known.log_seen = len(log)
        return known.full

    def _pool_nodes(self) -> dict[tuple[str, str], set[str]]:
        """(driver, pool) -> the nodes its node-local slices name (pools of other slices are
        absent: they may serve any node)."""
        if self._pools_by_node is None:
            found: dict[tuple[str, str], set[str]] = {}
            for name, node_slices in self.by_node.items():
                for s in node_slices:
                    found.setdefault((s.driver, s.pool.name), set()).add(name)
            for s in self.shared:
                found.pop((s.driver, s.pool.name), None)
            self._pools_by_node = found
        return self._pools_by_node

    def _free_devices(self, node: Node) -> int:
        """Devices on the node's usable pools that are not exclusively in use: an upper bound of
        what the search could take. A shareable device makes it unbounded (`_UNBOUNDED`):
        Kubernetes does not mark one in use while allocating, so it may serve every request of
        the pod, one device counting for many. Cached per node until the in-use devices of one
        of its pools change."""
        pools = self.pools_for(node)
        state = self.state
        versions = tuple(state.pool_version(p.driver, p.name) for p in pools)
        key = (node.name, tuple(sorted(node.labels.items())) if node.labels else ())
        cached = self._free.get(key)
        if cached is not None and cached[0] == versions:
            return cached[1]
        free = _count_free(pools, state.devices, self.features.consumable_capacity)
        self._free[key] = (versions, free)
        return free


def _count_free(pools: list[Pool], in_use: Collection[DeviceID], shareable: bool) -> int:
    """`Allocator._free_devices` of these pools (`shareable`: the ConsumableCapacity feature)."""
    free = 0
    for pool in pools:
        if pool.incomplete or pool.invalid:
            continue
        for s in pool.slices:
            for entry in entries_of(s):
                if shareable and entry.device.allow_multiple_allocations:
                    return _UNBOUNDED
                if entry.id not in in_use:
                    free += 1
    return free


def _edited(known: _KnownFull | None, nodes: list[Node]) -> _KnownFull:
    """What is known of `nodes`: `known`'s full nodes when its list differs from `nodes` in at
    most `MAX_EDIT` nodes (by identity or equality: `_free_devices` reads a node's name and
    labels), less those of the differing ones (a node that left and joins again starts
    afresh); else nothing. Costs C-speed comparisons of the two lists."""
    if known is None:
        return _KnownFull(nodes)
    was = known.nodes
    head, tail = common_ends(was, nodes)
    if len(was) - head - tail > MAX_EDIT or len(nodes) - head - tail > MAX_EDIT:
        return _KnownFull(nodes)
    full = known.full
    for node in (*was[head : len(was) - tail], *nodes[head : len(nodes) - tail]):
        full.pop(node.name, None)
    known.nodes = nodes
    return known


def common_ends(old: list[T], new: list[T]) -> tuple[int, int]:
    """(head, tail): the lengths of the longest common head and, of the rest, the longest
    common tail of `old` and `new` (`old[:head] == new[:head]`, `old[len(old) - tail:] ==
    new[len(new) - tail:]`, head + tail at most the shorter length). Binary searches comparing
    runs whole: list equality skips identical items at C speed (equal but distinct items are
    compared with `==`), about twice the shorter length in items compared, no Python pass."""
    shortest = min(len(old), len(new))
    head = _common(old, new, shortest, _from_start)
    return head, _common(old, new, shortest - head, _from_end)


def _common(
    old: list[T], new: list[T], most: int, part: Callable[[list[T], int, int], list[T]]
) -> int:
    """How long the common run of `old` and `new` is (at most `most`), where `part(x, i, j)`
    is the run's items i..j-1."""
    lo, hi = 0, most  # part(.., 0, lo) is common; the common run is at most hi long
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if part(old, lo, mid) == part(new, lo, mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _from_start(items: list[T], start: int, stop: int) -> list[T]:
    return items[start:stop]


def _from_end(items: list[T], start: int, stop: int) -> list[T]:
    """Items start..stop-1 counted from the end (0: the last item)."""
    size = len(items)
    return items[size - stop : size - start]


def _node_of(s: ResourceSlice) -> object:
    return s.node_name


def _pool_of(s: ResourceSlice) -> object:
    return (s.driver, s.pool.name)


class _Positions:
    """Positions of slices in a list, by identity: the ids listed once, when first asked (a
    C-speed pass; `list.index` would call `ResourceSlice.__eq__` per item)."""

    def __init__(self, slices: list[ResourceSlice]) -> None:
        self._slices = slices
        self._ids: list[int] | None = None

    def of(self, s: ResourceSlice) -> int:
        if self._ids is None:
            self._ids = list(map(id, self._slices))
        return self._ids.index(id(s))


def _merged(
    kept: Iterable[ResourceSlice],
    gone: set[int],
    added: list[tuple[int, ResourceSlice]],
    key: object,
    key_of: Callable[[ResourceSlice], object],
    positions: _Positions,
) -> list[ResourceSlice]:
    """The slices of one entry of an index (a node's, a pool's) after a change: `kept` less
    the `gone` ones, with the `added` ones of `key`, in the order of the new slices."""
    now = [s for s in kept if id(s) not in gone]
    new = [(at, s) for at, s in added if key_of(s) == key]
    if not new:
        return now
    if not now:  # a node republished whole
        return [s for _, s in new]
    placed = [(positions.of(s), s) for s in now] + new  # a pool's slice of several replaced
    placed.sort(key=_position)
    return [s for _, s in placed]


def _position(item: tuple[int, ResourceSlice]) -> int:
    return item[0]


def _exclusive_need(claims: list[ResourceClaim]) -> int:
    """How many devices the claims need at least, each exclusively; 0 when that cannot be
    told in advance ("All" requests, admin access)."""
    total = 0
    for claim in claims:
        for request in claim.requests:
            if request.exactly is not None:
                exact = request.exactly
                if exact.allocation_mode != "ExactCount" or exact.admin_access:
                    return 0
                total += exact.count
                continue
            counts = []
            for sub in request.first_available:
                if sub.allocation_mode != "ExactCount":
                    return 0
                counts.append(sub.count)
            total += min(counts, default=0)
    return total
