from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import AllocatedState, Allocator, DeviceID
from gpudra_alloc.placement import Chooser, block_value
from gpudra_alloc.placement.accept import kubernetes_accepts
from gpudra_alloc.placement.choose import MIG_HOME, alternative_steps
from gpudra_alloc.validate import validate_allocation
from gpudra_alloc.workload import Fleet, build_fleet, device_classes, resource_claim
from gpudra_api import (
    AllocationResult,
    Node,
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

DRIVER = "gpu.nvidia.com"


def cluster(
    counts: dict[str, int],
    busy: tuple[tuple[str, str], ...] = (),
    domains: dict[str, dict[str, str]] | None = None,
) -> tuple[Allocator, list[Node]]:
    """A fleet with some devices in use; `domains` rewrites nvlinkDomain per (node, device)."""
    objects = build_fleet(Fleet(counts=counts))
    for s in objects.slices:
        node = s["spec"]["nodeName"]
        for d in s["spec"].get("devices", []):
            new = (domains or {}).get(node, {}).get(d["name"])
            if new:
                d["attributes"]["nvlinkDomain"] = {"string": new}
    allocator = Allocator(
        [parse_device_class(c) for c in device_classes()],
        [parse_resource_slice(s) for s in objects.slices],
        state=AllocatedState(devices={DeviceID(DRIVER, n, d) for n, d in busy}),
    )
    return allocator, [Node(n["name"], n["labels"]) for n in objects.nodes]


def claim(shape: str, name: str = "c") -> ResourceClaim:
    return parse_resource_claim(resource_claim(shape, name))


def devices(results: list[AllocationResult]) -> list[str]:
    return [r.device for result in results for r in result.results]


def requests(results: list[AllocationResult]) -> list[str]:
    return [r.request for result in results for r in result.results]


HALF_DOMAINS = {"dgx-00": {f"gpu-{i}": "nvswitch-1" for i in range(4, 8)}}


@pytest.mark.parametrize(
    ("counts", "busy", "domains", "shape", "node", "picked", "via"),
    [
        pytest.param(
            {"dgx-h100": 3, "l4-pcie": 1},
            (
                ("dgx-00", "gpu-0"),
                ("dgx-00", "gpu-1"),
                *(("dgx-02", f"gpu-{i}") for i in range(8)),
            ),
            None,
            "gpu-8-nvl",
            "dgx-01",
            [f"gpu-{i}" for i in range(8)],
            "gpus",
            id="8-gpus-on-the-one-whole-nvswitch-domain",
        ),
        pytest.param(
            {"dgx-h100": 1},
            (("dgx-00", "gpu-4"), ("dgx-00", "gpu-5")),
            HALF_DOMAINS,
            "gpu-2",
            "dgx-00",
            ["gpu-6", "gpu-7"],
            "gpus",
            id="best-fit-domain-keeps-the-whole-domain-whole",
        ),
        pytest.param(
            {"a100-mig": 1, "dgx-h100": 1, "hgx-b200": 1, "l4-pcie": 1},
            (),
            None,
            "h100-plus",
            "dgx-00",
            None,
            "gpus",
            id="h100-or-better-40g-on-h100-not-b200",
        ),
        pytest.param(
            {"a100-mig": 1, "dgx-h100": 1, "hgx-b200": 1, "l4-pcie": 1},
            (),
            None,
            "mem-150",
            "b200-00",
            None,
            "gpus",
            id="150g-lands-on-b200",
        ),
        pytest.param(
            {"dgx-h100": 1, "hgx-b200": 1, "l4-pcie": 1},
            (),
            None,
            "gpu-1",
            "l4-00",
            None,
            "gpus",
            id="one-gpu-on-pcie-keeps-nvlink-domains-whole",
        ),
        pytest.param(
            {"a100-mig": 1, "l4-pcie": 1},
            (("a100-00", "gpu-3-mig-1g-10gb-0"),),
            None,
            "mig",
            "a100-00",
            ["gpu-3-mig-1g-10gb-1"],
            "gpu/small",
            id="mig-small-packs-onto-the-partitioned-gpu",
        ),
        pytest.param(
            {"a100-mig": 1, "l4-pcie": 1},
            tuple(("a100-00", f"gpu-{g}-mig-1g-10gb-{p}") for g in range(8) for p in range(7)),
            None,
            "mig",
            "l4-00",
            ["gpu-0"],
            "gpu/full",
            id="mig-falls-back-to-a-full-gpu-when-no-slice-is-left",
        ),
    ],
)
def test_topology_choice(
    counts: dict[str, int],
    busy: tuple[tuple[str, str], ...],
    domains: dict[str, dict[str, str]] | None,
    shape: str,
    node: str,
    picked: list[str] | None,
    via: str,
) -> None:
    allocator, nodes = cluster(counts, busy, domains)
    claims = [claim(shape)]
    choice = Chooser(allocator).choose(nodes, claims)
    assert choice is not None
    assert choice.node.name == node
    if picked is not None:
        assert devices(choice.results) == picked
    assert set(requests(choice.results)) == {via}
    assert kubernetes_accepts(allocator, choice.node, claims, choice.results)


def test_first_fit_breaks_the_whole_gpu_where_topology_packs() -> None:
    allocator, nodes = cluster({"a100-mig": 1}, (("a100-00", "gpu-3-mig-1g-10gb-0"),))
    claims = [claim("mig")]
    first = allocator.choose_node(nodes, claims)
    assert first is not None
    assert first.results is not None
    assert devices(first.results) == ["gpu-0-mig-1g-10gb-0"]
    choice = Chooser(allocator).choose(nodes, claims)
    assert choice is not None
    assert devices(choice.results) == ["gpu-3-mig-1g-10gb-1"]


def test_nothing_fits_gives_none_and_state_is_untouched() -> None:
    allocator, nodes = cluster({"l4-pcie": 1})
    before = set(allocator.state.devices)
    assert Chooser(allocator).choose(nodes, [claim("gpu-8-nvl")]) is None
    assert set(allocator.state.devices) == before


def test_reserve_keeps_the_last_whole_domain_for_a_claim_that_needs_it() -> None:
    allocator, nodes = cluster({"dgx-h100": 1})
    assert Chooser(allocator, reserve=0).choose(nodes, [claim("gpu-1")]) is not None
    assert Chooser(allocator, reserve=1).choose(nodes, [claim("gpu-1")]) is None
    nobody_waits = Chooser(allocator, reserve=1, waiting_large=0)
    assert nobody_waits.choose(nodes, [claim("gpu-1")]) is not None
    floor = Chooser(allocator, reserve=1, waiting_large=0, reserve_floor=1)
    assert floor.choose(nodes, [claim("gpu-1")]) is None
    one_waits = Chooser(allocator, reserve=1, waiting_large=1)
    assert one_waits.choose(nodes, [claim("gpu-1")]) is None
    whole = Chooser(allocator, reserve=1).choose(nodes, [claim("gpu-8-nvl")])
    assert whole is not None
    assert len(devices(whole.results)) == 8


def test_reserve_holds_a_nearly_whole_domain_but_not_a_half_used_one() -> None:
    near, nodes = cluster({"dgx-h100": 1}, (("dgx-00", "gpu-0"),))
    assert Chooser(near, reserve=1).choose(nodes, [claim("gpu-1")]) is None
    half, nodes = cluster({"dgx-h100": 1}, tuple(("dgx-00", f"gpu-{i}") for i in range(4)))
    assert Chooser(half, reserve=1).choose(nodes, [claim("gpu-1")]) is not None


@pytest.mark.parametrize(
    ("hold_mig", "held"),
    [
        pytest.param(False, False, id="mig-domains-left-for-mig"),
        pytest.param(True, True, id="mig-domains-held-on-request"),
    ],
)
def test_reserve_and_mig_capable_domains(hold_mig: bool, held: bool) -> None:
    allocator, nodes = cluster({"a100-mig": 1})
    chooser = Chooser(allocator, reserve=1, hold_mig_domains=hold_mig)
    assert (chooser.choose(nodes, [claim("gpu-1")]) is None) == held


def test_same_input_same_choice() -> None:
    picks = []
    for _ in range(2):
        allocator, nodes = cluster({"dgx-h100": 2, "l4-pcie": 1, "a100-mig": 1})
        chooser = Chooser(allocator)
        for i, shape in enumerate(["gpu-2", "mig", "gpu-4-nvl", "gpu-1", "mig"]):
            claims = [claim(shape, f"c{i}")]
            choice = chooser.choose(nodes, claims)
            assert choice is not None
            assert kubernetes_accepts(allocator, choice.node, claims, choice.results)
            allocator.state.apply(choice.results)
            picks.append((choice.node.name, devices(choice.results)))
    assert picks[:5] == picks[5:]


@pytest.mark.parametrize(
    ("free", "value"),
    [
        pytest.param(0, 0.0, id="none"),
        pytest.param(1, 1.0, id="one"),
        pytest.param(3, 3.2, id="pair-and-one"),
        pytest.param(7, 8.2, id="four-pair-one"),
        pytest.param(8, 14.0, id="whole-eight"),
    ],
)
def test_block_value(free: int, value: float) -> None:
    assert block_value(free) == pytest.approx(value)


def _mig_result(request: str) -> list[AllocationResult]:
    from gpudra_api import DeviceRequestAllocationResult

    return [AllocationResult((DeviceRequestAllocationResult(request, DRIVER, "p", "d"),))]


@pytest.mark.parametrize(
    ("chosen", "steps"),
    [
        pytest.param("gpu/small", 0, id="first"),
        pytest.param("gpu/medium", 1, id="second"),
        pytest.param("gpu/full", 2, id="third"),
    ],
)
def test_alternative_steps(chosen: str, steps: int) -> None:
    assert alternative_steps([claim("mig")], _mig_result(chosen)) == steps


def test_accepts_rejects_an_allocation_the_rules_forbid() -> None:
    allocator, nodes = cluster({"dgx-h100": 1}, domains=HALF_DOMAINS)
    claims = [claim("gpu-4-nvl")]
    found = allocator.allocate(nodes[0], claims)
    assert found.results is not None
    assert kubernetes_accepts(allocator, nodes[0], claims, found.results)
    from dataclasses import replace

    result = found.results[0]
    mixed = tuple(replace(r, device=f"gpu-{i * 2}") for i, r in enumerate(result.results))
    forged: Any = [replace(result, results=mixed)]  # gpu-0,2,4,6 straddle two domains
    assert not kubernetes_accepts(allocator, nodes[0], claims, forged)


HOME = MIG_HOME + "nvswitch-0"


@pytest.mark.parametrize(
    ("busy", "options", "held"),
    [
        pytest.param(
            (),
            {},
            {("a100-00", HOME), ("a100-01", "nvswitch-0")},
            id="no-partitions-home-by-name-other-held",
        ),
        pytest.param(
            (("a100-01", "gpu-0-mig-1g-10gb-0"),),
            {},
            {("a100-01", HOME), ("a100-00", "nvswitch-0")},
            id="home-follows-the-partitioned-gpus",
        ),
        pytest.param(
            (("a100-00", "gpu-0"),),
            {},
            {("a100-01", HOME), ("a100-00", "nvswitch-0")},
            id="home-most-free-when-none-partitioned",
        ),
        pytest.param(
            (),
            {"hold_mig_domains": True},
            {("a100-00", "nvswitch-0"), ("a100-01", "nvswitch-0")},
            id="hold-mig-domains-holds-all-no-home",
        ),
        pytest.param((), {"mig_homes": 0}, set(), id="mig-homes-0-holds-none"),
    ],
)
def test_mig_home_is_left_out_of_the_reserve(
    busy: tuple[tuple[str, str], ...], options: dict[str, Any], held: set[tuple[str, str]]
) -> None:
    allocator, _ = cluster({"a100-mig": 2}, busy)
    chooser = Chooser(allocator, reserve=2, **options)
    assert chooser.held_domains(allocator.state, 2) == held


SEVEN_BUSY = tuple(("a100-00", f"gpu-{i}") for i in range(7))
PARTITIONED = (("a100-00", "gpu-0-mig-1g-10gb-0"), *(("a100-00", f"gpu-{i}") for i in range(1, 7)))


@pytest.mark.parametrize(
    ("busy", "shape", "fits"),
    [
        pytest.param((), "gpu-8-nvl", False, id="home-not-taken-whole"),
        pytest.param((), "gpu-4-nvl", True, id="home-takes-smaller-work"),
        pytest.param(SEVEN_BUSY, "gpu-1", False, id="last-whole-gpu-kept-for-mig"),
        pytest.param(SEVEN_BUSY, "mig", True, id="mig-may-partition-the-last-whole-gpu"),
        pytest.param(PARTITIONED, "gpu-1", True, id="last-whole-gpu-free-while-slices-have-room"),
    ],
)
def test_mig_home_guard(busy: tuple[tuple[str, str], ...], shape: str, fits: bool) -> None:
    allocator, nodes = cluster({"a100-mig": 1}, busy)
    choice = Chooser(allocator, reserve=1).choose(nodes, [claim(shape)])
    assert (choice is not None) == fits
    if choice is not None:
        problems = validate_allocation(allocator, choice.node, [claim(shape)], choice.results)
        assert problems == []


def test_eight_gpu_claim_goes_to_the_held_domain_not_the_mig_home() -> None:
    allocator, nodes = cluster({"a100-mig": 2})
    chooser = Chooser(allocator, reserve=2)
    first = chooser.choose(nodes, [claim("gpu-8-nvl", "a")])
    assert first is not None
    assert first.node.name == "a100-01"
    allocator.state.apply(first.results)
    assert chooser.choose(nodes, [claim("gpu-8-nvl", "b")]) is None


@pytest.mark.parametrize(
    ("busy", "shape", "fits"),
    [
        pytest.param((), "gpu-8-nvl", True, id="home-without-slices-taken-whole"),
        pytest.param(
            (("a100-00", "gpu-7-mig-1g-10gb-0"),),
            "gpu-8-nvl",
            False,
            id="home-with-a-slice-in-use-not-taken",
        ),
        pytest.param(SEVEN_BUSY, "gpu-1", False, id="last-whole-gpu-still-kept-for-mig"),
    ],
)
def test_home_whole(busy: tuple[tuple[str, str], ...], shape: str, fits: bool) -> None:
    allocator, nodes = cluster({"a100-mig": 1}, busy)
    choice = Chooser(allocator, reserve=1, home_whole=True).choose(nodes, [claim(shape)])
    assert (choice is not None) == fits
    if choice is not None:
        problems = validate_allocation(allocator, choice.node, [claim(shape)], choice.results)
        assert problems == []


def test_home_whole_moves_the_home_to_another_domain() -> None:
    allocator, nodes = cluster({"a100-mig": 2})
    chooser = Chooser(allocator, reserve=2, home_whole=True)
    placed = []
    for name in ("a", "b"):
        choice = chooser.choose(nodes, [claim("gpu-8-nvl", name)])
        assert choice is not None
        assert (
            validate_allocation(allocator, choice.node, [claim("gpu-8-nvl", name)], choice.results)
            == []
        )
        allocator.state.apply(choice.results)
        placed.append(choice.node.name)
    assert sorted(placed) == ["a100-00", "a100-01"]


def mig(node: str, gpu: int, profile: str, *starts: int) -> tuple[tuple[str, str], ...]:
    return tuple((node, f"gpu-{gpu}-mig-{profile}-{s}") for s in starts)


def medium_claim(name: str = "c") -> ResourceClaim:
    """A claim for one 3g.40gb partition only (the `mig` shape's second alternative)."""
    doc = resource_claim("mig", name)
    request = doc["spec"]["devices"]["requests"][0]
    request["firstAvailable"] = [s for s in request["firstAvailable"] if s["name"] == "medium"]
    return parse_resource_claim(doc)


# partitioned GPUs in device order emptiest first, so the search meets the emptiest one first
FREE_5_3_1 = (
    *mig("a100-00", 0, "1g-10gb", 0, 1, 2),  # free 3-7: 5, a 3g.40gb fits at 4
    *mig("a100-00", 1, "3g-40gb", 0),  # free 5-7: 3
    *mig("a100-00", 1, "1g-10gb", 4),
    *mig("a100-00", 2, "3g-40gb", 4),  # free 3: 1
    *mig("a100-00", 2, "1g-10gb", 0, 1, 2),
)
FREE_5_3_LAST = (
    *FREE_5_3_1[:5],
    *mig("a100-00", 2, "1g-10gb", *range(7)),  # free 7: 1, which no 1g.10gb covers
)
FREE_7_5_4_3 = (
    *mig("a100-00", 0, "1g-10gb", 0),  # free 1-7: 7, a 3g.40gb fits at 4
    *mig("a100-00", 1, "1g-10gb", 0, 1, 2),  # free 3-7: 5, a 3g.40gb fits at 4
    *mig("a100-00", 2, "3g-40gb", 0),  # free 4-7: 4, a 3g.40gb fits at 4
    *mig("a100-00", 3, "3g-40gb", 0),  # free 5-7: 3
    *mig("a100-00", 3, "1g-10gb", 4),
)


@pytest.mark.parametrize(
    ("busy", "medium", "packing", "picked"),
    [
        pytest.param(FREE_5_3_1, False, 0.3, "gpu-2-mig-1g-10gb-3", id="1g-on-the-1-free"),
        pytest.param(
            FREE_5_3_LAST,
            False,
            0.3,
            "gpu-1-mig-1g-10gb-5",
            id="1g-on-the-3-free-when-1-free-unfit",
        ),
        pytest.param(FREE_7_5_4_3, False, 0.3, "gpu-3-mig-1g-10gb-5", id="1g-on-the-3-free-of-4"),
        pytest.param(FREE_5_3_1, True, 0.3, "gpu-0-mig-3g-40gb-4", id="3g-on-the-only-fit"),
        pytest.param(FREE_7_5_4_3, True, 0.3, "gpu-2-mig-3g-40gb-4", id="3g-on-the-4-free"),
        # without the rule the first partitioned GPU the search meets takes the slice
        pytest.param(FREE_5_3_1, False, 0.0, "gpu-0-mig-1g-10gb-3", id="off-1g-first-met"),
        pytest.param(FREE_7_5_4_3, True, 0.0, "gpu-0-mig-3g-40gb-4", id="off-3g-first-met"),
    ],
)
def test_slice_packing_takes_the_fullest_partitioned_gpu(
    busy: tuple[tuple[str, str], ...], medium: bool, packing: float, picked: str
) -> None:
    allocator, nodes = cluster({"a100-mig": 1}, busy)
    claims = [medium_claim() if medium else claim("mig")]
    choice = Chooser(allocator, slice_packing=packing).choose(nodes, claims)
    assert choice is not None
    assert devices(choice.results) == [picked]
    assert validate_allocation(allocator, choice.node, claims, choice.results) == []


def test_slice_packing_across_nodes() -> None:
    # the emptier partitioned GPU is on the first node, the fuller one on the second
    busy = (*mig("a100-00", 0, "1g-10gb", 0, 1), *mig("a100-01", 5, "1g-10gb", 0, 1, 2, 3, 4))
    allocator, nodes = cluster({"a100-mig": 2}, busy)
    claims = [claim("mig")]
    for packing, node, picked in ((0.0, "a100-00", "gpu-0"), (0.3, "a100-01", "gpu-5")):
        choice = Chooser(allocator, slice_packing=packing).choose(nodes, claims)
        assert choice is not None
        assert (choice.node.name, devices(choice.results)[0][:5]) == (node, picked)
        assert validate_allocation(allocator, choice.node, claims, choice.results) == []


def test_slice_packing_day_validates_and_matches_the_plain_chooser() -> None:
    # MIG claims come and go on two A100 nodes: every placement valid, the optimised chooser
    # (node keys, memo) answers as the plain one
    import random

    allocator, nodes = cluster({"a100-mig": 2, "l4-pcie": 1})
    fast = Chooser(allocator, slice_packing=0.3)
    plain = Chooser(allocator, slice_packing=0.3, optimise=False)
    rng = random.Random(7)
    live: list[tuple[ResourceClaim, list[AllocationResult]]] = []
    for i in range(120):
        if live and rng.random() < 0.45:
            _, results = live.pop(rng.randrange(len(live)))
            allocator.state.release(results)
            continue
        claims = [medium_claim(f"m{i}") if rng.random() < 0.15 else claim("mig", f"c{i}")]
        got, want = fast.choose(nodes, claims), plain.choose(nodes, claims)
        assert (got is None) == (want is None)
        if got is None or want is None:
            continue
        assert (got.node.name, got.results, got.score) == (want.node.name, want.results, want.score)
        assert validate_allocation(allocator, got.node, claims, got.results) == []
        allocator.state.apply(got.results)
        live.append((claims[0], got.results))
    assert len(live) > 10
