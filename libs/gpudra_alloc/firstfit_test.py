"""First-fit's verdict for a pod that fits nowhere: a CEL run-time error on a node it passes over
is the pod's error, as in kube-scheduler (whose DynamicResources filter runs the allocator on every
node and aborts the scheduling cycle with an error when one node's allocation fails)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import AllocatedState, Allocator, DeviceID, Features
from gpudra_alloc.dispatch import Dispatch
from gpudra_alloc.firstfit import first_fit
from gpudra_alloc.placement import answer_pod
from gpudra_alloc.pools import entries_of
from gpudra_alloc.search import Search
from gpudra_api import Node, parse_device_class, parse_resource_claim, parse_resource_slice

DRIVER = "gpu.nvidia.com"
CLASS = parse_device_class(
    {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
)
# a run-time error ("no such key") on a device without the attribute
BROKEN = 'device.attributes["gpu.nvidia.com"].model == "h100"'


def _slice(node: str, devices: list[dict[str, Any]]) -> Any:
    return parse_resource_slice(
        {
            "metadata": {"name": node},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    )


def _gpu(name: str, model: str | None) -> dict[str, Any]:
    attributes = {"model": {"string": model}} if model is not None else {}
    return {"name": name, "attributes": attributes}


def _claim(name: str, count: int, expression: str = BROKEN) -> Any:
    request = {
        "deviceClassName": "gpu",
        "count": count,
        "selectors": [{"cel": {"expression": expression}}],
    }
    return parse_resource_claim(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
        }
    )


def _cluster(busy: list[tuple[str, str]]) -> tuple[Allocator, list[Node]]:
    """Node a: two GPUs, one without a model (the selector fails on it); node b: two A100s."""
    slices = [
        _slice("a", [_gpu("gpu-0", "h100"), _gpu("gpu-1", None)]),
        _slice("b", [_gpu("gpu-0", "a100"), _gpu("gpu-1", "a100")]),
    ]
    state = AllocatedState()
    state.devices.update(DeviceID(DRIVER, pool, device) for pool, device in busy)
    return Allocator([CLASS], slices, Features(), state), [Node("a"), Node("b")]


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
def test_error_on_a_node_with_too_few_free_devices_is_the_pods_error(policy: str) -> None:
    # a's one free GPU is the one the selector fails on: Kubernetes' search on a evaluates the
    # selector there and fails; first-fit passes a over (one free device, two needed)
    allocator, nodes = _cluster(busy=[("a", "gpu-0")])
    answer = Dispatch(allocator, policy, None, nodes).pod([_claim("c", 2)])
    assert answer["outcome"] == "error", answer
    assert "CEL runtime error: no such key: model" in answer["error"]
    assert "gpu.nvidia.com/a/gpu-1" in answer["error"]
    contract = answer_pod(allocator, nodes, [_claim("c", 2)], policy)
    assert contract["outcome"] == "error", contract
    assert contract["error"] == answer["error"]


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
def test_an_in_use_device_raises_nothing(policy: str) -> None:
    # the broken GPU is in use: Kubernetes' search skips it before its selectors
    allocator, nodes = _cluster(busy=[("a", "gpu-1")])
    answer = Dispatch(allocator, policy, None, nodes).pod([_claim("c", 2)])
    assert answer["outcome"] == "unschedulable"
    assert first_fit(allocator, nodes, [_claim("c", 2)]) is not None


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
def test_an_error_the_search_never_reaches_raises_nothing(policy: str) -> None:
    # node a's free GPU fails the second request's selector, but no device passes the first
    # request's, so Kubernetes' search never evaluates the second one there
    allocator, nodes = _cluster(busy=[("a", "gpu-0")])
    requests = [
        {
            "name": "first",
            "exactly": {
                "deviceClassName": "gpu",
                "count": 2,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.attributes["gpu.nvidia.com"].?model.orValue("") == "v100"'
                        }
                    }
                ],
            },
        },
        {
            "name": "second",
            "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": BROKEN}}]},
        },
    ]
    claim = parse_resource_claim(
        {
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": requests}},
        }
    )
    outcome = first_fit(allocator, nodes, [claim])
    assert outcome is not None
    assert outcome.results is None
    assert Dispatch(allocator, policy, None, nodes).pod([claim])["outcome"] == "unschedulable"


def test_a_node_that_fits_is_chosen_as_before() -> None:
    allocator, nodes = _cluster(busy=[("a", "gpu-0")])
    fits = _claim("c", 1, 'device.attributes["gpu.nvidia.com"].?model.orValue("") == "a100"')
    outcome = first_fit(allocator, nodes, [fits])
    assert outcome is not None
    assert outcome.node.name == "b"
    assert outcome.results is not None
    again = allocator.choose_node(nodes, [fits])
    assert again is not None
    assert (again.node, again.results) == (outcome.node, outcome.results)


def test_a_release_that_frees_a_failing_device_is_seen() -> None:
    # the first answer finds no failing device (the broken GPU is in use) and is remembered;
    # then the broken GPU is released and the other one taken: a's search now fails
    allocator, nodes = _cluster(busy=[("a", "gpu-1")])
    dispatch = Dispatch(allocator, "first-fit", None, nodes)
    assert dispatch.pod([_claim("c", 2)])["outcome"] == "unschedulable"
    assert dispatch.pod([_claim("d", 2)])["outcome"] == "unschedulable"
    allocator.state.devices.discard(DeviceID(DRIVER, "a", "gpu-1"))
    allocator.state.devices.add(DeviceID(DRIVER, "a", "gpu-0"))
    answer = dispatch.pod([_claim("c", 2)])
    assert answer["outcome"] == "error"
    assert "gpu.nvidia.com/a/gpu-1" in answer["error"]


def test_a_new_slice_with_a_failing_device_is_seen() -> None:
    allocator, nodes = _cluster(busy=[("a", "gpu-1")])
    dispatch = Dispatch(allocator, "first-fit", None, [*nodes, Node("c")])
    assert dispatch.pod([_claim("c", 2)])["outcome"] == "unschedulable"
    allocator.add_slice(_slice("c", [_gpu("gpu-0", None)]))
    answer = dispatch.pod([_claim("c", 2)])
    assert answer["outcome"] == "error"
    assert "gpu.nvidia.com/c/gpu-0" in answer["error"]


def test_a_request_for_all_devices_looks_at_devices_in_use_too() -> None:
    # Kubernetes gathers "All" devices before the search, in use or not, evaluating selectors
    allocator, nodes = _cluster(busy=[("a", "gpu-1")])
    every = parse_resource_claim(
        {
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "r",
                            "exactly": {
                                "deviceClassName": "gpu",
                                "allocationMode": "All",
                                "selectors": [{"cel": {"expression": BROKEN}}],
                            },
                        }
                    ]
                }
            },
        }
    )
    search = Search(
        allocator.features,
        allocator.state,
        allocator.selectors,
        nodes[1],
        allocator.pools_for(nodes[1]),
        [every],
        allocator.classes,
    )
    search.prepare()  # node b: its GPUs have a model
    broken = next(
        e
        for s in allocator.slices
        for e in entries_of(s)
        if e.id.device == "gpu-1" and e.id.pool == "a"
    )
    assert search.fails_on(broken)
    assert not search.fails_on(next(e for e in entries_of(allocator.slices[1])))
    assert Dispatch(allocator, "first-fit", None, nodes).pod([every])["outcome"] == "error"
