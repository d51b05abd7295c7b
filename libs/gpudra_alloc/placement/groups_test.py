from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from gpudra_alloc import AllocatedState, AllocationError, Allocator, DeviceID
from gpudra_alloc.placement import Choice, Chooser, Gang, place_gang
from gpudra_alloc.placement.groups import NodeKeys, reads_only_shared_attributes
from gpudra_alloc.placement.memo import claims_shape
from gpudra_alloc.placement.search import copy_state, safe_mask
from gpudra_alloc.workload import SHAPES, Fleet, build_fleet, device_classes, resource_claim
from gpudra_api import (
    AllocationResult,
    Node,
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

DRIVER = "gpu.nvidia.com"
Slices = list[dict[str, Any]]


def fleet(counts: dict[str, int]) -> tuple[Slices, list[Node]]:
    objects = build_fleet(Fleet(counts=counts))
    return objects.slices, [Node(n["name"], n["labels"]) for n in objects.nodes]


def allocator_of(slices: Slices, busy: set[DeviceID] | None = None) -> Allocator:
    return Allocator(
        [parse_device_class(c) for c in device_classes()],
        [parse_resource_slice(s) for s in slices],
        state=AllocatedState(devices=set(busy or ())),
    )


def claim(shape: str, name: str) -> ResourceClaim:
    return parse_resource_claim(resource_claim(shape, name))


def cel_claim(name: str, expression: str) -> ResourceClaim:
    return parse_resource_claim(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": DRIVER,
                                "selectors": [{"cel": {"expression": expression}}],
                            },
                        }
                    ]
                }
            },
        }
    )


def answer(choice: Choice | None) -> object:
    """Everything a choice says: node, results as JSON, score, loss, alternatives."""
    if choice is None:
        return None
    return (
        choice.node.name,
        [r.to_json() for r in choice.results],
        choice.score,
        choice.loss,
        choice.alternatives,
    )


# ---------------------------------------------------------------- equivalence


def random_counts(rng: random.Random) -> dict[str, int]:
    return {
        "dgx-h100": rng.randint(1, 4),
        "a100-mig": rng.randint(0, 2),
        "l4-pcie": rng.randint(0, 2),
        "hgx-b200": rng.randint(0, 2),
        "gb200-tray": rng.choice([0, 2, 3]),
    }


@pytest.mark.parametrize(
    ("seed", "reserve", "masks"),
    [
        pytest.param(1, 0, False, id="seed1"),
        pytest.param(2, 0, True, id="seed2-scratch-states"),
        pytest.param(3, 1, False, id="seed3-reserve"),
        pytest.param(4, 2, True, id="seed4-reserve-scratch-states"),
        pytest.param(5, 0, False, id="seed5"),
    ],
)
def test_optimised_chooser_answers_what_the_plain_one_answers(
    seed: int, reserve: int, masks: bool
) -> None:
    """Random fleets (twins of each machine type, shuffled order) and random claim sequences
    with releases: the optimised chooser (grouped nodes, remembered scores) and the plain one
    (every node searched for every claim) give identical answers at every step."""
    rng = random.Random(seed)
    slices, nodes = fleet(random_counts(rng))
    rng.shuffle(nodes)
    allocator = allocator_of(slices)
    fast = Chooser(allocator, reserve=reserve)
    plain = Chooser(allocator, reserve=reserve, optimise=False)
    shapes = sorted(SHAPES)
    live: list[list[AllocationResult]] = []
    for step in range(36):
        if live and rng.random() < 0.3:
            allocator.state.release(live.pop(rng.randrange(len(live))))
        claims = [claim(rng.choice(shapes), f"c{step}")]
        if rng.random() < 0.15:
            claims.append(claim(rng.choice(["gpu-1", "mig"]), f"c{step}-b"))
        if masks and rng.random() < 0.4:
            # the gang path: a scratch state and a mask over one node's devices
            scratch = copy_state(allocator.state)
            node = rng.choice(nodes)
            wanted = {
                e.id
                for p in allocator.pools_for(node)
                for entries in p.device_entries()
                for e in entries
                if rng.random() < 0.5
            }
            mask = safe_mask(allocator, node, scratch, wanted)
            got = fast.choose(nodes, claims, scratch, mask)
            assert answer(got) == answer(plain.choose(nodes, claims, scratch, mask))
            continue
        got = fast.choose(nodes, claims)
        assert answer(got) == answer(plain.choose(nodes, claims)), f"step {step}"
        if got is not None:
            allocator.state.apply(got.results)
            live.append(got.results)
    assert fast.memo.hits > 0


