from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import (
    AllocatedState,
    AllocationInputError,
    CelRuntimeError,
    DeviceID,
    validate_allocation,
)
from gpudra_alloc.workload import Fleet, build_fleet, device_classes, resource_claim
from gpudra_allocator.conftest import gpu_claim_doc, gpu_slice, gpu_slice_doc
from gpudra_allocator.engine import Decision, Engine, load_classes, summary
from gpudra_allocator.errors import SettingsError
from gpudra_api import (
    DeviceClass,
    Node,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from gpudra_cel import compile_selector
from gpudra_cel.selector import _compile


def claim(count: int) -> Any:
    return parse_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c{count}", "namespace": "default", "uid": f"u{count}"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                        }
                    ]
                }
            },
        }
    )


@pytest.mark.parametrize(
    ("count", "node", "allocated"),
    [
        pytest.param(2, "node-a", True, id="fits-first-node"),
        pytest.param(3, "node-b", True, id="only-second-node-fits"),
        pytest.param(5, "", False, id="fits-nowhere"),
    ],
)
def test_decide(count: int, node: str, allocated: bool) -> None:
    engine = Engine(load_classes(), "first-fit")
    slices = [gpu_slice("node-a", 2), gpu_slice("node-b", 4)]
    decision = engine.decide([claim(count)], slices, 1, AllocatedState())
    assert decision.allocated == allocated
    assert decision.node == node
    if not allocated:
        assert "node(s) tried" in decision.reason
        assert decision.explanation["nodesTried"] == 2


def test_summary_names_stages() -> None:
    text = summary(
        {
            "reason": "cannot allocate all claims",
            "node": "n1",
            "nodesTried": 3,
            "closest": {"devicesAllocated": 1, "devicesRequested": 4},
            "claims": [{"requests": [{"removed": {"allocated": 3, "taint": 0}}]}],
        }
    )
    assert text == (
        "cannot allocate all claims; 3 node(s) tried, closest n1 placed 1 of 4 devices "
        "(devices removed there by: allocated 3)"
    )


def test_bad_class_file_is_a_settings_error(tmp_path: Any) -> None:
    bad = tmp_path / "classes.yaml"
    bad.write_text("kind: DeviceClass\nmetadata: {}\n")
    with pytest.raises(SettingsError):
        load_classes(str(bad))
    assert [c.name for c in load_classes()] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "nvlink.gpu.nvidia.com",
    ]


@pytest.mark.parametrize("count", [pytest.param(1, id="one"), pytest.param(3, id="three")])
def test_topology_is_deterministic_and_reserves_nothing_itself(count: int) -> None:
    slices = [gpu_slice("node-a", 2), gpu_slice("node-b", 4)]
    state = AllocatedState()
    first = Engine(load_classes(), "topology").decide([claim(count)], slices, 1, state)
    second = Engine(load_classes(), "topology").decide([claim(count)], slices, 1, state)
    assert first.allocated
    assert (first.node, first.results) == (second.node, second.results)
    assert state.devices == set(), "reserving is the reservation store's job"


def test_unschedulable_reason_is_a_sentence() -> None:
    decision = Engine(load_classes(), "topology").decide(
        [claim(5)], [gpu_slice("node-a", 2), gpu_slice("node-b", 4)], 1, AllocatedState()
    )
    assert not decision.allocated
    assert decision.reason.startswith("needs 5 GPUs"), decision.reason


def _brute_open(state: AllocatedState, nodes: dict[str, int]) -> list[str]:
    """The nodes with a free device, the slow way (every device looked at)."""
    return [
        n
        for n, gpus in sorted(nodes.items())
        if not all(DeviceID("gpu.nvidia.com", n, f"gpu-{i}") in state.devices for i in range(gpus))
    ]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([("+", "node-a", 0), ("+", "node-a", 1)], id="first-node-fills"),
        pytest.param(
            [("+", "node-a", 0), ("+", "node-a", 1), ("-", "node-a", 0)], id="full-node-frees"
        ),
        pytest.param(
            [("+", "node-b", i) for i in range(4)] + [("+", "node-a", 0), ("+", "node-a", 1)],
            id="every-node-fills",
        ),
        pytest.param(
            [("+", "node-a", 0), ("+", "node-a", 1), ("-", "node-a", 1), ("+", "node-a", 1)],
            id="fills-frees-fills",
        ),
    ],
)
@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_full_nodes_are_passed_over_after_every_change(
    steps: list[tuple[str, str, int]], policy: str
) -> None:
    """Whatever fills or frees, a decision lands on a node with a free device (the first such
    node for first-fit), as when every device is looked at."""
    nodes = {"node-a": 2, "node-b": 4, "node-c": 1}
    slices = [gpu_slice(n, g) for n, g in nodes.items()]
    state = AllocatedState()
    engine = Engine(load_classes(), policy)
    engine.decide([claim(1)], slices, 1, state)  # builds the engine's memos
    for op, node, index in steps:
        device = DeviceID("gpu.nvidia.com", node, f"gpu-{index}")
        if op == "+":
            state.devices.add(device)
        else:
            state.devices.discard(device)
        decision = engine.decide([claim(1)], slices, 1, state)
        open_nodes = _brute_open(state, nodes)
        assert decision.allocated == bool(open_nodes)
        if policy == "first-fit":
            assert decision.node == (open_nodes[0] if open_nodes else "")
        else:
            assert decision.node in open_nodes or not open_nodes


