"""Interchangeable nodes: one key per node that is equal only when the topology score must be.

The topology policy scores every feasible node, yet a fleet is mostly many copies of a few
machine types, and copies in the same state score the same. `NodeKeys.keys` gives each node a
key such that two nodes with equal keys (for one claim shape) get the same score from
`Chooser._best_on_node`, so the chooser searches one node per distinct key (the earliest in the
given order, which is also the one the tie-break on node order would pick) and reuses that score
for the others. The key is built from everything the search and the scoring read of a node,
with names taken out (the parts are built in `keyparts.py`):

- the node's pools as the search walks them: per pool its driver, which earlier pool of the
  node shares its name (the counter ledger is keyed by pool name), incomplete/invalid, counter
  sets, and per slice in order whether it selects nodes per device, and per device its name,
  attributes (all but `NODE_UNIQUE_ATTRIBUTES`), capacity (exact value and format), counters it
  consumes, taints, binding conditions, multi-allocation and whether it is reachable from the
  node; devices of the pool on slices that do not target the node (they take shared counters);
- per claim shape: each device's selector outcome for every (class, request selectors) pair of
  the shape (CEL may read any attribute, node-unique ones included, so the outcome is what
  counts) and its values of the attributes the shape's constraints name;
- the in-use state of those pools by device name: exclusively in use, allocated through a share
  or consumed capacity, and the capacity consumed;
- the NVLink domains of the node held by the whole-domain reserve (passed in by the chooser).

A node whose selectors fail on some device (a CEL run-time error names the device) gets a key of
its own. Under the allocator's own state (no shares or consumed capacity, no held domains) the keys
of a node list are kept between calls and only nodes whose pool version moved are looked at again
(`_Tracked`); otherwise every node's key is assembled from its remembered parts. A node list
that differs from the last one asked about by a few nodes (one joined or left) takes over its
records and kept keys, with only those nodes keyed anew (`NodeKeys._edited`, `_Tracked.splice`). What is not in the key must not be read by the search or the score: the node name,
pool names, slice names and node-unique attribute values. `groups_test.py` perturbs each device
field and checks that the score changes only when the key does.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count, pairwise, repeat
from typing import Any

from gpudra_alloc.allocator import MAX_EDIT, Allocator, common_ends
from gpudra_alloc.placement.keyparts import (
    NODE_UNIQUE_ATTRIBUTES,
    ShapeReads,
    node_part,
    reads_only_shared_attributes,
    shape_part,
    shape_reads,
    state_part,
)
from gpudra_alloc.placement.memo import Shape
from gpudra_alloc.pools import Pool
from gpudra_alloc.state import AllocatedState, InUseDevices
from gpudra_api import Node, ResourceClaim

__all__ = ["NODE_UNIQUE_ATTRIBUTES", "NodeKeys", "reads_only_shared_attributes"]

MAX_LISTS = 256  # node lists whose per-node records are kept (a problem's, each gang group's)
MAX_SHAPES_PER_NODE = 256  # shape parts a node keeps (one for all shapes of plain selectors)
MAX_STATES = 200_000  # interned in-use states before the table is dropped (ids are never reused)
# Node and shape parts beyond two per node record past which `carried` starts the keys afresh
# (nodes with many shape parts: selectors on node-unique attributes). The parts of replaced
# pools are not among them: `carried` keeps only the parts its records refer to.
CARRIED_PARTS_SLACK = 4096
_SHIFT = 40  # key = shape part id << _SHIFT | state id, for nodes without held domains

PoolKey = tuple[str, str]


@dataclass(slots=True)
class _Node:
    pools: list[Pool]  # held so that the identity check cannot match a reused id
    node: Node
    group: int  # interned node part
    pool_keys: tuple[PoolKey, ...]
    shapes: dict[int, int | None] = field(default_factory=dict)  # reads id -> shape part id
    # the long-lived state's in-use set and this node's pool versions in it -> state id
    devices: object = None
    versions: object = None
    state: int = -1


@dataclass
class NodeKeys:
    """Keys per node for one allocator. Node and shape parts are computed once per pools object;
    the in-use part of a node is recomputed only when one of its pools changed in the
    allocator's state (or differs from it in the state asked about)."""

    allocator: Allocator
    nodes: dict[str, _Node] = field(default_factory=dict)
    # claim shape -> what it reads, and that as an id (a ShapeReads hashes slowly)
    reads: dict[Shape, tuple[ShapeReads | None, int]] = field(default_factory=dict)
    _reads_ids: dict[ShapeReads | None, int] = field(default_factory=dict)
    _parts: dict[Hashable, int] = field(default_factory=dict)
    # per id of `_parts`: its part and how many slots of `nodes`' records refer to it (a part
    # nobody refers to any more is dropped: `_release`)
    _id_parts: dict[int, Hashable] = field(default_factory=dict)
    _refs: dict[int, int] = field(default_factory=dict)
    _states: dict[Hashable, int] = field(default_factory=dict)
    # ids of interned parts, shared with the keys carried over from this one (`carried`)
    _ids: Iterator[int] = field(default_factory=count)
    _lists: dict[tuple[str, ...], tuple[list[Node], list[_Node]]] = field(default_factory=dict)
    # the last list asked about: (its names, its entry of `_lists`)
    _last: tuple[tuple[str, ...], tuple[list[Node], list[_Node]]] | None = None
    # id of a record list of `_lists` -> it and where each name stands in it (built at its
    # first carry; keyed by id: hashing a tuple of names costs a pass over them)
    _where: dict[int, tuple[list[_Node], dict[str, int]]] = field(default_factory=dict)
    # (id of a node-record list, reads id) -> its kept keys (`distinct`'s fast path)
    _tracking: dict[tuple[int, int], _Tracked] = field(default_factory=dict)
    _slices: int = -1

    def keys(
        self,
        nodes: Sequence[Node],
        claims: Sequence[ResourceClaim],
        shape: Shape,
        state: AllocatedState,
        held: dict[str, frozenset[str]],
    ) -> list[Hashable | None]:
        """One key per node of `nodes`: equal keys, equal topology score for `claims` under
        `state` with `held` domains (node name -> held domains); None for a node that shares
        its score with no other (search it)."""
        return self._keys(nodes, claims, shape, state, held, None)

    def prepare(self, nodes: Sequence[Node]) -> None:
        """Compute the node part of every node's key now (about 60 ms per 1,000 DGX-like nodes),
        so that the first claim after the slices changed does not pay for it. Optional."""
        self._known(nodes)

    def carried(self, allocator: Allocator, touched: Collection[str]) -> NodeKeys | None:
        """Keys for `allocator`, rebuilt from this one's allocator for changed slices
        (`gpudra_alloc.rebuild`): the pools of every node not in `touched` are the same objects,
        so those nodes' records (node part, shape parts, in-use part) stay valid and carry over.
        The interned parts keep their ids: a part has one id in both, so a key means the same
        content in both and scores remembered on it (`memo.py`) stay valid. Only the parts a
        carried record refers to are kept (a node part holds every device's attributes, about
        0.3 MB for an A100 with its MIG profiles): those of replaced pools go (counted per
        part), and the same content met again gets a new id (ids are never reused: a
        remembered score is missed, never mistaken). The node lists and their kept keys move
        over with the touched nodes' records redone (their keys recomputed at the next call),
        so the carry costs what `touched` names, not a pass over the nodes. This one must not
        be used afterwards (it gives up its records, parts, lists and kept keys). None when `allocator`
        has other classes, features or CEL programs, or when the parts outgrow
        `CARRIED_PARTS_SLACK` (start afresh)."""
        old = self.allocator
        if (
            allocator.selectors is not old.selectors
            or allocator.features != old.features
            or allocator.classes.keys() != old.classes.keys()
            or any(allocator.classes[name] is not c for name, c in old.classes.items())
            or len(self._parts) > 2 * len(self.nodes) + CARRIED_PARTS_SLACK
        ):
            return None
        new = NodeKeys(allocator, reads=self.reads, _ids=self._ids)
        new._reads_ids = self._reads_ids
        new._parts, new._id_parts, new._refs = self._parts, self._id_parts, self._refs
        new._states = self._states
        nodes, self.nodes = self.nodes, {}
        for name in touched:
            gone = nodes.pop(name, None)
            if gone is not None:
                self._release(gone)
        new.nodes = nodes
        new._slices = len(allocator.slices)
        redone: dict[int, list[int]] = {}  # id of a record list -> its touched positions
        new._lists = self._lists  # moved: no key hashed again
        for names, (listed, known_list) in new._lists.items():
            kept = self._where.get(id(known_list))
            if kept is not None and kept[0] is known_list:
                where = kept[1]
            else:
                where = dict(zip(names, range(len(names)), strict=True))  # at C speed
            new._where[id(known_list)] = (known_list, where)
            if len(where) == len(names):
                at = [where[name] for name in touched if name in where]
            else:  # a name listed twice
                at = _positions(names, touched)
            for index in at:
                node = listed[index]
                known_list[index] = new._node(node, allocator.pools_for(node))
            redone[id(known_list)] = at
        new._last = self._last  # one of `_lists` (or None)
        for key, tracked in self._tracking.items():
            positions = redone.get(id(tracked.known))
            if positions is not None and tracked.renew(positions):
                new._tracking[key] = tracked
        self._lists, self._last, self._tracking, self._where = {}, None, {}, {}
        return new

    def distinct(
        self,
        nodes: Sequence[Node],
        claims: Sequence[ResourceClaim],
        shape: Shape,
        state: AllocatedState,
        held: dict[str, frozenset[str]],
    ) -> list[tuple[int, Hashable | None]]:
        """(index, key) of the first node of each key, and of every node keyed None, in the
        order of `nodes`: the nodes the chooser must score (the others tie with an earlier
        node of their key and lose on node order)."""
        if not held and state is self.allocator.state:
            tracked = self._tracked(nodes, claims, shape, state)
            if tracked is not None:
                return tracked.firsts()
        firsts: dict[Hashable, int] = {}
        self._keys(nodes, claims, shape, state, held, firsts)
        # a node keyed None stands for itself: (None, index) equals no other key
        return [
            (index, None if key.__class__ is tuple and key[0] is None else key)  # type: ignore[index]
            for key, index in firsts.items()
        ]

    def _keys(
        self,
        nodes: Sequence[Node],
        claims: Sequence[ResourceClaim],
        shape: Shape,
        state: AllocatedState,
        held: dict[str, frozenset[str]],
        firsts: dict[Hashable, int] | None,
    ) -> list[Hashable | None]:
        reads, reads_id = self._reads_of(shape, claims)
        known_list = self._known(nodes)
        ref = self.allocator.state
        ref_devices = ref.devices
        dirty = self._dirty(state)  # pools whose in-use part differs from ref's
        versions = ref_devices.pool_version if isinstance(ref_devices, InUseDevices) else {}
        out: list[Hashable | None] = []
        append = out.append
        setdefault = firsts.setdefault if firsts is not None else None
        for index, known in enumerate(known_list):
            shape_id = known.shapes.get(reads_id, -1)
            if shape_id == -1:
                shape_id = self._shape_id(known, reads, reads_id)
            if shape_id is None:
                if setdefault is not None:
                    setdefault((None, index), index)
                else:
                    append(None)
                continue
            keys = known.pool_keys
            if dirty is None or (dirty and any(k in dirty for k in keys)):
                in_use = self._state_id(state_part(known.pools, state))
            else:
                now: object = (
                    versions.get(keys[0], 0)
                    if len(keys) == 1
                    else tuple(versions.get(k, 0) for k in keys)
                )
                if known.devices is not ref_devices or known.versions != now:
                    known.devices = ref_devices
                    known.versions = now
                    known.state = self._state_id(state_part(known.pools, ref))
                in_use = known.state
            key: Hashable = shape_id << _SHIFT | in_use
            if held and known.node.name in held:
                key = (key, held[known.node.name])
            if setdefault is not None:
                setdefault(key, index)
            else:
                append(key)
        return out

    def state_ids(self, nodes: Sequence[Node], state: AllocatedState) -> list[int]:
        """Per node of `nodes`, an id of the in-use state of its pools (by device name): equal
        ids, equal in-use state. What `NodeView.free` reads of `state` is in it."""
        known_list = self._known(nodes)
        dirty = self._dirty(state)
        ref_devices = self.allocator.state.devices
        versions = ref_devices.pool_version if isinstance(ref_devices, InUseDevices) else {}
        out = []
        for known in known_list:
            keys = known.pool_keys
            if dirty is None or (dirty and any(k in dirty for k in keys)):
                out.append(self._state_id(state_part(known.pools, state)))
                continue
            now: object = (  # as `_keys` keeps it
                versions.get(keys[0], 0)
                if len(keys) == 1
                else tuple(versions.get(k, 0) for k in keys)
            )
            if known.devices is not ref_devices or known.versions != now:
                known.devices = ref_devices
                known.versions = now
                known.state = self._state_id(state_part(known.pools, self.allocator.state))
            out.append(known.state)
        return out

    def _dirty(self, state: AllocatedState) -> set[PoolKey] | None:
        """Pools whose in-use part in `state` may differ from the allocator's state, whose
        per-node parts are kept; None: any may (shares or consumed capacity in use)."""
        ref = self.allocator.state
        ref_devices = ref.devices
        if not isinstance(ref_devices, InUseDevices) or ref.capacity or ref.shared:
            return None
        if state is ref:
            return set()
        if state.capacity or state.shared:
            return None
        return {(d.driver, d.pool) for d in state.devices ^ ref_devices}

    def _reads_of(
        self, shape: Shape, claims: Sequence[ResourceClaim]
    ) -> tuple[ShapeReads | None, int]:
        if shape in self.reads:
            return self.reads[shape]
        if len(self.reads) >= 1024:
            self.reads.clear()
            self._reads_ids.clear()  # ids are never reused: nodes' entries just miss
        reads = shape_reads(self.allocator, claims)
        reads_id = self._new_id(self._reads_ids, reads)
        self.reads[shape] = (reads, reads_id)
        return reads, reads_id

    def _tracked(
        self,
        nodes: Sequence[Node],
        claims: Sequence[ResourceClaim],
        shape: Shape,
        state: AllocatedState,
    ) -> _Tracked | None:
        """The kept keys of `nodes` for `shape` under the allocator's own state, brought up to
        date; None when they cannot be kept (shares or capacity in use, multi-pool nodes)."""
        devices = state.devices
        if not isinstance(devices, InUseDevices) or state.capacity or state.shared:
            return None
        reads, reads_id = self._reads_of(shape, claims)
        known_list = self._known(nodes)
        entry = self._tracking.get((id(known_list), reads_id))
        if entry is not None and entry.known is known_list and entry.devices is devices:
            entry.update(self, reads, reads_id)
            return entry
        if any(len(k.pool_keys) > 1 for k in known_list):
            return None
        keys = self._keys(nodes, claims, shape, state, {}, None)
        if len(self._tracking) >= MAX_LISTS:
            self._tracking.clear()
        entry = _Tracked(known_list, devices, keys)
        self._tracking[(id(known_list), reads_id)] = entry
        return entry

    def _refresh(
        self, known: _Node, reads: ShapeReads | None, reads_id: int, version: int
    ) -> int | None:
        """A node's key after its pool's version moved to `version` (allocator's state)."""
        shape_id = known.shapes.get(reads_id, -1)
        if shape_id == -1:
            shape_id = self._shape_id(known, reads, reads_id)
        if shape_id is None:
            return None
        known.devices = self.allocator.state.devices
        known.versions = version
        known.state = self._state_id(state_part(known.pools, self.allocator.state))
        return shape_id << _SHIFT | known.state

    def _known(self, nodes: Sequence[Node]) -> list[_Node]:
        """The per-node records of `nodes`, kept per list of node names until slices change."""
        generation = len(self.allocator.slices)
        if generation != self._slices:
            self._slices = generation
            self._lists.clear()
            self._where.clear()
            self._last = None
        last = self._last
        if last is not None and last[1][0] == nodes:  # the same Node objects: by identity
            return last[1][1]
        edited = self._edited(last, nodes) if last is not None else None
        if edited is not None:
            self._last = edited
            return edited[1][1]
        names = tuple(n.name for n in nodes)
        found = self._lists.get(names)
        if found is None or found[0] != nodes:
            known = [self._node(n, self.allocator.pools_for(n)) for n in nodes]
            if len(self._lists) >= MAX_LISTS:
                self._lists.clear()
                self._where.clear()
            found = self._lists[names] = (list(nodes), known)
        self._last = (names, found)
        return found[1]

    def _edited(
        self, last: tuple[tuple[str, ...], tuple[list[Node], list[_Node]]], nodes: Sequence[Node]
    ) -> tuple[tuple[str, ...], tuple[list[Node], list[_Node]]] | None:
        """The records of `nodes` made from those of the last list asked about, when the two
        differ in at most `MAX_EDIT` nodes (a node joined or left: the engine's list after a
        slice change), with the kept keys moved over (`_Tracked.splice`): C-speed copies and
        comparisons, records and keys redone for the differing nodes only. The last list's
        entry is replaced (its records and kept keys now belong to the new one). None when the
        lists differ more, when a name is in both windows with two node objects (another list
        of the same nodes, e.g. in another order: its own entry of `_lists` serves it) or when
        `nodes` is not a list."""
        old_names, (listed, known) = last
        if not isinstance(nodes, list):
            return None
        head, tail = common_ends(listed, nodes)
        old_end, new_end = len(listed) - tail, len(nodes) - tail
        if old_end - head > MAX_EDIT or new_end - head > MAX_EDIT:
            return None
        came = nodes[head:new_end]
        went = {n.name: n for n in listed[head:old_end]}
        if any(went.get(n.name, n) is not n for n in came):
            return None  # another list of the same nodes (other objects, another order)
        pools_for = self.allocator.pools_for
        records = known[:head] + [self._node(n, pools_for(n)) for n in came] + known[old_end:]
        names = old_names[:head] + tuple(n.name for n in came) + old_names[old_end:]
        if self._lists.get(old_names) is last[1]:
            del self._lists[old_names]
        self._where.pop(id(known), None)
        if len(self._lists) >= MAX_LISTS:
            self._lists.clear()
            self._where.clear()
        found = self._lists[names] = (nodes[:], records)
        for key, tracked in list(self._tracking.items()):
            if key[0] == id(known) and tracked.known is known:
                del self._tracking[key]
                if tracked.splice(records, head, old_end, new_end):
                    self._tracking[(id(records), key[1])] = tracked
        return names, found

    def _node(self, node: Node, pools: list[Pool]) -> _Node:
        known = self.nodes.get(node.name)
        if (
            known is None
            or known.pools is not pools
            or (known.node is not node and known.node != node)
        ):
            if known is not None:
                self._release(known)
            keys = tuple((p.driver, p.name) for p in pools)
            known = _Node(pools, node, self._intern(node_part(node, pools)), keys)
            self.nodes[node.name] = known
        return known

    def _shape_id(self, known: _Node, reads: ShapeReads | None, reads_id: int) -> int | None:
        shape_id: int | None = None
        if reads is not None:
            part = shape_part(self.allocator, known.pools, reads)
            if part is not None:
                shape_id = self._intern((known.group, part))
        if len(known.shapes) >= MAX_SHAPES_PER_NODE:
            # shapes with selectors on node-unique attributes, many of them
            self._release(known, shapes_only=True)
            known.shapes.clear()
        known.shapes[reads_id] = shape_id
        return shape_id

    def _intern(self, part: Hashable) -> int:
        """The id of a node or shape part, counted as referred to once more."""
        found = self._parts.get(part)
        if found is None:
            found = next(self._ids)
            self._parts[part] = found
            self._id_parts[found] = part
            self._refs[found] = 1
        else:
            self._refs[found] += 1
        return found

    def _release(self, known: _Node, shapes_only: bool = False) -> None:
        """Count `known`'s parts as referred to once less; drop those nobody refers to."""
        ids = list(known.shapes.values())
        if not shapes_only:
            ids.append(known.group)
        refs = self._refs
        for id_ in ids:
            if id_ is None:
                continue
            left = refs.get(id_, 0) - 1  # 0: dropped already (a record two lists held)
            if left > 0:
                refs[id_] = left
            elif left == 0:
                del refs[id_]
                del self._parts[self._id_parts.pop(id_)]

    def _state_id(self, part: Hashable) -> int:
        if len(self._states) >= MAX_STATES:
            self._states.clear()
        return self._new_id(self._states, part)

    def _new_id(self, table: dict[Any, int], part: Hashable) -> int:
        """The id of `part` in `table`; ids are never reused, so equal ids mean equal parts."""
        found = table.get(part)
        if found is None:
            found = next(self._ids)
            table[part] = found
        return found


