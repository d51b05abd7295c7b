from __future__ import annotations

import pytest

from gpudra_alloc import AllocatedState, Allocator, DeviceID
from gpudra_alloc.placement import Chooser
from gpudra_alloc.placement.memo import ScoreMemo, claims_shape
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


def cluster(counts: dict[str, int]) -> tuple[Allocator, list[Node]]:
    objects = build_fleet(Fleet(counts=counts))
    allocator = Allocator(
        [parse_device_class(c) for c in device_classes()],
        [parse_resource_slice(s) for s in objects.slices],
        state=AllocatedState(),
    )
    return allocator, [Node(n["name"], n["labels"]) for n in objects.nodes]


def claim(shape: str, name: str) -> ResourceClaim:
    return parse_resource_claim(resource_claim(shape, name))


def picked(node: Node, results: list[AllocationResult]) -> tuple[str, list[str]]:
    return node.name, [f"{r.pool}/{r.device}" for result in results for r in result.results]


FLEET = {"dgx-h100": 2, "a100-mig": 1, "l4-pcie": 1, "hgx-b200": 1}


@pytest.mark.parametrize(
    ("shapes", "release_every"),
    [
        pytest.param(["gpu-1"] * 12, 0, id="same-shape-fills-nodes"),
        pytest.param(["gpu-1", "gpu-2", "gpu-8-nvl", "mig", "mig", "gpu-4-nvl"] * 2, 0, id="mixed"),
        pytest.param(["mig", "gpu-1", "mig", "h100-plus", "gpu-2"] * 3, 3, id="with-releases"),
    ],
)
def test_remembered_scores_choose_what_a_fresh_chooser_chooses(
    shapes: list[str], release_every: int
) -> None:
    allocator, nodes = cluster(FLEET)
    chooser = Chooser(allocator)
    placed: list[list[AllocationResult]] = []
    for n, shape in enumerate(shapes):
        claims = [claim(shape, f"c{n}")]
        fresh = Chooser(allocator).choose(nodes, claims)
        remembered = chooser.choose(nodes, claims)
        if fresh is None or remembered is None:
            assert fresh is None
            assert remembered is None
            continue
        assert picked(remembered.node, remembered.results) == picked(fresh.node, fresh.results)
        assert remembered.score == fresh.score
        allocator.state.apply(remembered.results)
        placed.append(remembered.results)
        if release_every and n % release_every == release_every - 1:
            allocator.state.release(placed.pop(0))
    assert chooser.memo.hits > 0


def test_a_changed_node_is_searched_again() -> None:
    allocator, nodes = cluster({"dgx-h100": 2})
    chooser = Chooser(allocator)
    first = chooser.choose(nodes, [claim("gpu-8-nvl", "a")])
    assert first is not None
    allocator.state.apply(first.results)
    second = chooser.choose(nodes, [claim("gpu-8-nvl", "b")])
    assert second is not None
    assert second.node.name != first.node.name
    allocator.state.apply(second.results)
    assert chooser.choose(nodes, [claim("gpu-8-nvl", "c")]) is None


def test_memo_misses_after_the_key_changes() -> None:
    memo = ScoreMemo()
    shape = claims_shape([claim("gpu-1", "x")])
    same = claims_shape([claim("gpu-1", "y")])
    other = claims_shape([claim("gpu-2", "x")])
    assert shape is not None
    assert same is not None
    assert other is not None
    memo.put("k1", shape, (1.0, 7, 0))
    assert memo.get("k1", same) == (True, (1.0, 7, 0))
    assert memo.get("k1", other) == (False, None)
    assert memo.get("k2", shape) == (False, None)


@pytest.mark.parametrize(
    ("busy", "freed"),
    [
        pytest.param(("gpu-0",), (), id="one-taken"),
        pytest.param(("gpu-0", "gpu-1", "gpu-2"), ("gpu-1",), id="taken-then-one-freed"),
        pytest.param(tuple(f"gpu-{i}" for i in range(8)), ("gpu-7",), id="full-then-one-freed"),
    ],
)
def test_remembered_free_state_follows_the_state(
    busy: tuple[str, ...], freed: tuple[str, ...]
) -> None:
    allocator, nodes = cluster({"dgx-h100": 1})
    chooser = Chooser(allocator)
    view = chooser.view(nodes[0])
    pool = allocator.pools_for(nodes[0])[0].name
    state = allocator.state

    def in_use() -> int:
        return chooser.node_keys.state_ids(nodes, state)[0]

    assert chooser._free(view, state, in_use()).free_gpus == 8
    state.devices.update(DeviceID(DRIVER, pool, d) for d in busy)
    after = chooser._free(view, state, in_use())
    assert after.free_gpus == 8 - len(busy)
    state.devices.difference_update(DeviceID(DRIVER, pool, d) for d in freed)
    again = chooser._free(view, state, in_use())
    assert again.free_gpus == view.free(state).free_gpus == 8 - len(busy) + len(freed)


def test_the_reserves_remembered_ranking_follows_state_and_settings() -> None:
    allocator, nodes = cluster({"dgx-h100": 3, "a100-mig": 2})
    chooser = Chooser(allocator)
    plain = Chooser(allocator, optimise=False)
    state = allocator.state

    def same() -> None:
        assert chooser.held_domains(state, 2) == plain.held_domains(state, 2)

    same()
    got = chooser.choose(nodes, [claim("gpu-2", "a")])
    assert got is not None
    state.apply(got.results)
    same()
    for settings in ({"hold_mig_domains": True}, {"mig_homes": 0}, {"mig_homes": 2}):
        for name, value in settings.items():
            setattr(chooser, name, value)
            setattr(plain, name, value)
        same()
    state.release(got.results)
    same()