def test_candidate_list_is_one_object_until_slices_change() -> None:
    # The core's and the placement layer's per-node memos are keyed on this list's identity.
    slices = [gpu_slice("node-a", 2), gpu_slice("node-b", 4)]
    state = AllocatedState()
    engine = Engine(load_classes(), "first-fit")
    first = engine.candidates([claim(1)], slices, 1, state)
    state.devices.add(DeviceID("gpu.nvidia.com", "node-a", "gpu-0"))
    state.devices.add(DeviceID("gpu.nvidia.com", "node-a", "gpu-1"))
    assert engine.candidates([claim(1)], slices, 1, state) is first
    grown = [*slices, gpu_slice("node-c", 1)]
    assert [n.name for n in engine.candidates([claim(1)], grown, 2, state)] == [
        "node-a",
        "node-b",
        "node-c",
    ]


def test_engine_compiles_its_classes_selectors_when_made() -> None:
    classes = load_classes()
    _compile.cache_clear()  # only a memo: forgetting it costs time, nothing else
    engine = Engine(classes, "first-fit")
    options = engine.features.cel_options()
    expressions = [s.expression for c in classes for s in c.selectors if s.expression]
    assert expressions, "the built-in classes select with CEL"
    before = _compile.cache_info().hits
    for expression in expressions:
        compile_selector(expression, options=options)
    assert _compile.cache_info().hits - before == len(expressions), "each one compiled already"


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param(3, id="three-nodes"),
        pytest.param(250, id="250-nodes"),
        pytest.param(0, id="none"),
    ],
)
@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_warm_up_builds_once_and_only_the_changed_node(nodes: int, policy: str) -> None:
    slices = [gpu_slice(f"node-{i:03d}", 2) for i in range(nodes)]
    state = AllocatedState()
    engine = Engine(load_classes(), policy)
    engine.decide([claim(1)], slices, 1, state)
    assert engine.nodes_rebuilt == nodes
    grown = [*slices, gpu_slice("node-new", 4)] if nodes else []
    engine.warm_up(grown, 2, state)
    assert engine.builds == 2
    assert engine.nodes_rebuilt == nodes + (1 if nodes else 0), "only node-new was built"
    assert engine.current(2, state)
    decision = engine.decide([claim(3)], grown, 2, state)
    assert decision.node == ("node-new" if nodes else "")
    assert engine.builds == 2, "the decision after a warm-up rebuilds nothing"


def test_new_classes_rebuild_every_node() -> None:
    slices = [gpu_slice(f"node-{i}", 2) for i in range(3)]
    state = AllocatedState()
    engine = Engine(load_classes(), "topology")
    engine.warm_up(slices, 1, state)
    engine.use_classes([])
    engine.warm_up(slices, 1, state)
    assert (engine.builds, engine.nodes_rebuilt) == (2, 6)


# -- the whole-domain reserve (opt-in: `reserve`, `reserve_floor`, `mig_homes`) -------------------

DGX = "gpu.nvidia.com"


def reserve_fleet(counts: dict[str, int]) -> tuple[list[Any], list[DeviceClass]]:
    objects = build_fleet(Fleet(counts=counts))
    classes = [parse_device_class(c) for c in device_classes()]
    return [parse_resource_slice(s) for s in objects.slices], classes


def shaped(shape: str, name: str) -> Any:
    doc = resource_claim(shape, name)
    doc["metadata"]["uid"] = f"uid-{name}"
    return parse_resource_claim(doc)


def allocated(
    engine: Engine, slices: list[Any], state: AllocatedState, claims: list[Any]
) -> Decision:
    """`engine.decide`, checked as the placement tests check it, then applied to `state`."""
    decision = engine.decide(claims, slices, 1, state)
    assert decision.allocated, decision.reason
    allocator, _ = engine.placement(slices, 1, state)
    node = Node(decision.node)
    assert validate_allocation(allocator, node, claims, list(decision.results)) == []
    state.apply(decision.results)
    return decision


