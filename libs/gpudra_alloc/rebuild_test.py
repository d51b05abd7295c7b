"""The rebuilt allocator's indexes equal a fresh one's, and the change is found exactly.

`engine_rebuild_test.py` (allocator service) checks decisions against a fresh engine; this
checks what those decisions rest on, directly: after random changes as the slice index makes
them (a changed object parsed anew in place, a new key last, a deleted key gone, a key
deleted and written again moved last), the allocator from `rebuild` has the same slices, the
same slices per node and per pool in the same order, the same node list, the same pools per
node as `Allocator(classes, slices)`, and the pools of every node it did not touch are the old
allocator's objects.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpudra_alloc import Allocator
from gpudra_alloc.rebuild import rebuild, slice_change
from gpudra_api import Node, ResourceSlice, parse_device_class, parse_resource_slice

CLASS = parse_device_class(
    {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
)


class _Item:
    """An object compared by identity, as `ResourceSlice` is."""


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(3)])
def test_slice_change_is_a_diff_by_identity(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        old: list[Any] = [_Item() for _ in range(rng.randrange(12))]
        new = list(old)
        for _ in range(rng.randrange(4)):
            kind = rng.random()
            if kind < 0.3 and new:
                new[rng.randrange(len(new))] = _Item()  # replaced in place
            elif kind < 0.5:
                new.insert(rng.randrange(len(new) + 1), _Item())
            elif kind < 0.7 and new:
                del new[rng.randrange(len(new))]
            elif new:
                new.append(new.pop(rng.randrange(len(new))))  # the same object moved last
        change = slice_change(old, new)
        in_new = {id(s) for s in new}
        in_old = {id(s) for s in old}
        kept_old = [s for s in old if id(s) in in_new]
        kept_new = [s for s in new if id(s) in in_old]
        if kept_old != kept_new:
            assert change is None
            continue
        assert change is not None
        removed, added = change
        assert [id(s) for s in removed] == [id(s) for s in old if id(s) not in in_new]
        assert added == [(i, s) for i, s in enumerate(new) if id(s) not in in_old]


def _doc(name: str, node: str, pool: str, generation: int, count: int, devices: int) -> Any:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": f"{name}-gpu-{i}"} for i in range(devices)],
        },
    }


class _Index:
    """Slice documents by key in index order; each put parses anew."""

    def __init__(self) -> None:
        self.docs: dict[str, Any] = {}
        self.parsed: dict[str, ResourceSlice] = {}
        for i in range(8):
            self.put(f"n{i}", _doc(f"n{i}", f"n{i}", f"n{i}", 1, 1, 2))
        for part in range(3):  # one node's pool in three slices (a MIG node's layout)
            self.put(f"m-{part}", _doc(f"m-{part}", "m", "m", 1, 3, 2))
        for i in range(2):  # one pool spanning two nodes
            self.put(f"span-{i}", _doc(f"span-{i}", f"n{i}", "span", 1, 2, 1))

    def put(self, key: str, doc: Any) -> None:
        self.docs[key] = doc
        self.parsed[key] = parse_resource_slice(doc)

    def delete(self, key: str) -> None:
        del self.docs[key], self.parsed[key]

    def change(self, rng: random.Random, step: int) -> None:
        key = rng.choice(sorted(self.docs))
        kind = rng.choice(("republish", "republish", "add-node", "remove", "re-add", "devices"))
        if kind == "republish":  # a new generation in place (one slice of a several-slice pool)
            doc = self.docs[key]
            doc["spec"]["pool"]["generation"] += 1
            self.put(key, doc)
        elif kind == "devices":
            doc = self.docs[key]
            doc["spec"]["devices"].append({"name": f"extra-{step}"})
            self.put(key, doc)
        elif kind == "add-node":
            name = f"new-{step}"
            self.put(name, _doc(name, name, name, 1, 1, rng.randrange(1, 3)))
        elif kind == "remove":
            self.delete(key)
        else:  # deleted and written again: last now
            doc = self.docs[key]
            self.delete(key)
            self.put(key, doc)


def _same(a: list[ResourceSlice], b: list[ResourceSlice]) -> bool:
    return [id(s) for s in a] == [id(s) for s in b]


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(4)])
def test_rebuilt_indexes_equal_a_fresh_allocators(seed: int) -> None:
    rng = random.Random(seed)
    index = _Index()
    allocator = Allocator([CLASS], index.parsed.values())
    allocator.pool_slices()  # kept up to date from here on
    allocator._pool_nodes()
    for step in range(60):
        before = {name: allocator.pools_for(Node(name)) for name in allocator.node_names()}
        index.change(rng, step)
        rebuilt = rebuild(allocator, index.parsed.values())
        allocator = rebuilt.allocator
        fresh = Allocator([CLASS], index.parsed.values())
        assert _same(allocator.slices, fresh.slices)
        assert allocator.by_node.keys() == fresh.by_node.keys()
        for name, node_slices in fresh.by_node.items():
            assert _same(allocator.by_node[name], node_slices), (step, name)
        assert allocator.pool_slices().keys() == fresh.pool_slices().keys()
        for key, pool_slices in fresh.pool_slices().items():
            assert _same(allocator.pool_slices()[key], pool_slices), (step, key)
        assert allocator._pool_nodes() == fresh._pool_nodes()
        assert allocator.node_names() == fresh.node_names()
        assert rebuilt.touched is not None
        for name in fresh.node_names():
            pools = allocator.pools_for(Node(name))
            assert pools == fresh.pools_for(Node(name)), (step, name)
            if name not in rebuilt.touched and name in before:
                assert pools is before[name], (step, name)  # carried over


def test_the_old_allocator_is_retired() -> None:
    """Its indexes and caches belong to the rebuilt one: using it fails instead of answering
    from structures another allocator changes."""
    index = _Index()
    old = Allocator([CLASS], index.parsed.values())
    index.change(random.Random(0), 0)
    rebuild(old, index.parsed.values())
    with pytest.raises(AttributeError):
        old.pools_for(Node("n0"))
