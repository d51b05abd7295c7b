from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from gpudra_alloc.workload import (
    SHAPES,
    ChurnConfig,
    Fleet,
    WorkloadError,
    churn_problem,
    device_classes,
    resource_claim,
)
from gpudra_api import parse_device_class, parse_resource_claim

SMALL = Fleet(counts={"a100-mig": 1, "dgx-h100": 2, "gb200-tray": 2, "hgx-b200": 1, "l4-pcie": 1})


def _claims(step: dict[str, Any]) -> list[dict[str, Any]]:
    if "allocate" in step:
        return list(step["allocate"])
    if "gang" in step:
        return [c for pod in step["gang"]["pods"] for c in pod]
    return []


@pytest.mark.parametrize("shape", [pytest.param(s, id=s) for s in SHAPES])
def test_each_shape_is_a_valid_v1_claim(shape: str) -> None:
    claim = resource_claim(shape, "c-1")
    kubernetes_validate.validate(claim, "1.34", strict=True)
    parsed = parse_resource_claim(claim)
    assert parsed.name == "c-1"


def test_classes_are_valid() -> None:
    for cls in device_classes():
        kubernetes_validate.validate(cls, "1.34", strict=True)
        parse_device_class(cls)


@pytest.mark.parametrize(
    ("shape", "constrained"),
    [
        pytest.param("gpu-2", False, id="two-gpus-free"),
        pytest.param("gpu-4-nvl", True, id="four-gpus-one-domain"),
        pytest.param("gpu-8-nvl", True, id="eight-gpus-one-domain"),
    ],
)
def test_nvlink_constraint_from_four_gpus(shape: str, constrained: bool) -> None:
    devices = resource_claim(shape, "c")["spec"]["devices"]
    assert ("constraints" in devices) == constrained


def test_same_seed_same_document() -> None:
    config = ChurnConfig(seed=3, hours=4, fleet=SMALL)
    assert json.dumps(churn_problem(config)) == json.dumps(churn_problem(config))
    assert (
        churn_problem(config)["steps"]
        != churn_problem(ChurnConfig(seed=4, hours=4, fleet=SMALL))["steps"]
    )


def test_steps_are_ordered_released_after_allocated_and_claims_parse() -> None:
    problem = churn_problem(ChurnConfig(seed=5, hours=6, fleet=SMALL))
    seen: set[str] = set()
    last = 0.0
    names: list[str] = []
    assert len(problem["stepTimes"]) == len(problem["steps"])
    for step, at in zip(problem["steps"], problem["stepTimes"], strict=True):
        assert at >= last
        last = at
        for claim in _claims(step):
            parse_resource_claim(claim)
            names.append(claim["metadata"]["name"])
            seen.add(f"default/{claim['metadata']['name']}")
        for ref in step.get("release", []):
            assert ref in seen
    assert len(names) == len(set(names))
    assert any(
        "gang" in s for s in churn_problem(ChurnConfig(seed=5, hours=24, fleet=SMALL))["steps"]
    )


def test_node_order_is_a_seeded_shuffle_or_sorted() -> None:
    shuffled = [
        n["name"] for n in churn_problem(ChurnConfig(seed=2, hours=1, fleet=SMALL))["nodes"]
    ]
    ordered = churn_problem(ChurnConfig(seed=2, hours=1, fleet=SMALL, node_order="sorted"))
    names = [n["name"] for n in ordered["nodes"]]
    assert names == sorted(names)
    assert sorted(shuffled) == names
    assert shuffled != names


def test_load_scales_the_number_of_arrivals() -> None:
    low = churn_problem(ChurnConfig(seed=1, load=0.5, fleet=SMALL))
    high = churn_problem(ChurnConfig(seed=1, load=2.0, fleet=SMALL))
    assert len(high["steps"]) > 2 * len(low["steps"])


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"hours": 0}, id="no-time"),
        pytest.param({"load": -1.0}, id="negative-load"),
        pytest.param({"mix": {"gpu-3": 1.0}}, id="unknown-shape"),
        pytest.param({"mix": {"gpu-1": 0.0}}, id="all-zero"),
        pytest.param({"node_order": "random"}, id="unknown-node-order"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(WorkloadError):
        ChurnConfig(**kwargs)


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_the_contract_runs_the_document_gangs_included(policy: str) -> None:
    from gpudra_alloc import solve

    mix = {**ChurnConfig().mix, "gang-4x4-clique": 0.5}
    doc = churn_problem(ChurnConfig(seed=3, hours=12, load=1.0, fleet=SMALL, mix=mix))
    assert any("gang" in step for step in doc["steps"])
    doc["policy"] = policy
    answer = solve(doc)
    outcomes = {step["outcome"] for step in answer["steps"]}
    assert "error" not in outcomes
    assert {"allocated", "released"} <= outcomes
    assert len(answer["steps"]) == len(doc["steps"])
