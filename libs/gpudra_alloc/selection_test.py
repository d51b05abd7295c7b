"""Selectors per feature gates: a selector using what a disabled gate declares is an allocation
error (as Kubernetes' API server refuses it), a run-time cost overrun is an allocation error, and
cached per-device results never let a gated allocator skip that check."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import AllocationInputError, Allocator, CelRuntimeError, Features, solve
from gpudra_alloc.selection import Selectors
from gpudra_api import Node, parse_device_class, parse_resource_claim, parse_resource_slice
from gpudra_cel import CelOptions

DRV = "gpu.nvidia.com"
A = f'device.attributes["{DRV}"]'
NODE = Node("n1")
SLICE_DOC = {
    "metadata": {"name": "n1"},
    "spec": {
        "driver": DRV,
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {
                "name": f"gpu-{i}",
                "allowMultipleAllocations": i == 0,
                "attributes": {
                    "index": {"int": i},
                    "cliques": {"strings": [f"c{i}", "shared"]},
                    "lanes": {"ints": list(range(40))},
                },
            }
            for i in range(2)
        ],
    },
}
SLICE = parse_resource_slice(SLICE_DOC)
CLAIM = parse_resource_claim(
    {
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }
)
ON = Features.from_names(["ConsumableCapacity", "ListTypeAttributes"])
OFF = Features.from_names([])


def _class(expression: str) -> Any:
    return parse_device_class(
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
    )


def _allocate(expression: str, features: Features | None, selectors: Selectors | None) -> Any:
    chosen = selectors if selectors is not None else Selectors(features)
    allocator = Allocator([_class(expression)], [SLICE], features, selectors=chosen)
    outcome = allocator.allocate(NODE, [CLAIM])
    assert outcome.results is not None
    return [r.device for result in outcome.results for r in result.results]


@pytest.mark.parametrize(
    ("expression", "features", "expected"),
    [
        pytest.param("device.allowMultipleAllocations", ON, ["gpu-0"], id="consumable-on"),
        pytest.param(
            "device.allowMultipleAllocations", OFF, "undefined field", id="consumable-off"
        ),
        pytest.param(f'{A}.cliques.includes("c1")', ON, ["gpu-1"], id="includes-on"),
        pytest.param(f'{A}.cliques.includes("c1")', OFF, "'includes'", id="includes-off"),
        pytest.param(f'{A}.cliques.exists(c, c == "c1")', ON, ["gpu-1"], id="iterate-on"),
        pytest.param(f'{A}.cliques.exists(c, c == "c1")', OFF, "cannot be range", id="iterate-off"),
        pytest.param(f"{A}.index == 1", OFF, ["gpu-1"], id="ungated"),
        pytest.param("device.allowMultipleAllocations", None, ["gpu-0"], id="stored-environment"),
        pytest.param(
            f"cel.bind(l, {A}.lanes, l.all(a, l.all(b, l.all(c, l.all(d, a + b + c + d >= 0)))))",
            ON,
            "actual cost limit exceeded",
            id="cost-over-limit",
        ),
    ],
)
def test_selectors_follow_the_feature_gates(
    expression: str, features: Features | None, expected: list[str] | str
) -> None:
    if isinstance(expected, list):
        assert _allocate(expression, features, None) == expected
    else:
        with pytest.raises(AllocationInputError, match=expected):
            _allocate(expression, features, None)


def test_cached_results_do_not_bypass_a_gated_environment() -> None:
    expression = "device.allowMultipleAllocations"
    assert _allocate(expression, ON, None) == ["gpu-0"]  # caches per-device results
    with pytest.raises(AllocationInputError, match="undefined field"):
        _allocate(expression, OFF, None)
    assert _allocate(expression, ON, None) == ["gpu-0"]


@pytest.mark.parametrize(
    ("features", "options"),
    [
        pytest.param(ON, CelOptions(), id="both-on"),
        pytest.param(OFF, CelOptions(consumable_capacity=False, list_type_attributes=False)),
        pytest.param(Features(), CelOptions(list_type_attributes=False), id="kubernetes-defaults"),
    ],
)
def test_features_map_to_cel_options(features: Features, options: CelOptions) -> None:
    assert features.cel_options() == options
    assert Selectors(features).options == options


def _problem(expression: str, features: list[str] | None) -> dict[str, Any]:
    """A contract problem: one node, two GPUs, a claim whose request selector is `expression`."""
    claim = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "gpu",
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }
    problem: dict[str, Any] = {
        "node": {"name": "n1"},
        "classes": [{"metadata": {"name": "gpu"}, "spec": {}}],
        "slices": [SLICE_DOC],
        "claims": [claim],
    }
    if features is not None:
        problem["features"] = features
    return problem


DEFAULTS = None  # no "features" key: Kubernetes 1.37's defaults (ListTypeAttributes off)
LISTS = ["ConsumableCapacity", "ListTypeAttributes"]


@pytest.mark.parametrize(
    ("expression", "features", "feature"),
    [
        pytest.param(f'{A}.cliques.includes("c1")', DEFAULTS, "ListTypeAttributes", id="includes"),
        pytest.param(
            f'{A}.cliques.exists(c, c == "c1")', DEFAULTS, "ListTypeAttributes", id="iterate"
        ),
        pytest.param(
            f'{A}.?cliques.orValue([]).exists(c, c == "c1")',
            DEFAULTS,
            "ListTypeAttributes",
            id="iterate-optional",
        ),
        pytest.param(
            "device.allowMultipleAllocations",
            ["ListTypeAttributes"],
            "ConsumableCapacity",
            id="consumable",
        ),
        pytest.param(f'{A}.cliques.includes("c1")', LISTS, None, id="gate-on"),
        pytest.param("device.allowMultipleAllocations", DEFAULTS, None, id="consumable-default"),
    ],
)
def test_a_problem_with_the_gate_off_is_an_error_naming_claim_expression_and_feature(
    expression: str, features: list[str] | None, feature: str | None
) -> None:
    answer = solve(_problem(expression, features), "first-fit")
    if feature is None:
        assert answer["outcome"] == "allocated", answer
        return
    assert answer["outcome"] == "error", answer
    assert "claim ml/train" in answer["error"]
    assert repr(expression) in answer["error"]
    assert f"requires feature {feature}" in answer["error"]


def test_an_allocator_without_features_uses_kubernetes_defaults() -> None:
    expression = f'{A}.cliques.includes("c1")'
    with pytest.raises(AllocationInputError, match="requires feature ListTypeAttributes"):
        Allocator([_class(expression)], [SLICE]).allocate(NODE, [CLAIM])
    # Selectors() alone still declares everything (the stored-expression environment)
    chosen = Selectors()
    assert _allocate(expression, None, chosen) == ["gpu-1"]


def test_a_missing_key_error_carries_kubernetes_hint() -> None:
    # Kubernetes' allocator appends a hint to CEL's "no such key" (cel.EnhanceRuntimeError).
    with pytest.raises(AllocationInputError) as failed:
        _allocate(f"{A}.missing == 1", ON, None)
    assert str(failed.value) == (
        f"class gpu: selector #0 on device {DRV}/n1/gpu-0: CEL runtime error: no such key: "
        "missing. consider using CEL optional chaining (.? followed by orValue()) or guarding "
        "the check with has() for optional fields"
    )


@pytest.mark.parametrize(
    ("expression", "features", "runtime"),
    [
        pytest.param(f"{A}.missing == 1", ON, True, id="missing-key"),
        pytest.param(f"{A}.index / 0 == 1", ON, True, id="division-by-zero"),
        pytest.param(
            f"cel.bind(l, {A}.lanes, l.all(a, l.all(b, l.all(c, l.all(d, a + b + c + d >= 0)))))",
            ON,
            True,
            id="cost-over-limit",
        ),
        pytest.param("device.allowMultipleAllocations", OFF, False, id="compile-error"),
        pytest.param(f"{A}.index == ", ON, False, id="syntax-error"),
    ],
)
def test_only_a_failure_on_a_device_is_a_cel_runtime_error(
    expression: str, features: Features, runtime: bool
) -> None:
    """A run-time failure depends on the device data, which a driver may republish: a distinct
    type (still an `AllocationInputError`), also when the result comes from the cache. An
    expression that does not compile fails on every device, whatever the slices say."""
    selectors = Selectors(features)
    for _ in range(2):  # the second time from the cached per-device result
        with pytest.raises(AllocationInputError) as failed:
            _allocate(expression, features, selectors)
        assert isinstance(failed.value, CelRuntimeError) == runtime, failed.value
        assert ("CEL runtime error" in str(failed.value)) == runtime