def test_errors_are_the_plain_choosers_errors() -> None:
    """A selector failing at run time names a device: the same device, both ways."""
    slices, nodes = fleet({"dgx-h100": 3})
    allocator = allocator_of(slices)
    bad = cel_claim("bad", f'device.attributes["{DRIVER}"].nosuch == "x"')
    messages = []
    for chooser in (Chooser(allocator), Chooser(allocator, optimise=False)):
        with pytest.raises(AllocationError) as caught:
            chooser.choose(nodes, [bad])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_a_selector_on_a_node_unique_attribute_tells_twins_apart() -> None:
    slices, nodes = fleet({"dgx-h100": 3})
    uuid = slices[2]["spec"]["devices"][5]["attributes"]["uuid"]["string"]
    allocator = allocator_of(slices)
    wanted = cel_claim("one", f'device.attributes["{DRIVER}"].uuid == "{uuid}"')
    fast = Chooser(allocator)
    got = fast.choose(nodes, [wanted])
    assert got is not None
    assert (got.node.name, got.results[0].results[0].device) == (nodes[2].name, "gpu-5")
    assert answer(got) == answer(Chooser(allocator, optimise=False).choose(nodes, [wanted]))


# ---------------------------------------------------------------- key completeness


def _bump(value: dict[str, Any]) -> dict[str, Any]:
    kind, scalar = next(iter(value.items()))
    if kind == "int":
        return {kind: scalar + 1}
    if kind == "bool":
        return {kind: not scalar}
    if kind == "version":
        major, rest = scalar.split(".", 1)
        return {kind: f"{int(major) + 1}.{rest}"}
    if kind == "string":
        return {kind: scalar + "-x"}
    return {kind: [*scalar, scalar[0]] if scalar else ["x"]}


def perturbations(device: dict[str, Any]) -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    """One change per field of a device: each attribute's value changed or removed, each
    capacity halved, each consumed counter doubled, a taint added."""
    out: list[tuple[str, Callable[[dict[str, Any]], None]]] = []
    for name in device.get("attributes", {}):

        def change(d: dict[str, Any], name: str = name) -> None:
            d["attributes"][name] = _bump(d["attributes"][name])

        def drop(d: dict[str, Any], name: str = name) -> None:
            del d["attributes"][name]

        out += [(f"attribute {name}", change), (f"no attribute {name}", drop)]
    for name in device.get("capacity", {}):

        def halve(d: dict[str, Any], name: str = name) -> None:
            value = d["capacity"][name]["value"]
            d["capacity"][name]["value"] = "1Gi" if value != "1Gi" else "2Gi"

        out.append((f"capacity {name}", halve))
    for i, _ in enumerate(device.get("consumesCounters", [])):

        def double(d: dict[str, Any], i: int = i) -> None:
            counters = d["consumesCounters"][i]["counters"]
            first = sorted(counters)[0]
            counters[first] = {"value": "2"}

        out.append((f"counters #{i}", double))

    def taint(d: dict[str, Any]) -> None:
        d["taints"] = [{"key": "gpudra.io/broken", "effect": "NoSchedule"}]

    out.append(("taint", taint))
    return out


def _device(slices: Slices, node: str, name: str) -> dict[str, Any]:
    for s in slices:
        if s["spec"].get("nodeName") == node:
            for d in s["spec"].get("devices", []):
                if d["name"] == name:
                    found: dict[str, Any] = d
                    return found
    raise AssertionError(f"{node}/{name} not found")


def score(chooser: Chooser, node: Node, pod: list[ResourceClaim]) -> object:
    """The plain score of `node` (as node 0), or the error its search raises."""
    try:
        choice = chooser._best_on_node(0, node, pod, chooser.allocator.state)
    except AllocationError as exc:
        return type(exc)
    return None if choice is None else choice.score


CASES = [
    ("dgx-h100", "gpu-0"),
    ("a100-mig", "gpu-0"),
    ("a100-mig", "gpu-0-mig-1g-10gb-0"),
    ("gb200-tray", "gpu-1"),
]
CASE_IDS = [f"{m}-{d}" for m, d in CASES]


