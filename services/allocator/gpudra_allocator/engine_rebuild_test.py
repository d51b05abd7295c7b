"""The engine's incremental rebuild decides exactly as a freshly built engine, after any change.

A seeded random walk over a heterogeneous fleet (DGX, B200, MIG A100 with partitionable devices,
GB200 trays, L4) plus four pools that are not one node's own: NICs on `allNodes`, a fabric pool
with a `nodeSelector`, one pool whose two slices name two nodes, and a slice that names a node
per device (`perDeviceNodeSelection`). Each step changes the slices as the index would see it (a
changed object is parsed anew, the others stay the same objects; a key deleted and written again
moves to the end), the classes or the in-use state object now and then, allocates and releases
claims, and then asks both engines every probe claim: node, results, reason and explanation must
be equal.
"""

from __future__ import annotations

import copy
import gc
import random
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gpudra_alloc import AllocatedState, DeviceID
from gpudra_alloc.placement import groups
from gpudra_alloc.workload import SHAPES, Fleet, build_fleet, device_classes, resource_claim
from gpudra_alloc.workload.claims import CLIQUE_ATTRIBUTE
from gpudra_allocator.conftest import gpu_claim, gpu_slice_doc
from gpudra_allocator.engine import Decision, Engine, load_classes
from gpudra_api import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

NIC = "nic.example.com"
SHARED_POOLS = ("switch", "fabric")  # the pools that are not node-local
SPAN = "span"  # one pool, two slices, two nodes
SPAN_SPEED = 300  # NICs of that speed are only in the span pool
PER_DEVICE_SPEED = 500  # and these only in the slice that names a node per device


def _nic(name: str, speed: int = 100) -> dict[str, Any]:
    return {"name": name, "attributes": {"speed": {"int": speed}}}


def _slice(name: str, pool: str, generation: int, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": NIC,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            **spec,
        },
    }


def _selector(node: str) -> dict[str, Any]:
    """Every node but `node` (a slice's selector has one term; a field selector one value)."""
    requirement = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    return {"nodeSelectorTerms": [{"matchFields": [requirement]}]}


def classes(variant: int) -> list[DeviceClass]:
    docs = device_classes()
    docs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": NIC},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
        }
    )
    if variant % 2:  # the NIC class narrowed: only fast NICs
        docs[-1]["spec"]["selectors"].append(
            {"cel": {"expression": f'device.attributes["{NIC}"].speed >= 200'}}
        )
    return [parse_device_class(d) for d in docs]


def nic_claim(name: str, count: int, speed: int = 0) -> ResourceClaim:
    """`count` NICs (of `speed` when given) and a GPU beside them."""
    nic: dict[str, Any] = {"deviceClassName": NIC, "count": count}
    if speed:
        expression = f'device.attributes["{NIC}"].speed == {speed}'
        nic["selectors"] = [{"cel": {"expression": expression}}]
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "nic", "exactly": nic},
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                    ]
                }
            },
        }
    )


def probes() -> list[list[ResourceClaim]]:
    out = [[parse_resource_claim(resource_claim(shape, f"probe-{shape}"))] for shape in SHAPES]
    out.append([nic_claim("probe-nic", 1), nic_claim("probe-nic-2", 1)])
    out.append([nic_claim("probe-nics", 3)])
    out.append([nic_claim("probe-span", 1, SPAN_SPEED)])  # only the two-node pool has these
    out.append([nic_claim("probe-per-device", 1, PER_DEVICE_SPEED)])
    return out


