"""The DRA CEL environment per feature gate: what each gate declares, as Kubernetes'
`TestCELFeatureCombinations` (k8s.io/dynamic-resource-allocation `cel/compile_test.go`) lays it
out, plus the shapes through which an attribute value keeps its `google.protobuf.Any` type."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_cel import CelCompileError, CelEvaluationError, CelOptions, DeviceView, compile_selector
from gpudra_cel.differential_expr_test import _selector as generated_selector
from gpudra_cel.differential_test import devices

DRV = "dra.example.com"
A = f'device.attributes["{DRV}"]'
DEVICE = DeviceView(DRV, {DRV: {"ready": True, "ids": (1, 2), "name": "fish"}}, {}, True)

NONE = CelOptions(consumable_capacity=False, list_type_attributes=False)
CONSUMABLE = CelOptions(consumable_capacity=True, list_type_attributes=False)
LISTS = CelOptions(consumable_capacity=False, list_type_attributes=True)
ALL = CelOptions()

# Kubernetes' feature-combination matrix: expression -> which environments compile it.
MATRIX = {
    "scalar-attribute": (f"{A}.ready", {NONE, CONSUMABLE, LISTS, ALL}),
    "list-attribute": (f"{A}.ids.exists(id, id == 1)", {LISTS, ALL}),
    "includes-function": (f"{A}.ids.includes(1)", {LISTS, ALL}),
    "multiple-allocations": ("device.allowMultipleAllocations", {CONSUMABLE, ALL}),
    "list-attribute-with-multiple-allocations": (
        f"device.allowMultipleAllocations && {A}.ids.exists(id, id == 1)",
        {ALL},
    ),
}


@pytest.mark.parametrize(
    ("expression", "options", "compiles"),
    [
        pytest.param(expr, opts, opts in allowed, id=f"{name}-{label}")
        for name, (expr, allowed) in MATRIX.items()
        for label, opts in (
            ("none", NONE),
            ("consumable", CONSUMABLE),
            ("lists", LISTS),
            ("all", ALL),
        )
    ],
)
def test_feature_matrix(expression: str, options: CelOptions, compiles: bool) -> None:
    if compiles:
        assert compile_selector(expression, options=options).matches(DEVICE) is True
    else:
        with pytest.raises(CelCompileError):
            compile_selector(expression, options=options)


# Shapes through which an attribute value keeps its `google.protobuf.Any` type: with every gate
# off, ranging over such a value is a compile error, as in Kubernetes.
ANY_TYPED = {
    "index-form": f'{A}["ids"].exists_one(x, x == 1)',
    "bound-domain": f"cel.bind(d, {A}, d.ids.exists(x, x == 1))",
    "bound-value": f"cel.bind(v, {A}.ids, v.map(x, x + 1).size() == 2)",
    "conditional-of-attributes": f"(true ? {A}.ids : {A}.other).exists(x, x == 1)",
    "two-variable-comprehension": f"{A}.ids.all(i, v, v > 0)",
    "two-variable-value-of-a-domain": f"{A}.all(k, v, k != 'ids' || v.exists(x, x == 1))",
    "list-of-attribute-values": f"[{A}.ids, {A}.ids].exists(v, v.exists(x, x == 1))",
    "optional-value": f"{A}.?ids.value().exists(x, x == 1)",
    "optional-or-value": f"{A}.?ids.orValue([]).exists(x, x == 1)",
    "optional-index": f'{A}[?"ids"].orValue([]).all(x, x > 0)',
    "optional-domain": f"device.attributes[?'{DRV}'].value().ids.exists(x, x == 1)",
    "optional-domain-map": f"device.?attributes.value()['{DRV}'].ids.exists(x, x == 1)",
    "select-through-optional": f"device.attributes[?'{DRV}'].ids.value().exists(x, x == 1)",
    "optional-or": f"{A}.?other.or({A}.?ids).value().exists(x, x == 1)",
    "optional-of": f"optional.of({A}.ids).value().exists(x, x == 1)",
    "bound-optional": f"cel.bind(o, {A}.?ids, o.value().exists(x, x == 1))",
    "optional-list-item": f"[?{A}.?ids].exists(v, v.exists(x, x == 1))",
    "sortBy-attribute": f"{A}.ids.sortBy(x, -x).size() == 2",
}


@pytest.mark.parametrize(
    ("expression", "options", "message"),
    [
        pytest.param(
            "device.allowMultipleAllocations == false",
            NONE,
            "undefined field 'allowMultipleAllocations'",
            id="upstream-allow-multiple-allocations-disabled",
        ),
        pytest.param(
            f'{A}.attr.includes("fish")',
            NONE,
            "undeclared reference to 'includes'",
            id="upstream-includes-disabled",
        ),
        pytest.param(
            "has(device.allowMultipleAllocations)",
            NONE,
            "undefined field 'allowMultipleAllocations'",
            id="has-gated-field",
        ),
        pytest.param(
            f'{A}.ready && device.driver == "x" || device.allowMultipleAllocations',
            LISTS,
            "undefined field",
            id="gated-field-deep-in-chain",
        ),
        pytest.param(
            f"{A}.ids.all(x, x > 0)", CONSUMABLE, "google.protobuf.Any", id="all-over-attribute"
        ),
        pytest.param(
            "optional.of(device).value().allowMultipleAllocations",
            LISTS,
            "undefined field",
            id="optional-device",
        ),
        *(pytest.param(expr, NONE, "cannot be range", id=name) for name, expr in ANY_TYPED.items()),
    ],
)
def test_gated_use_is_a_compile_error(expression: str, options: CelOptions, message: str) -> None:
    with pytest.raises(CelCompileError, match=message) as info:
        compile_selector(expression, options=options)
    assert "\n | " in str(info.value)  # the message shows the expression with a caret


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"dyn({A}.ids).exists(x, x == 1)", id="dyn-is-iterable"),
        pytest.param(f"{A}.exists(k, k == 'ids')", id="domain-map-is-iterable"),
        pytest.param("device.attributes.exists(d, d == 'dra.example.com')", id="domains"),
        pytest.param(f"[{A}.ids].exists(x, x.size() == 2)", id="list-literal-around-value"),
        pytest.param(f"1 in {A}.ids && {A}.ids.size() == 2 && {A}.ids[0] == 1", id="no-iteration"),
        pytest.param("[true].exists(device, device)", id="shadowed-device-variable"),
        pytest.param("[1].all(x, x > 0)", id="literal-list"),
        pytest.param(f"{A}.?ids.hasValue() && {A}.?ids.value().size() == 2", id="optional-no-loop"),
        pytest.param(f"dyn({A}.?ids.value()).exists(x, x == 1)", id="dyn-optional-value"),
        pytest.param(f"{A}.?ids.optMap(v, 1).value() == 1", id="opt-map-is-not-a-value"),
    ],
)
def test_without_gates_other_iteration_compiles(expression: str) -> None:
    assert compile_selector(expression, options=NONE).matches(DEVICE) is True


def test_compiled_selectors_are_cached_per_options() -> None:
    expression = "device.allowMultipleAllocations"
    assert compile_selector(expression, options=ALL) is compile_selector(expression)
    with pytest.raises(CelCompileError):
        compile_selector(expression, options=NONE)
    assert compile_selector(expression, options=CONSUMABLE).matches(DEVICE) is True


def test_options_must_be_cel_options() -> None:
    with pytest.raises(CelCompileError, match="CelOptions"):
        compile_selector("true", options={"consumable_capacity": False})  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated_selector(), st.sampled_from([NONE, CONSUMABLE, LISTS]), devices())
def test_a_gated_environment_only_ever_rejects(
    expression: str, options: CelOptions, device: DeviceView
) -> None:
    try:
        gated = compile_selector(expression, options=options)
    except CelCompileError:
        return
    full = compile_selector(expression)  # what compiles gated compiles ungated, same answers
    try:
        expected: object = full.matches(device)
    except CelEvaluationError:
        expected = CelEvaluationError
    try:
        got: object = gated.matches(device)
    except CelEvaluationError:
        got = CelEvaluationError
    assert got == expected


@pytest.mark.parametrize(
    ("expression", "options", "gate"),
    [
        pytest.param(
            "device.allowMultipleAllocations", NONE, "consumable_capacity", id="consumable"
        ),
        pytest.param(f"{A}.ids.includes(1)", CONSUMABLE, "list_type_attributes", id="includes"),
        pytest.param(
            f"{A}.?ids.value().all(x, x > 0)", CONSUMABLE, "list_type_attributes", id="iterate"
        ),
        pytest.param("device.nope", NONE, "", id="not-a-gate"),
    ],
)
def test_compile_error_names_the_gate(expression: str, options: CelOptions, gate: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression, options=options)
    assert info.value.gate == gate
    if gate:
        assert "requires feature gate DRA" in str(info.value)
