"""Allocator front: node choice in order, the full-node shortcut stays exact across releases."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import AllocatedState, AllocationInputError, Allocator, DeviceID, Features
from gpudra_api import Node, parse_device_class, parse_resource_claim, parse_resource_slice

CLASS = parse_device_class(
    {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
)


def _slice(node: str, gpus: int) -> Any:
    return parse_resource_slice(
        {
            "metadata": {"name": node},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(gpus)],
            },
        }
    )


def _claim(name: str, count: int = 1) -> Any:
    return parse_resource_claim(
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "r", "exactly": {"deviceClassName": "gpu", "count": count}}
                    ]
                }
            },
        }
    )


def test_fills_nodes_in_order_and_reuses_released_devices() -> None:
    state = AllocatedState()
    allocator = Allocator([CLASS], [_slice(f"n{i}", 2) for i in range(4)], Features(), state)
    nodes = [Node(f"n{i}") for i in range(4)]
    placed = []
    held = []
    for i in range(8):
        outcome = allocator.choose_node(nodes, [_claim(f"c{i}")])
        assert outcome is not None
        assert outcome.results is not None
        placed.append(outcome.node.name)
        held.append(outcome.results)
        state.apply(outcome.results)
    assert placed == ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"]
    full = allocator.choose_node(nodes, [_claim("extra")])
    assert full is not None
    assert full.results is None
    state.release(held[3])  # frees one device on n1
    again = allocator.choose_node(nodes, [_claim("again")])
    assert again is not None
    assert again.node.name == "n1"


def test_two_device_claims_skip_nodes_with_one_free_device() -> None:
    state = AllocatedState()
    allocator = Allocator([CLASS], [_slice("a", 3), _slice("b", 3)], Features(), state)
    nodes = [Node("a"), Node("b")]
    first = allocator.choose_node(nodes, [_claim("x", 2)])
    assert first is not None
    assert first.results is not None
    state.apply(first.results)
    second = allocator.choose_node(nodes, [_claim("y", 2)])
    assert second is not None
    assert second.node.name == "b"
    # a one-device claim still finds the remaining device on the first node
    third = allocator.choose_node(nodes, [_claim("z", 1)])
    assert third is not None
    assert third.node.name == "a"


def test_candidates_come_in_kubernetes_order() -> None:
    allocator = Allocator([CLASS], [_slice("a", 3)], Features())
    solutions = list(allocator.candidates(Node("a"), [_claim("x", 2)], limit=10))
    picked = [[r.device for r in s[0].results] for s in solutions]
    assert picked == [["gpu-0", "gpu-1"], ["gpu-0", "gpu-2"], ["gpu-1", "gpu-2"]]


def test_a_search_past_its_deadline_leaves_the_node_unschedulable() -> None:
    # 24 partitions share a counter that only 11 of them fit into; 12 are wanted: the search
    # tries every combination of 11 (millions) before it could give up.
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2}
    devices = [
        {
            "name": f"d{i}",
            "consumesCounters": [{"counterSet": "s", "counters": {"c": {"value": "1"}}}],
        }
        for i in range(24)
    ]
    slices = [
        parse_resource_slice(
            {
                "metadata": {"name": "a"},
                "spec": {"driver": "d", "nodeName": "n", "pool": pool, "devices": devices},
            }
        ),
        parse_resource_slice(
            {
                "metadata": {"name": "b"},
                "spec": {
                    "driver": "d",
                    "nodeName": "n",
                    "pool": pool,
                    "sharedCounters": [{"name": "s", "counters": {"c": {"value": "11"}}}],
                },
            }
        ),
    ]
    allocator = Allocator([CLASS], slices, Features(), timeout_s=0.2)
    outcome = allocator.allocate(Node("n"), [_claim("c", 12)])
    assert outcome.results is None
    assert "timed out" in outcome.reason
    # candidates (placement's entry) stop at the same deadline instead of running for hours
    assert list(allocator.candidates(Node("n"), [_claim("c", 12)], limit=5)) == []


@pytest.mark.parametrize(
    ("masked", "first", "count"),
    [
        pytest.param(set(), ["gpu-0", "gpu-1"], 3, id="own-state"),
        pytest.param({"gpu-0"}, ["gpu-1", "gpu-2"], 1, id="stricter-state-steers"),
        pytest.param({"gpu-0", "gpu-1"}, None, 0, id="stricter-state-too-full"),
    ],
)
def test_a_given_state_is_searched_and_the_own_state_is_untouched(
    masked: set[str], first: list[str] | None, count: int
) -> None:
    allocator = Allocator([CLASS], [_slice("a", 3)], Features())
    state = AllocatedState(devices={DeviceID("gpu.nvidia.com", "a", d) for d in masked})
    outcome = allocator.allocate(Node("a"), [_claim("x", 2)], state=state)
    picked = None if outcome.results is None else [r.device for r in outcome.results[0].results]
    assert picked == first
    solutions = list(allocator.candidates(Node("a"), [_claim("x", 2)], limit=10, state=state))
    assert len(solutions) == count
    assert not allocator.state.devices  # the allocator's own state is never swapped


def test_a_shareable_device_serves_more_requests_than_it_counts_as_devices() -> None:
    # One multi-allocatable device can serve every request of a claim (Kubernetes does not mark
    # it in use while allocating), so "one device, two requests" is no reason to skip the node.
    shared = parse_resource_slice(
        {
            "metadata": {"name": "a"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "a",
                "pool": {"name": "a", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "allowMultipleAllocations": True,
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                ],
            },
        }
    )
    request = {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "10Gi"}}}
    claim = parse_resource_claim(
        {
            "metadata": {"name": "two"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "r0", "exactly": request},
                        {"name": "r1", "exactly": request},
                    ]
                }
            },
        }
    )
    allocator = Allocator([CLASS], [shared], Features())
    on_node = allocator.allocate(Node("a"), [claim])
    assert on_node.results is not None
    chosen = allocator.choose_node([Node("a")], [claim])
    assert chosen is not None
    assert chosen.results is not None
    assert [r.device for r in chosen.results[0].results] == ["gpu-0", "gpu-0"]


def _bad_claim(reason: str) -> Any:
    request: dict[str, Any] = {"deviceClassName": "gpu", "count": 3}
    if reason == "unknown-class":
        request["deviceClassName"] = "tpu"
    elif reason == "claim-limit":
        request["count"] = 33
    elif reason == "feature-off":
        request["capacity"] = {"requests": {"memory": "1Gi"}}
    return parse_resource_claim(
        {
            "metadata": {"name": "bad"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
        }
    )


@pytest.mark.parametrize("reason", ["unknown-class", "claim-limit", "feature-off"])
def test_invalid_claims_fail_as_on_one_node_when_every_node_is_too_small(reason: str) -> None:
    # Kubernetes rejects such a claim on every node it tries; the shortcut past nodes with too
    # few free devices must not turn that into "unschedulable".
    features = Features.from_names(["AdminAccess", "PrioritizedList"])
    allocator = Allocator([CLASS], [_slice("a", 2), _slice("b", 1)], features)
    with pytest.raises(AllocationInputError) as on_node:
        allocator.allocate(Node("a"), [_bad_claim(reason)])
    with pytest.raises(AllocationInputError) as chosen:
        allocator.choose_node([Node("a"), Node("b")], [_bad_claim(reason)])
    assert str(chosen.value) == str(on_node.value)