@pytest.mark.parametrize(("machine", "device"), CASES, ids=CASE_IDS)
def test_equal_keys_mean_equal_scores_for_every_device_field(machine: str, device: str) -> None:
    """Twins A and B, B with one field of one device changed: wherever their keys agree, the
    plain scoring agrees too. Fails when the search or the score reads something the key
    leaves out (a new scoring rule reading a node-unique attribute, say)."""
    base, nodes = fleet({machine: 2})
    a, b = nodes
    claims = {shape: [claim(shape, "x")] for shape in sorted(SHAPES)}
    grouped = 0
    for what, change in perturbations(_device(base, b.name, device)):
        slices = copy.deepcopy(base)
        change(_device(slices, b.name, device))
        allocator = allocator_of(slices)
        chooser = Chooser(allocator)
        for shape, pod in claims.items():
            key = claims_shape(pod)
            assert key is not None
            keys = chooser.node_keys.keys([a, b], pod, key, allocator.state, {})
            if keys[0] is not None and keys[0] == keys[1]:
                grouped += 1
                assert score(chooser, a, pod) == score(chooser, b, pod), (what, shape)
    assert grouped > 0  # node-unique attributes (uuid, pciBusID) keep twins together


@pytest.mark.parametrize(
    ("busy_a", "busy_b", "same"),
    [
        pytest.param((), (), True, id="both-idle"),
        pytest.param(("gpu-0",), ("gpu-0",), True, id="same-device-in-use"),
        pytest.param(("gpu-0",), ("gpu-1",), False, id="different-device-in-use"),
        pytest.param(("gpu-0", "gpu-1"), ("gpu-1", "gpu-0"), True, id="same-set"),
        pytest.param(("gpu-0",), (), False, id="one-idle"),
    ],
)
def test_in_use_state_is_compared_by_device_name(
    busy_a: tuple[str, ...], busy_b: tuple[str, ...], same: bool
) -> None:
    slices, (a, b) = fleet({"dgx-h100": 2})
    busy = {DeviceID(DRIVER, a.name, d) for d in busy_a}
    busy |= {DeviceID(DRIVER, b.name, d) for d in busy_b}
    allocator = allocator_of(slices, busy)
    chooser = Chooser(allocator)
    pod = [claim("gpu-1", "x")]
    shape = claims_shape(pod)
    assert shape is not None
    keys = chooser.node_keys.keys([a, b], pod, shape, allocator.state, {})
    assert (keys[0] == keys[1]) is same
    # a scratch copy of the same state gives the same keys (the gang path)
    assert chooser.node_keys.keys([a, b], pod, shape, copy_state(allocator.state), {}) == keys


def test_keys_follow_changes_of_the_allocators_state() -> None:
    slices, (a, b) = fleet({"dgx-h100": 2})
    allocator = allocator_of(slices)
    chooser = Chooser(allocator)
    pod = [claim("gpu-1", "x")]
    shape = claims_shape(pod)
    assert shape is not None
    first = chooser.node_keys.keys([a, b], pod, shape, allocator.state, {})
    assert first[0] == first[1]
    allocator.state.devices.add(DeviceID(DRIVER, b.name, "gpu-3"))
    second = chooser.node_keys.keys([a, b], pod, shape, allocator.state, {})
    assert second[0] == first[0]
    assert second[1] != first[1]
    allocator.state.devices.discard(DeviceID(DRIVER, b.name, "gpu-3"))
    third = chooser.node_keys.keys([a, b], pod, shape, allocator.state, {})
    assert third[1] == first[1]
    held = chooser.node_keys.keys(
        [a, b], pod, shape, allocator.state, {b.name: frozenset({"nvswitch-0"})}
    )
    assert held[0] == first[0]
    assert held[1] != first[1]


# ---------------------------------------------------------------- selectors and unique names