class Cluster:
    """Slice documents by name, parsed once per change as the slice index keeps them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        objects = build_fleet(
            Fleet(
                counts={"dgx-h100": 3, "hgx-b200": 2, "a100-mig": 2, "gb200-tray": 3, "l4-pcie": 2}
            )
        )
        self.docs: dict[str, dict[str, Any]] = {s["metadata"]["name"]: s for s in objects.slices}
        self.nodes = sorted({s["spec"]["nodeName"] for s in objects.slices})
        self.template = copy.deepcopy(self.docs["dgx-00-gpus"])  # for nodes that join
        self.docs["switch"] = _slice(
            "switch", "switch", 1, 1, allNodes=True, devices=[_nic(f"sw-{i}") for i in range(3)]
        )
        self.docs["fabric"] = _slice(
            "fabric",
            "fabric",
            1,
            1,
            nodeSelector=_selector(self.nodes[0]),
            devices=[_nic(f"fab-{i}", 400) for i in range(4)],
        )
        for i, node in enumerate(self.nodes[-2:]):
            self.docs[f"span-{i}"] = _slice(
                f"span-{i}", SPAN, 1, 2, nodeName=node, devices=[_nic(f"span-{i}", SPAN_SPEED)]
            )
        self.docs["per-device"] = self._per_device(1)
        self.parsed = {name: parse_resource_slice(doc) for name, doc in self.docs.items()}
        self.version = 1
        self.added = 0
        self.generations = 0  # slices of a newer generation written under names of their own
        self.removed: dict[str, dict[str, dict[str, Any]]] = {}  # node -> its slices' docs

    def _per_device(self, generation: int) -> dict[str, Any]:
        """NICs each on a node of its own (three nodes drawn), in a slice that names no node."""
        nodes = self.rng.sample(self.nodes, 3)
        devices = [
            {**_nic(f"pd-{i}", PER_DEVICE_SPEED), "nodeName": node} for i, node in enumerate(nodes)
        ]
        return _slice(
            "per-device", "per-device", generation, 1, perDeviceNodeSelection=True, devices=devices
        )

    def slices(self) -> list[ResourceSlice]:
        return list(self.parsed.values())

    def put(self, name: str, doc: dict[str, Any]) -> None:
        self.docs[name] = doc
        self.parsed[name] = parse_resource_slice(doc)
        self.version += 1

    def delete(self, name: str) -> None:
        del self.docs[name], self.parsed[name]
        self.version += 1

    def _bumped(self, name: str) -> dict[str, Any]:
        doc = copy.deepcopy(self.docs[name])
        doc["spec"]["pool"]["generation"] += 1
        return doc

    def gpu_slices(self) -> list[str]:
        return sorted(
            n for n, d in self.docs.items() if n.endswith("-gpus") and d["spec"]["devices"]
        )

    def change(self, kind: str, state: AllocatedState) -> str:
        """Apply one change of `kind`; returns what it did (for the failure message)."""
        rng = self.rng
        if kind == "bump":  # a republish: same devices, next generation
            name = rng.choice(self.gpu_slices())
            self.put(name, self._bumped(name))
        elif kind == "drop-device":
            name = rng.choice(self.gpu_slices())
            doc = self._bumped(name)
            doc["spec"]["devices"].pop(rng.randrange(len(doc["spec"]["devices"])))
            self.put(name, doc)
        elif kind == "add-device":  # to the fullest node: it may fit claims it could not
            in_use = Counter(d.pool for d in state.devices)
            name = max(self.gpu_slices(), key=lambda n: in_use[self.docs[n]["spec"]["nodeName"]])
            doc = self._bumped(name)
            device = copy.deepcopy(doc["spec"]["devices"][0])
            device["name"] = f"gpu-extra-{self.version}"
            doc["spec"]["devices"].append(device)
            self.put(name, doc)
        elif kind == "attribute":  # a device's attribute changed without a new generation
            name = rng.choice(self.gpu_slices())
            doc = copy.deepcopy(self.docs[name])
            device = rng.choice(doc["spec"]["devices"])
            device["attributes"]["nvlinkDomain"] = {"string": f"moved-{self.version}"}
            self.put(name, doc)
        elif kind == "add-node":
            self.added += 1
            node = f"dgx-new-{self.added}"
            doc = copy.deepcopy(self.template)
            doc["metadata"]["name"] = f"{node}-gpus"
            doc["spec"]["nodeName"] = node
            doc["spec"]["pool"]["name"] = node
            self.put(f"{node}-gpus", doc)
            name = node
        elif kind == "remove-node":
            node = rng.choice(
                sorted({d["spec"].get("nodeName") for d in self.docs.values()} - {None})
            )
            left = self.removed.setdefault(node, {})
            for gone in [n for n, d in self.docs.items() if d["spec"].get("nodeName") == node]:
                left[gone] = self.docs[gone]
                self.delete(gone)
            name = node
        elif kind == "rejoin":  # a node that left comes back (its slices last in the index)
            if not self.removed:
                return f"{kind} (none)"
            name = rng.choice(sorted(self.removed))
            for slice_name, doc in self.removed.pop(name).items():
                self.put(slice_name, copy.deepcopy(doc))
        elif kind == "switch":  # allNodes pool: a NIC more or less
            doc = self._bumped("switch")
            devices = doc["spec"]["devices"]
            if len(devices) > 1 and rng.random() < 0.5:
                devices.pop()
            else:
                devices.append(_nic(f"sw-{self.version}", rng.choice((100, 200))))
            self.put("switch", doc)
            name = "switch"
        elif kind == "fabric":  # nodeSelector pool: other nodes see it
            doc = self._bumped("fabric")
            doc["spec"]["nodeSelector"] = _selector(rng.choice(self.nodes))
            self.put("fabric", doc)
            name = "fabric"
        elif kind == "new-generation":  # written beside the old one, which stays for a while
            name = rng.choice(self.gpu_slices())
            doc = self._bumped(name)
            if rng.random() < 0.5:
                doc["spec"]["devices"].pop()
            self.generations += 1
            doc["metadata"]["name"] = f"{name}-g{self.generations}"
            self.put(doc["metadata"]["name"], doc)
            name = doc["metadata"]["name"]
        elif kind == "old-generation":  # one slice of a pool with two generations goes
            pools: dict[tuple[str, str], list[str]] = {}
            for n, d in self.docs.items():
                pools.setdefault((d["spec"]["driver"], d["spec"]["pool"]["name"]), []).append(n)
            mixed = sorted(n for names in pools.values() if len(names) > 1 for n in names)
            mixed = [n for n in mixed if not n.startswith(SPAN)]
            if not mixed:
                return f"{kind} (none)"
            name = rng.choice(mixed)
            self.delete(name)
        elif kind == "per-device":  # its NICs move to other nodes
            doc = self._per_device(self.docs["per-device"]["spec"]["pool"]["generation"] + 1)
            self.put("per-device", doc)
            name = "per-device"
        elif kind == "slice-count":  # the span pool's count: incomplete, or complete again
            name = f"span-{rng.randrange(2)}"
            if name not in self.docs:
                return f"{kind} (gone)"
            doc = copy.deepcopy(self.docs[name])
            doc["spec"]["pool"]["resourceSliceCount"] = rng.choice((1, 2, 3))
            self.put(name, doc)
        elif kind == "rewrite":  # the same content written again: a new object, same pools
            name = rng.choice(sorted(self.docs))
            self.put(name, copy.deepcopy(self.docs[name]))
        elif kind == "re-add":  # deleted and written again: the index has it last now
            name = rng.choice(sorted(self.docs))
            doc = self.docs[name]
            self.delete(name)
            self.put(name, doc)
        elif kind == "mig":  # a three-slice pool with shared counters, republished slice by slice
            nodes = sorted(n.removesuffix("-counters") for n in self.docs if "-counters" in n)
            if not nodes:
                return f"{kind} (none)"
            node = rng.choice(nodes)
            names = sorted(n for n in self.docs if n.startswith(f"{node}-"))
            newest = max(self.docs[n]["spec"]["pool"]["generation"] for n in names)
            behind = [n for n in names if self.docs[n]["spec"]["pool"]["generation"] < newest]
            name = rng.choice(behind or names)  # incomplete until every slice has moved
            doc = copy.deepcopy(self.docs[name])
            doc["spec"]["pool"]["generation"] = newest if behind else newest + 1
            devices = doc["spec"].get("devices") or []
            if len(devices) > 1 and rng.random() < 0.3:
                devices.pop(rng.randrange(len(devices)))  # a MIG profile no longer offered
            self.put(name, doc)
        elif kind == "span":  # one slice of a two-node pool: the other node's pool changes too
            name = f"span-{rng.randrange(2)}"
            if name not in self.docs:
                return f"{kind} (gone)"
            doc = copy.deepcopy(self.docs[name])
            if rng.random() < 0.5:
                doc["spec"]["pool"]["generation"] += 1  # the pool incomplete until both move
            else:
                doc["spec"]["devices"][0]["attributes"]["speed"] = {
                    "int": rng.choice((100, SPAN_SPEED))
                }
            self.put(name, doc)
        else:
            raise AssertionError(kind)
        return f"{kind} {name}"


# (index, shape) of each member, and the attribute all members share (None: any nodes)
GANGS = (
    (((0, "gpu-4-nvl"), (1, "gpu-4-nvl"), (2, "gpu-4-nvl")), CLIQUE_ATTRIBUTE),
    (((0, "gpu-8-nvl"), (1, "gpu-2")), None),
)

KINDS = (
    "bump",
    "drop-device",
    "add-device",
    "attribute",
    "add-node",
    "remove-node",
    "rejoin",
    "switch",
    "fabric",
    "span",
    "classes",
    "new-generation",
    "old-generation",
    "per-device",
    "slice-count",
    "rewrite",
    "re-add",
    "state",
    "mig",
)


STEPS = 40


def answer(decision: Decision) -> tuple[Any, ...]:
    return (decision.node, decision.results, decision.reason, dict(decision.explanation))


def engine_for(policy: str, variant: int, incremental: bool = True) -> Engine:
    """`topology-reserve`: topology holding 2 whole large NVLink domains (one 8-GPU pod waits)
    and a MIG home: fleet-wide state the carried chooser must not carry stale."""
    if policy != "topology-reserve":
        return Engine(classes(variant), policy, incremental=incremental)
    engine = Engine(classes(variant), "topology", incremental=incremental, reserve=2)
    engine.waiting_large = 1
    return engine


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(4)])
@pytest.mark.parametrize(
    "policy", [pytest.param(p, id=p) for p in ("first-fit", "topology", "topology-reserve")]
)
def test_incremental_engine_decides_as_a_fresh_one(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster(rng)
    variant = 0
    state = AllocatedState()
    engine = engine_for(policy, variant)
    held: list[set[DeviceID]] = []
    shapes = sorted(SHAPES)
    engine.decide(probes()[0], cluster.slices(), cluster.version, state)  # the first build
    assert engine.nodes_rebuilt == len(cluster.nodes)
    rebuilt_before = engine.nodes_rebuilt
    builds = 1
    shuffled = False  # whether the slices the engine last rebuilt from were shuffled
    for step in range(STEPS):
        kind = KINDS[step] if step < len(KINDS) else rng.choice(KINDS)
        if kind == "classes":
            variant += 1
            engine.use_classes(classes(variant))
            what = f"classes {variant}"
        elif kind == "state":  # another in-use state object (the same devices): carried too
            state, before = AllocatedState(), state
            state.devices.update(before.devices)
            what = "state"
        else:
            what = cluster.change(kind, state)
        changed = not what.endswith(("(gone)", "(none)"))  # else nothing to rebuild
        builds += changed
        slices = cluster.slices()
        # back in index order after a shuffled rebuild: reordered too (a step that changed
        # nothing rebuilt nothing: the engine still has the slices of the step before)
        reordered = shuffled
        shuffling = rng.random() < 0.2
        if shuffling:  # the same slices in another order: compared pool by pool
            rng.shuffle(slices)
        if changed:
            shuffled = shuffling
        if rng.random() < 0.5:
            engine.warm_up(slices, cluster.version, state)
        fresh = engine_for(policy, variant, incremental=False)
        # claims come and go: the carried memos and keys must follow the in-use state
        for n in range(rng.randrange(4)):
            claims = [parse_resource_claim(resource_claim(rng.choice(shapes), f"c{step}-{n}"))]
            mine = engine.decide(claims, slices, cluster.version, state)
            assert answer(mine) == answer(fresh.decide(claims, slices, cluster.version, state))
            if mine.allocated:
                devices = {
                    DeviceID(r.driver, r.pool, r.device) for a in mine.results for r in a.results
                }
                state.devices.update(devices)
                held.append(devices)
        if held and rng.random() < 0.6:
            state.devices.difference_update(held.pop(rng.randrange(len(held))))
        for claims in probes():
            mine = engine.decide(claims, slices, cluster.version, state)
            theirs = fresh.decide(claims, slices, cluster.version, state)
            assert answer(mine) == answer(theirs), f"step {step}: {what}, {claims[0].name}"
        for members, attribute in GANGS:  # the gang step reads the same carried keys and memo
            gang = [parse_resource_claim(resource_claim(shape, f"g-{i}")) for i, shape in members]
            ours = engine.decide_gang("g", gang, attribute, slices, cluster.version, state)
            fresh_gang = fresh.decide_gang("g", gang, attribute, slices, cluster.version, state)
            assert ours == fresh_gang, f"step {step}: {what}, gang {members}"
        one_node = (
            *("bump", "drop-device", "add-device", "attribute", "new-generation", "mig"),
            "add-node",  # its own pool only (not "rejoin": a node of the span pool touches two)
        )
        if kind in one_node and changed and not (shuffled or reordered):  # one node's pool
            assert engine.nodes_rebuilt - rebuilt_before == 1, what
        rebuilt_before = engine.nodes_rebuilt
    assert engine.builds == builds  # one per change, and the first


@pytest.mark.parametrize(
    ("change", "node"),
    [
        pytest.param("add", "node-a", id="device-added-to-the-full-node"),
        pytest.param("drop", "node-b", id="device-dropped-elsewhere"),
    ],
)
@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_a_full_node_that_grows_is_offered_again(policy: str, change: str, node: str) -> None:
    """The full-node memo (free devices per node) of a changed node is not carried over."""
    docs = {n: gpu_slice_doc(n, g) for n, g in (("node-a", 2), ("node-b", 4))}
    slices = {n: parse_resource_slice(d) for n, d in docs.items()}
    state = AllocatedState()
    state.devices.update(DeviceID("gpu.nvidia.com", "node-a", f"gpu-{i}") for i in range(2))
    engine = Engine(load_classes(), policy)
    assert engine.decide([gpu_claim("c", 1)], slices.values(), 1, state).node == "node-b"
    doc = copy.deepcopy(docs[node])
    doc["spec"]["pool"]["generation"] = 2
    if change == "add":
        doc["spec"]["devices"].append({"name": "gpu-9", "attributes": {"type": {"string": "gpu"}}})
    else:
        doc["spec"]["devices"].pop()
    slices[node] = parse_resource_slice(doc)
    mine = engine.decide([gpu_claim("c", 1)], slices.values(), 2, state)
    fresh = Engine(load_classes(), policy, incremental=False)
    assert answer(mine) == answer(fresh.decide([gpu_claim("c", 1)], slices.values(), 2, state))
    assert engine.nodes_rebuilt == 3
    if policy == "first-fit":
        assert mine.node == ("node-a" if change == "add" else "node-b")


def republished_node_a(
    engine: Engine,
    docs: dict[str, dict[str, Any]],
    slices: dict[str, ResourceSlice],
    state: AllocatedState,
) -> Iterator[int]:
    """Node-a's slice republished 40 times (a new generation, another model each time); after
    each, the engine's answer for a 2-GPU claim is checked against a fresh engine's; yields the
    version."""
    for version in range(1, 41):
        doc = docs["node-a"]
        doc["spec"]["pool"]["generation"] += 1
        doc["spec"]["devices"][0]["attributes"]["model"] = {"string": f"m{version}"}
        slices["node-a"] = parse_resource_slice(copy.deepcopy(doc))
        mine = engine.decide([gpu_claim("c", 2)], slices.values(), version, state)
        fresh = Engine(load_classes(), "topology", incremental=False)
        assert answer(mine) == answer(
            fresh.decide([gpu_claim("c", 2)], slices.values(), version, state)
        )
        yield version


def test_the_parts_of_replaced_pools_do_not_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every change leaves the old pool's key parts behind; past the slack the keys (and the
    memo keyed on them) start afresh, and decisions stay those of a fresh engine."""
    monkeypatch.setattr(groups, "CARRIED_PARTS_SLACK", 8)
    docs = {n: gpu_slice_doc(n, 4) for n in ("node-a", "node-b")}
    slices = {n: parse_resource_slice(d) for n, d in docs.items()}
    state = AllocatedState()
    engine = Engine(load_classes(), "topology")
    sizes = []
    for _ in republished_node_a(engine, docs, slices, state):
        assert engine._chooser is not None
        sizes.append(len(engine._chooser.node_keys._parts))
    assert max(sizes) <= 2 * 2 + 8 + 4, sizes  # bounded: the last carry's check plus one change
    assert engine.nodes_rebuilt < 2 + 40 * 2, "most changes still rebuilt one node"