# the pool key of a node without pools (one that left, in a list that still names it): no
# driver is named "", so the in-use set never has a version for it
_NO_POOL: PoolKey = ("", "")
_BLOCK = 256  # nodes compared at once when looking for the ones whose version moved


class _Tracked:
    """Keys of one node list for one claim shape under the allocator's own in-use set, kept up
    to date by recomputing only the nodes whose pool version moved since the last call, with
    the first index of every key found from a heap per key (stale entries dropped lazily).
    While the in-use set did not change at all (`_mark`), no node's version is read: only the
    nodes whose records a slice change redid (`renew`) are keyed again.

    The heaps and the set of nodes keyed None hold *order keys*, not indices: `order` gives
    each position a float, ascending, that stays with its node when nodes before it join or
    leave (`splice`: a new node gets one between its neighbours'), and an order key's index is
    found by bisection. An entry is current when its order key is still in `order` and the
    node there has the entry's key; the others are dropped when met."""

    def __init__(self, known: list[_Node], devices: InUseDevices, keys: list[Hashable | None]):
        self.known = known  # held: the cache is keyed by its id
        self.devices = devices
        self.pool_keys = [k.pool_keys[0] if k.pool_keys else _NO_POOL for k in known]
        self.versions = list(map(devices.pool_version.get, self.pool_keys, repeat(0)))
        self.mark = _mark(devices)
        self.renewed: list[int] = []  # positions whose keys `update` must recompute
        self.keys = keys
        self.order = list(map(float, range(len(keys))))
        self._rebuild()

    def _rebuild(self) -> None:
        self.buckets: dict[Hashable, list[float]] = {}
        self.solo: set[float] = set()
        for at, key in zip(self.order, self.keys, strict=True):
            if key is None:
                self.solo.add(at)
            else:
                self.buckets.setdefault(key, []).append(at)  # ascending: already a heap
        self.entries = len(self.keys)

    def update(self, owner: NodeKeys, reads: ShapeReads | None, reads_id: int) -> None:
        mark = _mark(self.devices)
        renewed, self.renewed = self.renewed, []
        if mark == self.mark:  # no version moved: the renewed nodes only
            versions = self.devices.pool_version
            for index in renewed:
                self._recompute(
                    owner, reads, reads_id, index, versions.get(self.pool_keys[index], 0)
                )
            return
        self.mark = mark
        now = list(map(self.devices.pool_version.get, self.pool_keys, repeat(0)))
        before = self.versions
        if now == before:
            return
        for start in range(0, len(now), _BLOCK):
            if now[start : start + _BLOCK] == before[start : start + _BLOCK]:
                continue
            for index in range(start, min(start + _BLOCK, len(now))):
                if now[index] != before[index]:
                    self._recompute(owner, reads, reads_id, index, now[index])
        if self.entries > 4 * len(self.keys):
            self._rebuild()

    def _recompute(
        self,
        owner: NodeKeys,
        reads: ShapeReads | None,
        reads_id: int,
        index: int,
        version: int,
    ) -> None:
        """The key of node `index`, whose pool's version is now `version`."""
        key = owner._refresh(self.known[index], reads, reads_id, version)
        self.versions[index] = version
        keys = self.keys
        was = keys[index]
        if key != was:
            keys[index] = key
            at = self.order[index]
            if key is not None:
                heapq.heappush(self.buckets.setdefault(key, []), at)
                self.entries += 1
            if was is None:  # a record `renew` or `splice` redid
                self.solo.discard(at)
            elif key is None:
                self.solo.add(at)

    def renew(self, positions: list[int]) -> bool:
        """The records at `positions` were redone (`NodeKeys.carried`): recompute their keys at
        the next `update`. False when one of them is a node of several pools (keep nothing)."""
        for index in positions:
            pool_keys = self.known[index].pool_keys
            if len(pool_keys) > 1:
                return False
            self.pool_keys[index] = pool_keys[0] if pool_keys else _NO_POOL
            self.versions[index] = -1  # no pool's version: a full `update` recomputes it too
        self.renewed.extend(positions)
        return True

    def splice(self, known: list[_Node], head: int, old_end: int, new_end: int) -> bool:
        """Follow the node list to `known`: the old list's positions `head`..`old_end`-1 became
        `known`'s `head`..`new_end`-1 (the nodes that left and came), the others the same
        records; the new positions' keys are recomputed at the next `update`. Costs the
        changed nodes plus C-speed copies. False when a new record is a node of several pools
        (keep nothing)."""
        came = known[head:new_end]
        if any(len(k.pool_keys) > 1 for k in came):
            return False
        count_ = new_end - head
        order = self.order
        low = order[head - 1] if head > 0 else None
        high = order[old_end] if old_end < len(order) else None
        if low is None:
            low = (high if high is not None else 0.0) - count_ - 1.0
        if high is None:
            high = low + count_ + 1.0
        step = (high - low) / (count_ + 1)
        fresh = [low + step * (i + 1) for i in range(count_)]
        bounds = [low, *fresh, high]
        dense = any(a >= b for a, b in pairwise(bounds))  # floats ran out between
        shift = new_end - old_end
        self.known = known
        self.order = order[:head] + fresh + order[old_end:]
        self.keys = self.keys[:head] + [None] * count_ + self.keys[old_end:]
        self.pool_keys = (
            self.pool_keys[:head]
            + [k.pool_keys[0] if k.pool_keys else _NO_POOL for k in came]
            + self.pool_keys[old_end:]
        )
        self.versions = self.versions[:head] + [-1] * count_ + self.versions[old_end:]
        renewed = [i if i < head else i + shift for i in self.renewed if not head <= i < old_end]
        self.renewed = renewed + list(range(head, new_end))
        if dense:
            self.order = list(map(float, range(len(self.keys))))
            self._rebuild()
        else:
            self.solo.update(fresh)  # keyed None until `update` keys them
        return True

    def firsts(self) -> list[tuple[int, Hashable | None]]:
        """(first index, key) per key and (index, None) per node keyed None, by index."""
        keys = self.keys
        order = self.order
        size = len(order)
        out: list[tuple[int, Hashable | None]] = []
        for at in list(self.solo):
            index = bisect_left(order, at)
            if index < size and order[index] == at and keys[index] is None:
                out.append((index, None))
            else:  # a node that left
                self.solo.discard(at)
        empty = []
        for key, heap in self.buckets.items():
            while heap:
                index = bisect_left(order, heap[0])
                if index < size and order[index] == heap[0] and keys[index] == key:
                    out.append((index, key))
                    break
                heapq.heappop(heap)
                self.entries -= 1
            else:
                empty.append(key)
        for key in empty:
            del self.buckets[key]
        out.sort(key=_first)
        return out


def _positions(names: tuple[str, ...], wanted: Collection[str]) -> list[int]:
    """Where the names in `wanted` stand in `names` (a C-speed scan per name)."""
    found = []
    for name in wanted:
        start = 0
        while True:
            try:
                start = names.index(name, start)
            except ValueError:
                break
            found.append(start)
            start += 1
    return found


def _mark(devices: InUseDevices) -> int:
    """A number that grows with every change of `devices`: each add grows its size, each
    removal its count of removals (every mutating method goes through those)."""
    return len(devices) + 2 * devices.removals


def _first(item: tuple[int, Hashable | None]) -> int:
    return item[0]