@pytest.mark.parametrize(
    ("expression", "shared"),
    [
        pytest.param(f'device.attributes["{DRIVER}"].type == "gpu"', True, id="field"),
        pytest.param(f'device.attributes["{DRIVER}"]["type"] == "gpu"', True, id="index"),
        pytest.param(
            f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
            True,
            id="capacity",
        ),
        pytest.param(
            f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA")', True, id="call"
        ),
        pytest.param(f'device.attributes["{DRIVER}"].uuid == "x"', False, id="uuid"),
        pytest.param(
            'device.attributes["resource.kubernetes.io"].pciBusID == "x"', False, id="bus-id"
        ),
        pytest.param(f'device.attributes["{DRIVER}"]["\\x75uid"] == "x"', False, id="escape"),
        pytest.param(f'device.attributes["{DRIVER}"]["uu" + "id"] == "x"', False, id="computed"),
        pytest.param(f'device.attributes["{DRIVER}"].size() == 3', False, id="size"),
        pytest.param(
            f'device.attributes["{DRIVER}"].exists(k, k.startsWith("u"))', False, id="macro"
        ),
        pytest.param(
            f'cel.bind(a, device.attributes["{DRIVER}"], a.type == "gpu")', False, id="alias"
        ),
        pytest.param(f'device["attributes"]["{DRIVER}"].type == "gpu"', False, id="spelling"),
        pytest.param(None, False, id="no-expression"),
    ],
)
def test_which_selectors_cannot_read_node_unique_attributes(
    expression: str | None, shared: bool
) -> None:
    assert reads_only_shared_attributes(expression) is shared


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f'device.attributes["{DRIVER}"].size() == COUNT', id="attribute-count"),
        pytest.param(f'!("uuid" in device.attributes["{DRIVER}"])', id="uuid-absent"),
    ],
)
def test_twins_that_differ_only_in_unique_attributes_are_told_apart_when_selectors_look(
    expression: str,
) -> None:
    """Node B's gpu-2 lacks its uuid; a selector that can see that picks it, both ways."""
    slices, nodes = fleet({"dgx-h100": 2})
    device = _device(slices, nodes[1].name, "gpu-2")
    del device["attributes"]["uuid"]
    count = sum(1 for name in device["attributes"] if "/" not in name)
    allocator = allocator_of(slices)
    pod = [cel_claim("odd", expression.replace("COUNT", str(count)))]
    got = Chooser(allocator).choose(nodes, pod)
    assert got is not None
    assert (got.node.name, got.results[0].results[0].device) == (nodes[1].name, "gpu-2")
    assert answer(got) == answer(Chooser(allocator, optimise=False).choose(nodes, pod))


def test_prepare_computes_every_nodes_key_ahead_of_the_first_claim() -> None:
    slices, nodes = fleet({"dgx-h100": 3, "l4-pcie": 2})
    allocator = allocator_of(slices)
    chooser = Chooser(allocator)
    chooser.node_keys.prepare(nodes)
    assert sorted(chooser.node_keys.nodes) == sorted(n.name for n in nodes)
    # twins share the node part of their key, other machine types do not
    groups = {name: known.group for name, known in chooser.node_keys.nodes.items()}
    assert len(set(groups.values())) == 2


@pytest.mark.parametrize(
    ("pods", "shape", "match"),
    [
        pytest.param(4, "gpu-4-nvl", f"{DRIVER}/cliqueID", id="4x4-one-clique"),
        pytest.param(2, "gpu-8-nvl", None, id="2x8"),
        pytest.param(3, "gpu-2", None, id="3x2"),
    ],
)
def test_gangs_are_placed_as_the_plain_chooser_places_them(
    pods: int, shape: str, match: str | None
) -> None:
    """The gang path: scratch states, masks per attribute value, pods one after the other."""
    slices, nodes = fleet({"dgx-h100": 2, "gb200-tray": 4, "a100-mig": 1})
    allocator = allocator_of(slices)
    fast, plain = Chooser(allocator), Chooser(allocator, optimise=False)
    placed_gangs = 0
    for round_ in range(3):
        gang = Gang(f"g{round_}", [[claim(shape, f"g{round_}-p{i}")] for i in range(pods)], match)
        got = place_gang(allocator, nodes, gang, "topology", fast)
        want = place_gang(allocator, nodes, gang, "topology", plain)
        assert got.group == want.group
        assert got.failed_pod == want.failed_pod
        assert (got.cost, got.left) == (want.cost, want.left)
        placed = [(n.name, [r.to_json() for r in rs]) for n, rs in got.pods or []]
        assert placed == [(n.name, [r.to_json() for r in rs]) for n, rs in want.pods or []]
        for _, results in got.pods or []:
            allocator.state.apply(results)
        placed_gangs += got.pods is not None
    assert placed_gangs > 0


def _devices_of(allocator: Allocator, nodes: list[Node]) -> list[DeviceID]:
    return [
        e.id
        for n in nodes
        for p in allocator.pools_for(n)
        for entries in p.device_entries()
        for e in entries
    ]


