"""The rule-by-rule validator: every rule has a forged allocation that breaks it, valid ones
pass, and every upstream case's answer passes under both policies."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from gpudra_alloc import AllocatedState, Allocator, DeviceID, solve, validate_allocation
from gpudra_alloc.contract_test import CLASS, _slice
from gpudra_alloc.problem import parse_problem
from gpudra_api import (
    AllocationResult,
    DeviceRequestAllocationResult,
    Node,
    Quantity,
    ResourceClaim,
    parse_resource_claim,
)

GPU = "gpu.nvidia.com"


def _class(name: str, driver: str) -> dict[str, Any]:
    expression = f'device.driver == "{driver}"'
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _pool(driver: str, name: str, devices: list[Any], **spec: Any) -> dict[str, Any]:
    pool = {"name": name, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": "n1", "pool": pool, "devices": devices, **spec},
    }


def _problem() -> dict[str, Any]:
    gpus = _slice("n1", 8)
    gpus["spec"]["devices"][7]["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    memory = {"memory": {"value": "4Gi"}}
    parts = _pool(
        "part.example.com",
        "parts",
        [
            {"name": "p-4", "consumesCounters": [{"counterSet": "set", "counters": memory}]},
            {
                "name": "p-6",
                "consumesCounters": [
                    {"counterSet": "set", "counters": {"memory": {"value": "6Gi"}}}
                ],
            },
        ],
    )
    counters = _pool(
        "part.example.com",
        "parts",
        [],
        sharedCounters=[{"name": "set", "counters": {"memory": {"value": "8Gi"}}}],
    )
    parts["spec"]["pool"]["resourceSliceCount"] = counters["spec"]["pool"]["resourceSliceCount"] = 2
    counters["metadata"]["name"] = "parts-counters"
    shared = _pool(
        "share.example.com",
        "shared",
        [
            {
                "name": "s0",
                "allowMultipleAllocations": True,
                "capacity": {"memory": {"value": "10Gi"}},
            }
        ],
    )
    nic = _pool("nic.example.com", "nic", [{"name": "eth0"}])
    return {
        "node": {"name": "n1"},
        "classes": [
            CLASS,
            _class("part", "part.example.com"),
            _class("share", "share.example.com"),
        ],
        "slices": [gpus, _slice("n2", 2), parts, counters, shared, nic],
        "claims": [],
    }


def _claim(name: str, *requests: dict[str, Any], constraints: Any = ()) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return parse_resource_claim(
        {"metadata": {"name": name, "namespace": "ml"}, "spec": {"devices": devices}}
    )


def _exact(count: int = 1, name: str = "r", cls: str = "gpu", **more: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, "count": count, **more}}


def _dev(device: str, request: str = "r", pool: str = "n1", driver: str = GPU, **more: Any) -> Any:
    return DeviceRequestAllocationResult(request, driver, pool, device, **more)


def _result(*devices: DeviceRequestAllocationResult) -> AllocationResult:
    return AllocationResult(tuple(devices))


SELECT_LOW = [{"cel": {"expression": f'device.attributes["{GPU}"].index < 2'}}]
MATCH = [{"matchAttribute": f"{GPU}/nvlinkDomain"}]
DISTINCT = [{"distinctAttribute": f"{GPU}/nvlinkDomain"}]
FIRST = {
    "name": "r",
    "firstAvailable": [
        {"name": "a", "deviceClassName": "gpu", "count": 1},
        {"name": "b", "deviceClassName": "gpu", "count": 1},
    ],
}
PART = [_exact(1, "x", "part"), _exact(1, "y", "part")]
SIX = {"requests": {"memory": "6Gi"}}
SIX_GI = {"memory": Quantity.parse("6Gi")}
SHARE = _exact(1, "r", "share", capacity=SIX)


def _shared(share: str | None, request: str = "r") -> Any:
    return _dev(
        "s0", request, "shared", "share.example.com", share_id=share, consumed_capacity=SIX_GI
    )


CASES = [
    pytest.param([_claim("c", _exact(2))], [_result(_dev("gpu-0"), _dev("gpu-1"))], (), None, id="valid"),
    pytest.param([_claim("c", _exact(3), constraints=MATCH)], [_result(_dev("gpu-4"), _dev("gpu-5"), _dev("gpu-6"))], (), None, id="valid-match"),
    pytest.param([_claim("c", _exact(2), constraints=DISTINCT)], [_result(_dev("gpu-0"), _dev("gpu-4"))], (), None, id="valid-distinct"),
    pytest.param([_claim("c", {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "selectors": SELECT_LOW}})], [_result(_dev("gpu-0"), _dev("gpu-1"))], (), None, id="valid-all"),
    pytest.param([_claim("c", FIRST)], [_result(_dev("gpu-0", "r/b"))], (), None, id="valid-later-alternative"),
    pytest.param([_claim("c", *PART)], [_result(_dev("p-4", "x", "parts", "part.example.com"))], (), "y: no devices allocated", id="request-without-devices"),
    pytest.param([_claim("c", _exact(1, "x", "part"))], [_result(_dev("p-6", "x", "parts", "part.example.com"))], (), None, id="valid-counters"),
    pytest.param([_claim("c", SHARE), _claim("d", SHARE)], [_result(_shared("a")), _result(_shared("b"))], (), "capacity memory of share.example.com/shared/s0 is overdrawn", id="shared-capacity-overdrawn"),
    pytest.param([_claim("c", SHARE)], [_result(_shared("a"))], (), None, id="valid-shared"),
    pytest.param([_claim("c", SHARE)], [_result(_shared(None))], (), "a shared device without a share ID", id="shared-without-share-id"),
    pytest.param([_claim("c", _exact(2))], [_result(_dev("gpu-0"))], (), "1 devices for count 2", id="count"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-0")), _result(_dev("gpu-1"))], (), "2 allocation results for 1 claims", id="results-per-claim"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-0", "nope"))], (), "no request named nope", id="unknown-request"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-0", pool="n2"))], (), "is not in a usable pool on node n1", id="other-node"),
    pytest.param([_claim("c", _exact(2))], [_result(_dev("gpu-0"), _dev("gpu-0"))], (), "is listed twice", id="listed-twice"),
    pytest.param([_claim("c", _exact(1)), _claim("d", _exact(1))], [_result(_dev("gpu-0")), _result(_dev("gpu-0"))], (), "is allocated twice", id="two-claims-one-device"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-1"))], ("gpu-1",), "fails the allocated stage", id="in-use"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("eth0", pool="nic", driver="nic.example.com"))], (), "fails the classSelector stage", id="class-selector"),
    pytest.param([_claim("c", _exact(1, selectors=SELECT_LOW))], [_result(_dev("gpu-5"))], (), "fails the requestSelector stage", id="request-selector"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-7"))], (), "fails the taint stage", id="taint"),
    pytest.param([_claim("c", _exact(3), constraints=MATCH)], [_result(_dev("gpu-3"), _dev("gpu-4"), _dev("gpu-5"))], (), f"breaks matchAttribute {GPU}/nvlinkDomain", id="match-attribute"),
    pytest.param([_claim("c", _exact(2), constraints=DISTINCT)], [_result(_dev("gpu-0"), _dev("gpu-1"))], (), f"breaks distinctAttribute {GPU}/nvlinkDomain", id="distinct-attribute"),
    pytest.param([_claim("c", {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "selectors": SELECT_LOW}})], [_result(_dev("gpu-0"))], (), "allocation mode All needs all 2 selected devices, got 1", id="all-mode-short"),
    pytest.param([_claim("c", FIRST)], [_result(_dev("gpu-0", "r/a"), _dev("gpu-1", "r/b"))], (), "both r/a and r/b", id="two-alternatives"),
    pytest.param([_claim("c", _exact(1))], [_result(_dev("gpu-0", admin_access=True))], (), "admin access differs", id="admin-access"),
    pytest.param([_claim("c", *PART)], [_result(_dev("p-4", "x", "parts", "part.example.com"), _dev("p-6", "y", "parts", "part.example.com"))], (), "counter memory of part.example.com/parts/set is overdrawn", id="counters-overdrawn-by-the-pod"),
]  # fmt: skip


@pytest.mark.parametrize(("claims", "results", "busy", "message"), CASES)
def test_rules(
    claims: list[ResourceClaim],
    results: list[AllocationResult],
    busy: tuple[str, ...],
    message: str | None,
) -> None:
    parsed = parse_problem(_problem(), "first-fit")
    allocator = Allocator(parsed.classes, parsed.slices, parsed.features)
    state = AllocatedState(devices={DeviceID(GPU, "n1", d) for d in busy})
    problems = validate_allocation(allocator, Node("n1"), claims, results, state)
    if message is None:
        assert problems == []
    else:
        assert any(message in p for p in problems), problems


def _upstream() -> list[Any]:
    folder = resources.files("gpudra_alloc").joinpath("testdata", "upstream")
    cases = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            for case in yaml.safe_load(item.read_text())["cases"]:
                if case["expect"]["outcome"] == "allocated":
                    cases.append(pytest.param(case, id=f"{item.name[:-5]}/{case['name']}"))
    return cases


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
@pytest.mark.parametrize("case", _upstream())
def test_every_upstream_allocation_passes_under_both_policies(
    case: dict[str, Any], policy: str
) -> None:
    parsed = parse_problem(case["problem"], policy)
    checker = Allocator(parsed.classes, parsed.slices, parsed.features)
    problems: list[str] = []
    checked: list[str] = []

    def audit(node: Node, claims: Any, results: Any, state: AllocatedState) -> None:
        checked.append(node.name)
        problems.extend(validate_allocation(checker, node, claims, results, state))

    answer = solve(dict(case["problem"]), policy, audit=audit)
    assert answer["outcome"] == "allocated"
    assert problems == []
    assert len(checked) == (1 if answer["results"] else 0)


def test_all_leaves_out_devices_with_binding_conditions_when_the_feature_is_off() -> None:
    # Kubernetes' "All" takes only selectable devices, and a device with binding conditions is
    # not selectable while DeviceBindingAndStatus is off, also when it is in use.
    devices = [
        {"name": "d0"},
        {"name": "d1", "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]},
        {"name": "d2", "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]},
    ]
    all_mode = {"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}
    problem = {
        "features": ["AdminAccess", "ConsumableCapacity", "PartitionableDevices", "DeviceTaints"],
        "node": "n1",
        "classes": [_class("gpu", GPU)],
        "slices": [_pool(GPU, "n1", devices)],
        "allocatedDevices": [{"driver": GPU, "pool": "n1", "device": "d2"}],
        "claims": [{"metadata": {"name": "c"}, "spec": {"devices": {"requests": [all_mode]}}}],
    }
    parsed = parse_problem(problem, "first-fit")
    checker = Allocator(parsed.classes, parsed.slices, parsed.features)
    problems: list[str] = []

    def audit(node: Node, claims: Any, results: Any, state: AllocatedState) -> None:
        problems.extend(validate_allocation(checker, node, claims, results, state))

    answer = solve(problem, "first-fit", audit=audit)
    assert answer["outcome"] == "allocated"
    assert [d["device"] for d in answer["results"][0]["devices"]["results"]] == ["d0"]
    assert problems == []