def test_reserve_keeps_the_last_whole_domain_and_says_why_a_claim_waits() -> None:
    """Two DGX nodes, dgx-01 with one GPU free: a 1-GPU claim takes it (dgx-00's whole domain is
    held); the next 1-GPU claim would split that domain and waits, with a reason that names the
    reserve; an 8-GPU claim takes the held domain."""
    slices, classes = reserve_fleet({"dgx-h100": 2})
    state = AllocatedState(devices={DeviceID(DGX, "dgx-01", f"gpu-{i}") for i in range(7)})
    engine = Engine(classes, "topology", reserve=1)
    assert allocated(engine, slices, state, [shaped("gpu-1", "small-1")]).node == "dgx-01"
    held = engine.decide([shaped("gpu-1", "small-2")], slices, 1, state)
    assert not held.allocated
    assert held.reason.startswith(
        "held back: the topology reserve keeps 1 whole NVLink domain(s) for 8-GPU claims "
        "(dgx-00/nvswitch-0; queue not known, floor 0); it fits on dgx-00 once"
    ), held.reason
    assert held.reason.endswith("(allocator setting reserve=1)")
    assert engine.reserve_status() == {
        "reserve": 1,
        "reserveFloor": 0,
        "migHomes": 1,
        "waitingLarge": None,
        "heldBack": 1,
    }
    assert held.explanation["heldByReserve"] == {
        "reserve": 1,
        "reserveFloor": 0,
        "waitingLarge": None,
        "heldDomains": ["dgx-00/nvswitch-0"],
        "migHomes": [],
        "fitsOn": "dgx-00",
    }
    whole = allocated(engine, slices, state, [shaped("gpu-8-nvl", "large")])
    assert whole.node == "dgx-00"
    assert len(whole.results[0].results) == 8
    # Full now: a claim that fits nowhere gets the closest-node explanation, not the reserve's.
    full = engine.decide([shaped("gpu-1", "small-3")], slices, 1, state)
    assert not full.allocated
    assert "heldByReserve" not in full.explanation
    assert full.reason.startswith("needs 1 GPU"), full.reason


@pytest.mark.parametrize(
    ("waiting", "floor", "held"),
    [
        pytest.param(None, 0, True, id="queue-unknown-holds-the-reserve"),
        pytest.param(0, 0, False, id="nobody-waits-nothing-held"),
        pytest.param(0, 1, True, id="the-floor-holds-anyway"),
        pytest.param(2, 0, True, id="an-8-gpu-pod-waits"),
    ],
)
def test_waiting_large_bounds_what_the_reserve_holds(
    waiting: int | None, floor: int, held: bool
) -> None:
    slices, classes = reserve_fleet({"dgx-h100": 1})
    engine = Engine(classes, "topology", reserve=1, reserve_floor=floor)
    engine.waiting_large = waiting
    decision = engine.decide([shaped("gpu-1", "small")], slices, 1, AllocatedState())
    assert decision.allocated != held, decision.reason
    if held:
        assert decision.explanation["heldByReserve"]["waitingLarge"] == waiting
        assert f"{waiting} waiting" in decision.reason or waiting is None


def test_no_reserve_by_default_and_first_fit_ignores_it() -> None:
    slices, classes = reserve_fleet({"dgx-h100": 1})
    for engine in (Engine(classes, "topology"), Engine(classes, "first-fit", reserve=1)):
        engine.waiting_large = 3
        assert engine.decide([shaped("gpu-1", "small")], slices, 1, AllocatedState()).allocated
        assert engine.reserve_status() == {
            "reserve": 0,
            "reserveFloor": 0,
            "migHomes": 1,
            "waitingLarge": None,
            "heldBack": 0,
        }


def test_the_incremental_rebuild_carries_the_reserve_settings() -> None:
    grown, classes = reserve_fleet({"dgx-h100": 3})
    slices = [s for s in grown if s.node_name != "dgx-02"]
    state = AllocatedState()
    engine = Engine(classes, "topology", reserve=2, reserve_floor=1, mig_homes=0)
    engine.waiting_large = 1
    engine.decide([shaped("gpu-1", "small")], slices, 1, state)
    allocator, chooser = engine.placement(grown, 2, state)
    assert (engine.builds, engine.nodes_rebuilt) == (2, 3), "one node added: it alone is built"
    assert chooser is not None
    assert chooser.allocator is allocator
    assert (chooser.reserve, chooser.reserve_floor, chooser.mig_homes) == (2, 1, 0)
    assert chooser.waiting_large == 1
    engine.waiting_large = 3
    assert engine.placement(grown, 2, state)[1] is chooser
    assert chooser.waiting_large == 3, "each decision tells the chooser the queue again"