def _toggle(
    rng: random.Random, allocator: Allocator, devices: list[DeviceID], low: int, high: int
) -> None:
    """Take or release between `low` and `high` of `devices` at random."""
    for device in rng.sample(devices, rng.randint(low, high)):
        if device in allocator.state.devices:
            allocator.state.devices.discard(device)
        else:
            allocator.state.devices.add(device)


def _kept_is_fresh(
    keys: NodeKeys, allocator: Allocator, nodes: list[Node], pod: list[ResourceClaim], why: str = ""
) -> list[object]:
    """`keys.distinct` answers what a fresh pass over every node answers; the fresh keys."""
    shape = claims_shape(pod)
    assert shape is not None
    kept = keys.distinct(nodes, pod, shape, allocator.state, {})
    fresh = NodeKeys(allocator).keys(nodes, pod, shape, allocator.state, {})
    firsts: dict[object, int] = {}
    for index, key in enumerate(fresh):
        firsts.setdefault(key if key is not None else ("solo", index), index)
    assert [i for i, _ in kept] == sorted(firsts.values()), why
    return list(fresh)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in (1, 2, 3)])
def test_kept_keys_follow_every_change_of_the_state(seed: int) -> None:
    """`distinct` keeps its keys between calls and looks again only at nodes whose pool
    version moved: after any sequence of takes and releases (states left and come back to)
    it answers what a fresh pass over every node answers."""
    rng = random.Random(seed)
    slices, nodes = fleet({"dgx-h100": 12, "l4-pcie": 4, "gb200-tray": 3})
    rng.shuffle(nodes)
    allocator = allocator_of(slices)
    keys = Chooser(allocator).node_keys
    pods = {s: [claim(s, "x")] for s in ("gpu-1", "gpu-4-nvl")}
    devices = _devices_of(allocator, nodes)
    for _ in range(60):
        _toggle(rng, allocator, devices, 1, 4)
        for pod in pods.values():
            _kept_is_fresh(keys, allocator, nodes, pod)
    assert keys._tracking  # the kept path was the one taken


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in (1, 2)])
def test_kept_keys_follow_nodes_that_join_and_leave(seed: int) -> None:
    """A node list that gains or loses a few nodes between calls (the engine's, after a node
    joined or left) moves the kept keys over instead of keying every node again: the same
    kept objects, and the answer of a fresh pass over every node, also after more joins at one
    spot than floats can split (the order keys are numbered afresh) and with a node that has
    no pools (one that left, in a list that still names it)."""
    rng = random.Random(seed)
    slices, every = fleet({"dgx-h100": 40, "l4-pcie": 30, "gb200-tray": 3})
    every.sort(key=lambda n: n.name)
    allocator = allocator_of(slices)
    keys = Chooser(allocator).node_keys
    # the second pod's selector reads a node-unique attribute (per-device outcomes in the key)
    # and fails on every GPU: its nodes with GPUs are keyed None
    attributes = f'device.attributes["{DRIVER}"]'
    failing = f'{attributes}.uuid == "x" || {attributes}.nosuch == "x"'
    pods = [[claim("gpu-1", "x")], [cel_claim("bad", failing)]]
    devices = _devices_of(allocator, every)
    nodes = every[:4] + every[70:]  # 70 nodes wait to join right after the fourth
    waiting = every[4:70]
    kept_objects: set[int] | None = None
    for step in range(90):
        nodes = nodes[:]  # a new list object each time, as the engine makes
        if waiting and (step < 70 or rng.random() < 0.5):
            nodes.insert(4, waiting.pop())  # one spot, again and again: floats run out
        else:
            gone = nodes.pop(rng.randrange(len(nodes)))
            if rng.random() < 0.3:
                waiting.append(gone)
        if step >= 70 and step % 5 == 0:  # not before: it would spread the crowded keys out
            nodes.insert(rng.randrange(len(nodes)), Node(f"no-pools-{step}"))
        _toggle(rng, allocator, devices, 0, 3)
        for pod in pods:
            fresh = _kept_is_fresh(keys, allocator, nodes, pod, f"step {step}")
        assert None in fresh, "the second pod keys nodes None"
        tracked = {id(t) for t in keys._tracking.values()}
        assert len(tracked) == 2, f"step {step}"
        assert kept_objects is None or tracked == kept_objects, f"step {step}: keyed afresh"
        kept_objects = tracked
