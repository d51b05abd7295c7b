"""The allocation-problem contract end to end: lines, node choice, sequences, explanations."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from gpudra_alloc import STAGES, run_lines, solve

CLASS = {
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
}


def _slice(node: str, gpus: int, **extra: Any) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"index": {"int": i}, "nvlinkDomain": {"string": f"nvl-{i // 4}"}},
            "capacity": {"memory": {"value": "80Gi"}},
            **extra,
        }
        for i in range(gpus)
    ]
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _claim(name: str, count: int = 1, **exactly: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu", "count": count, **exactly},
                    }
                ]
            }
        },
    }


def _devices(answer: dict[str, Any]) -> list[list[str]]:
    return [[d["device"] for d in r["devices"]["results"]] for r in answer["results"]]


def test_run_lines_answers_every_line_in_order_even_bad_ones() -> None:
    good = {"id": "a", "classes": [CLASS], "slices": [_slice("n1", 2)], "claims": [_claim("c")]}
    source = io.StringIO(
        json.dumps(good) + "\n" + "{not json\n" + "\n" + json.dumps({"id": "b", "claims": 3}) + "\n"
    )
    sink = io.StringIO()
    assert run_lines(source, sink, "first-fit") == 3
    answers = [json.loads(line) for line in sink.getvalue().splitlines()]
    assert [a["id"] for a in answers] == ["a", None, "b"]
    assert [a["outcome"] for a in answers] == ["allocated", "error", "error"]
    assert "not a JSON document" in answers[1]["error"]


def test_chooses_the_first_node_that_fits_and_reports_it() -> None:
    problem = {
        "classes": [CLASS],
        "nodes": [{"name": "n1"}, {"name": "n2"}],
        "slices": [_slice("n1", 2), _slice("n2", 8)],
        "claims": [_claim("c", 4)],
    }
    answer = solve(problem, "first-fit")
    assert answer["outcome"] == "allocated"
    assert answer["node"] == "n2"
    assert _devices(answer) == [["gpu-0", "gpu-1", "gpu-2", "gpu-3"]]


def test_match_attribute_keeps_devices_in_one_nvlink_domain() -> None:
    claim = _claim("c", 3)
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}]
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [_slice("n1", 8)],
        "allocatedDevices": [
            {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
            {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-2"},
        ],
        "claims": [claim],
    }
    answer = solve(problem, "first-fit")
    assert _devices(answer) == [["gpu-4", "gpu-5", "gpu-6"]]


def test_steps_see_earlier_allocations_and_releases() -> None:
    problem = {
        "classes": [CLASS],
        "slices": [_slice("n1", 2)],
        "steps": [
            {"allocate": [_claim("a")]},
            {"allocate": [_claim("b")]},
            {"allocate": [_claim("c")]},
            {"release": ["ml/a"]},
            {"allocate": [_claim("c")]},
            {"release": ["ml/nope"]},
            {"allocate": [_claim("b")]},
        ],
    }
    steps = solve(problem, "first-fit")["steps"]
    assert [s["outcome"] for s in steps] == [
        "allocated",
        "allocated",
        "unschedulable",
        "released",
        "allocated",
        "error",
        "error",
    ]
    assert _devices(steps[0]) == [["gpu-0"]]
    assert _devices(steps[1]) == [["gpu-1"]]
    assert _devices(steps[4]) == [["gpu-0"]]
    assert "already allocated" in steps[6]["error"]


def test_explanation_counts_what_each_stage_removed() -> None:
    claim = _claim(
        "c",
        2,
        selectors=[{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].index < 3'}}],
    )
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [
            _slice("n1", 4),
            {
                "metadata": {"name": "nic"},
                "spec": {
                    "driver": "nic.example.com",
                    "nodeName": "n1",
                    "pool": {"name": "nic", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "eth0"}],
                },
            },
        ],
        "allocatedDevices": [
            {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
            {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
        ],
        "claims": [claim],
    }
    answer = solve(problem, "first-fit")
    assert answer["outcome"] == "unschedulable"
    explanation = answer["explanation"]
    assert explanation["node"] == "n1"
    request = explanation["claims"][0]["requests"][0]
    assert set(request["removed"]) == set(STAGES)
    assert request["devices"] == 5
    assert request["removed"]["classSelector"] == 1
    assert request["removed"]["requestSelector"] == 1
    assert request["removed"]["allocated"] == 2
    assert request["candidates"] == 1
    assert explanation["closest"] == {"devicesAllocated": 1, "devicesRequested": 2}


def test_taint_and_capacity_stages_are_counted() -> None:
    taint = [{"key": "gpudra.io/unhealthy", "effect": "NoSchedule"}]
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [_slice("n1", 2, taints=taint)],
        "claims": [_claim("c")],
    }
    request = solve(problem, "first-fit")["explanation"]["claims"][0]["requests"][0]
    assert request["removed"]["taint"] == 2


def test_features_default_to_kubernetes_defaults() -> None:
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [_slice("n1", 1)],
        "allocatedDevices": [{"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}],
        "claims": [_claim("c", adminAccess=True)],
    }
    assert solve(problem, "first-fit")["outcome"] == "allocated"
    problem["features"] = ["PrioritizedList"]
    assert "admin access" in solve(problem, "first-fit")["error"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"features": ["Nope"]}, "unknown feature", id="unknown-feature"),
        pytest.param({"policy": "best"}, "policy", id="unknown-policy"),
        pytest.param(
            {"claims": None, "steps": None}, "exactly one of claims and steps", id="neither"
        ),
        pytest.param(
            {"allocatedDevices": [{"driver": "d"}]}, "allocatedDevices[0]", id="bad-allocated"
        ),
        pytest.param(
            {
                "allocatedCapacity": [
                    {"driver": "d", "pool": "p", "device": "x", "capacity": {"m": "lots"}}
                ]
            },
            "allocatedCapacity[0]",
            id="bad-capacity",
        ),
        pytest.param({"slices": [{"metadata": {"name": "s"}}]}, "ResourceSlice s", id="bad-slice"),
        pytest.param({"steps": [{"dance": []}], "claims": None}, "steps[0]", id="unknown-step"),
    ],
)
def test_malformed_problems_are_errors(change: dict[str, Any], message: str) -> None:
    problem: dict[str, Any] = {"classes": [CLASS], "slices": [], "claims": []}
    problem.update(change)
    problem = {k: v for k, v in problem.items() if v is not None}
    answer = solve(problem, "first-fit")
    assert answer["outcome"] == "error"
    assert message in answer["error"]


def test_cel_runtime_error_is_an_error_not_unschedulable() -> None:
    claim = _claim(
        "c", selectors=[{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].missing == 1'}}]
    )
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [_slice("n1", 1)],
        "claims": [claim],
    }
    answer = solve(problem, "first-fit")
    assert answer["outcome"] == "error"
    assert "gpu.nvidia.com/n1/gpu-0" in answer["error"]


def test_same_input_same_decision_including_share_ids() -> None:
    device_extra = {"allowMultipleAllocations": True}
    problem = {
        "node": {"name": "n1"},
        "classes": [CLASS],
        "slices": [_slice("n1", 1, **device_extra)],
        "claims": [
            _claim("a", capacity={"requests": {"memory": "10Gi"}}),
            _claim("b", capacity={"requests": {"memory": "70Gi"}}),
        ],
    }
    first = solve(problem, "first-fit")
    assert first["outcome"] == "allocated"
    assert first == solve(json.loads(json.dumps(problem)), "first-fit")
    shares = [r["devices"]["results"][0]["shareID"] for r in first["results"]]
    assert len(set(shares)) == 2
    assert first["results"][0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "10Gi"}


def test_a_pod_with_many_claims_of_many_devices_does_not_exhaust_the_stack() -> None:
    # 30 claims x 32 devices: the search holds ~1,000 levels at once (Python's default limit)
    slices = []
    for part in range(8):
        s = _slice("n1", 120)
        s["metadata"]["name"] = f"n1-part-{part}"
        s["spec"]["pool"]["resourceSliceCount"] = 8
        for device in s["spec"]["devices"]:
            device["name"] = f"{device['name']}-{part}"
        slices.append(s)
    claims = [_claim(f"c{i}", 32) for i in range(30)]
    problem = {"node": {"name": "n1"}, "classes": [CLASS], "slices": slices, "claims": claims}
    answer = solve(problem, "first-fit")
    assert answer["outcome"] == "allocated"
    assert sum(len(d) for d in _devices(answer)) == 960