def test_a_gang_the_reserve_holds_back_is_told_so() -> None:
    """Two 4-GPU pods would take dgx-00's held domain in two parts: held back, not 'too big'."""
    slices, classes = reserve_fleet({"dgx-h100": 2})
    state = AllocatedState(devices={DeviceID(DGX, "dgx-01", f"gpu-{i}") for i in range(8)})
    engine = Engine(classes, "topology", reserve=1)
    members = [shaped("gpu-4-nvl", "g-0"), shaped("gpu-4-nvl", "g-1")]
    decision = engine.decide_gang("g", members, None, slices, 1, state)
    assert not decision.allocated
    assert decision.reason.startswith(
        "gang g: held back: the topology reserve keeps 1"
    ), decision.reason
    assert Engine(classes, "topology").decide_gang("g", members, None, slices, 1, state).allocated


def test_first_fit_reports_a_cel_error_on_a_node_too_small_to_search() -> None:
    # kube-scheduler's Filter runs the search on every node and aborts on a CEL run-time error.
    # first-fit's node choice passes over node-a (one free GPU, two wanted), whose gpu-1 (no
    # `model`) fails the selector; the decision is that error, not "unschedulable".
    docs = [gpu_slice_doc("node-a", 2), gpu_slice_doc("node-b", 2)]
    models = {("node-a", "gpu-0"): "h100", ("node-b", "gpu-0"): "a100", ("node-b", "gpu-1"): "a100"}
    for doc in docs:
        for device in doc["spec"]["devices"]:
            model = models.get((doc["spec"]["nodeName"], device["name"]))
            if model is not None:
                device["attributes"]["model"] = {"string": model}
    wanted = gpu_claim_doc("broken", 2)
    wanted["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].model == "h100"'}}
    ]
    state = AllocatedState()
    state.devices.add(DeviceID("gpu.nvidia.com", "node-a", "gpu-0"))
    engine = Engine(load_classes(), "first-fit")
    slices = [parse_resource_slice(d) for d in docs]
    with pytest.raises(AllocationInputError, match="no such key: model"):
        engine.decide([parse_resource_claim(wanted)], slices, 1, state)


def model_claim(name: str) -> Any:
    """A claim for one GPU whose selector reads `model` without a `has()` guard."""
    doc = gpu_claim_doc(name, 1)
    doc["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].model == "h100"'}}
    ]
    return parse_resource_claim(doc)


def model_slice(node: str, generation: int) -> Any:
    """`gpu_slice(node, 2)` republished with a `model` on every device."""
    doc = gpu_slice_doc(node, 2)
    doc["spec"]["pool"]["generation"] = generation
    for device in doc["spec"]["devices"]:
        device["attributes"]["model"] = {"string": "h100"}
    return parse_resource_slice(doc)


@pytest.mark.parametrize(
    "generation",
    [pytest.param(2, id="new-pool-generation"), pytest.param(1, id="same-pool-generation")],
)
@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_a_cel_runtime_error_is_its_own_error_and_clears_when_the_slice_does(
    policy: str, generation: int
) -> None:
    """A selector that fails on a device (no `model`) raises `CelRuntimeError`, which the
    service retries, not a plain invalid-input error; the same engine decides the claim once
    the driver republishes the slice with the attribute (the cached failure is not kept)."""
    engine = Engine(load_classes(), policy)
    state = AllocatedState()
    with pytest.raises(CelRuntimeError, match="CEL runtime error: no such key: model") as failed:
        engine.decide([model_claim("c")], [gpu_slice("node-a", 2)], 1, state)
    assert "guarding the check with has()" in str(failed.value), "Kubernetes' hint"
    decision = engine.decide([model_claim("c")], [model_slice("node-a", generation)], 2, state)
    assert decision.allocated
    assert decision.node == "node-a"


def test_a_selector_that_does_not_compile_is_not_a_cel_runtime_error() -> None:
    """No slice can make it pass: it stays a plain `AllocationInputError` (an invalid claim)."""
    doc = gpu_claim_doc("c", 1)
    doc["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].model =='}}
    ]
    with pytest.raises(AllocationInputError) as failed:
        Engine(load_classes(), "first-fit").decide(
            [parse_resource_claim(doc)], [model_slice("node-a", 1)], 1, AllocatedState()
        )
    assert not isinstance(failed.value, CelRuntimeError)