def test_the_carried_keys_keep_only_the_parts_their_nodes_use() -> None:
    """A replaced pool's node and shape parts go at the next carry (a node part holds every
    device's attributes: hundreds of KB for a MIG node), with no fresh start: one node rebuilt
    per change, and the memo still serves the untouched node."""
    docs = {n: gpu_slice_doc(n, 4) for n in ("node-a", "node-b")}
    slices = {n: parse_resource_slice(d) for n, d in docs.items()}
    state = AllocatedState()
    engine = Engine(load_classes(), "topology")
    engine.decide([gpu_claim("c", 2)], slices.values(), 0, state)
    for version in republished_node_a(engine, docs, slices, state):
        assert engine._chooser is not None
        keys = engine._chooser.node_keys
        # node-a's and node-b's node parts and their one shape part each; nothing of before
        assert len(keys._parts) == 4, version
    assert engine.nodes_rebuilt == 2 + 40
    assert engine._chooser is not None
    assert engine._chooser.memo.hits >= 40  # node-b's score, remembered across every rebuild


@pytest.mark.parametrize("incremental", [pytest.param(i, id=f"incremental-{i}") for i in (1, 0)])
@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_replaced_slices_are_let_go(policy: str, incremental: int) -> None:
    """A slice the index replaced is freed with its device entries (cached by slice) once no
    engine needs it: a long-lived allocator under slice churn keeps only the current slices."""
    docs = {n: gpu_slice_doc(n, 4) for n in ("node-a", "node-b")}
    slices = {n: parse_resource_slice(d) for n, d in docs.items()}
    state = AllocatedState()
    engine = Engine(load_classes(), policy, incremental=bool(incremental))
    replaced = []
    for version in range(1, 6):
        assert engine.decide([gpu_claim("c", 2)], slices.values(), version, state).node == "node-a"
        replaced.append(weakref.ref(slices["node-a"]))
        docs["node-a"]["spec"]["pool"]["generation"] += 1
        slices["node-a"] = parse_resource_slice(docs["node-a"])
    engine.decide([gpu_claim("c", 2)], slices.values(), 6, state)  # the last one replaced too
    gc.collect()
    assert [ref() is None for ref in replaced] == [True] * 5


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_replaced_slices_are_let_go_by_the_placement_layer(policy: str) -> None:
    """The same over the walk's fleet, where the topology policy steers searches with masks (MIG
    GPUs, several NVLink domains on a node) and keeps a layout per node's pools for that."""
    rng = random.Random(3)
    cluster = Cluster(rng)
    state = AllocatedState()
    engine = Engine(classes(0), policy)
    replaced: list[weakref.ref[ResourceSlice]] = []
    for _ in range(40):
        before = {id(s): s for s in cluster.slices()}
        cluster.change(rng.choice(("bump", "drop-device", "add-device", "attribute")), state)
        for s in cluster.slices():
            before.pop(id(s), None)
        replaced += (weakref.ref(s) for s in before.values())
        before.clear()
        for claims in probes():
            engine.decide(claims, cluster.slices(), cluster.version, state)
    gc.collect()
    assert len(replaced) == 40
    assert [ref for ref in replaced if ref() is not None] == []
