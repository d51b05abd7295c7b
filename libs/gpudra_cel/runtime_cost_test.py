"""Run-time cost accounting: which selectors are metered, what the meter counts, and that a
metered selector answers exactly as the plain one until the limit stops it."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import (
    COST_EXCEEDED,
    CelCompileError,
    CelError,
    CelEvaluationError,
    CountingSelector,
    DeviceView,
    compile_selector,
)
from gpudra_cel.checker import check
from gpudra_cel.cost import estimate_cost
from gpudra_cel.differential_expr_test import _selector as generated_selector
from gpudra_cel.differential_test import devices
from gpudra_cel.runtime_cost import compile_counting
from gpudra_cel.syntax import parse

DRV = "dra.example.com"
A = f'device.attributes["{DRV}"]'
C = f'device.capacity["{DRV}"]'
IDS = tuple(range(48))
DEVICE = DeviceView(
    DRV,
    {
        DRV: {
            "model": "NVIDIA H100 80GB HBM3",
            "index": 3,
            "ids": IDS,
            "names": tuple(f"gpu-{i}" for i in range(48)),
            "version": Semver.parse("1.2.3"),
            "flag": True,
        },
        "other.example.com": {"x": "y"},
    },
    {DRV: {"memory": Quantity.parse("80Gi")}},
    True,
)
SMALL = DeviceView(DRV, {DRV: {"ids": (1, 2), "names": ("a",), "model": "A100"}}, {}, False)
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"

EXPRESSIONS = [
    f'device.driver == "{DRV}" && {A}.model.startsWith("NVIDIA")',
    # string(timestamp) can be 36 characters long: the estimate must cover that
    'string(timestamp("2024-03-01T12:30:00.123456789+05:30") + duration("1s")) =='
    ' "2024-03-01T12:30:01.123456789+05:30 and some more text"',
    f'timestamp("2024-01-01T00:00:00Z") - duration("1h") < timestamp({A}.model.size())'
    ' && duration("1s").getMilliseconds() == 1000',
    f"{A}.ids.exists(x, x == 47)",
    f"{A}.ids.all(x, {A}.ids.exists(y, y == x))",
    f'{A}.names.filter(n, n.endsWith("7")).size() == 5',
    f'{A}.names.map(n, n.upperAscii()).exists(n, n == "GPU-3")',
    f"{A}.ids.exists_one(x, x > 46) || {A}.flag",
    f'{A}.model.matches("H1[0-9]+") && {A}.model.contains("80GB")',
    f'{A}.version.isGreaterThan(semver("1.0.0")) && {C}.memory.compareTo(quantity("1Gi")) > 0',
    f'cel.bind(n, {A}.names, n.exists(x, x.split("-")[1] == "5") && "gpu-1" in n)',
    f'"%s-%d".format([{A}.model, {A}.index]).size() > 10',
    f"{A}.ids.all(i, v, i == v)",
    f'{A}.names.join(",").indexOf("gpu-9") >= 0',
    f'{A}.model.replace("NVIDIA ", "").lowerAscii() == "h100 80gb hbm3"',
    f"{A}.missing.exists(x, x == 1)",
    f'{A}.model.substring(0, 6) + "!" == "NVIDIA!"',
    f"{A}.ids.map(x, x * 2).filter(x, x > 90).size() == 2",
    f'has({A}.model) && !has({A}.nothing) && "other.example.com" in device.attributes',
    f"{TEN}.all(x, {TEN}.exists(y, y == x))",
    f'{A}.?model.hasValue() && {A}.?nothing.orValue("x") == "x"',
    f'{A}[?"index"].orValue(0) > 1 && [?{A}.?nothing, 1].size() == 1',
    f'{{?"a": {A}.?index, "b": {A}.flag}}.size() == 2',
    f"{A}.ids.sortBy(x, -x).slice(0, 3).reverse() == {A}.ids.distinct().sort().slice(45, 48)",
    f"lists.range(8).slice(2, 5).last().orValue(0) + {A}.names.sort()[0].size() > 4",
    f"[[1], {A}.ids].flatten().size() == 49",
    f"[{{'attributes': {{'d': {A}.names}}}}].all(device, device.attributes.d.size() > 1)",
    f'device.attributes[?"{DRV}"].?model.orValue("").size() > 1',
    f'format.named("dns1123Label").value().validate({A}.model).orValue([]).join(" ").size() > 9'
    f' && !format.dns1035Label().validate("gpu-" + string({A}.index)).hasValue()',
]


def _metered(expression: str) -> CountingSelector:
    """The metered variant of `expression` with the limit at its estimate (what
    `compile_selector` never builds: an estimate within the limit gets plain closures)."""
    tree = parse(expression)
    checked = check(tree, expression)
    estimate = estimate_cost(tree, checked)
    fn, slots = compile_counting(tree, checked, expression, estimate)
    return CountingSelector(expression, fn, slots, estimate, estimate)


def _outcome(selector: object, device: DeviceView) -> object:
    try:
        return selector.matches(device)  # type: ignore[attr-defined]
    except CelError as exc:
        return type(exc)


@pytest.mark.parametrize(
    "device", [pytest.param(DEVICE, id="big"), pytest.param(SMALL, id="small")]
)
@pytest.mark.parametrize(
    "expression", [pytest.param(e, id=f"{i:02d}") for i, e in enumerate(EXPRESSIONS)]
)
def test_metered_answers_as_plain_and_stays_under_the_estimate(
    expression: str, device: DeviceView
) -> None:
    plain = compile_selector(expression)
    assert not plain.counts_cost
    metered = _metered(expression)
    assert _outcome(metered, device) == _outcome(plain, device)
    if _outcome(plain, device) in (True, False):
        # cel-go's invariant: the actual cost never exceeds the worst-case estimate
        assert 0 < metered.actual_cost(device) <= plain.max_cost


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        # device, .driver (fused: 2) + `==` on strings (a tenth of the shorter, rounded up: 1)
        pytest.param('device.driver == "gpu"', 3, id="driver"),
        # literal list folded (0); 3 iterations x (condition 2 + step: accu 1, x 1, `>` 1),
        # and the result (accu, 1)
        pytest.param("[1, 2, 3].all(x, x > 0)", 16, id="loop-over-literal"),
        # exists: the condition negates (3); no early exit here
        pytest.param("[1, 2, 3].exists(x, x == 5)", 3 * 6 + 1, id="exists"),
        # map: `accu + [x * 2]` per element (accu 1, `+` 1, list 10, x 1, `*` 1)
        pytest.param("[1, 2, 3].map(x, x * 2).size() == 3", 3 * 14 + 1 + 2, id="map"),
        # a constant `[1]` is folded: accu 1 + `+` 1
        pytest.param("[1, 2, 3].map(x, 1).size() == 3", 3 * 2 + 1 + 2, id="map-constant"),
        # filter: x 1 + `>` 1 + the rejecting step (accu, 1) each; kept ones 12 more
        pytest.param("[1, 2, 3].filter(x, x > 1).size() == 2", 3 * 3 + 2 * 12 + 1 + 2, id="filter"),
        # map with a filter: the filter each time, the step only for the kept element
        pytest.param(
            "[1, 2, 3].map(x, x > 2, x).size() == 1", 3 * 3 + 1 * 12 + 1 + 2, id="map-filter"
        ),
        # the attribute path (4) + `in` a list costs the list's length (2)
        pytest.param(f"1 in {A}.ids", 6, id="in-list"),
        # matches: ceil((1 + 4) / 10) * ceil(len("A1.*") / 4) = 1 * 1, plus the path (4)
        pytest.param(f'{A}.model.matches("A1.*")', 5, id="regex"),
        # && costs nothing itself; the right side is skipped when the left is false
        pytest.param(f'{A}.model == "x" && {A}.ids.size() > 100', 5, id="short-circuit"),
    ],
)
def test_actual_cost_in_cel_go_units(expression: str, cost: int) -> None:
    assert _metered(expression).actual_cost(SMALL) == cost


@pytest.mark.parametrize(
    ("optional", "plain", "extra"),
    [
        # `.?name` / `[?key]` are one field selection / index each, as `.name` / `[key]`;
        # the unwrapping call (value/orValue/hasValue) is one call more
        pytest.param(f"{A}.?model.value() == 'A100'", f"{A}.model == 'A100'", 1, id="opt-select"),
        pytest.param(f"{A}[?'model'].value() == 'A100'", f"{A}['model'] == 'A100'", 1),
        pytest.param(
            f"device.attributes[?'{DRV}'].value().model == 'A100'",
            f"device.attributes['{DRV}'].model == 'A100'",
            1,
            id="opt-index-domain",
        ),
        pytest.param(
            f"cel.bind(m, {A}, m.?model.orValue('') == 'A100')",
            f"cel.bind(m, {A}, m.model == 'A100')",
            1,
            id="opt-select-on-a-variable",
        ),
        pytest.param(
            f"cel.bind(m, {A}, m[?'ids'].value().size() == 2)",
            f"cel.bind(m, {A}, m['ids'].size() == 2)",
            1,
            id="opt-index-on-a-variable",
        ),
        pytest.param(
            f"cel.bind(m, {A}, m.?nothing.?more.hasValue())",
            f"cel.bind(m, {A}, m.model.more)",  # (an error, but charged before it runs)
            1,
            id="opt-chain-on-none",
        ),
    ],
)
def test_optional_selection_costs_as_selection(optional: str, plain: str, extra: int) -> None:
    assert _metered(optional).actual_cost(SMALL) == _cost_even_if_failing(plain) + extra


def _cost_even_if_failing(expression: str) -> int:
    """What the meter holds after one evaluation on SMALL, whether or not it failed."""
    meter = [0]
    selector = _metered(expression)
    with contextlib.suppress(CelEvaluationError):
        selector._fn([SMALL, meter, *selector._pad])
    return meter[0]


def test_upstream_expensive_expression_is_cancelled_at_run_time() -> None:
    # k8s.io/dynamic-resource-allocation cel/compile_test.go "expensive": 10^7 inner iterations
    inner = "int('1'.find('[0-9]*')) < 100"
    expression = inner
    for var in ("z5", "z4", "z3", "z2", "z", "y", "x"):
        expression = f"{TEN}.all({var}, {expression})"
    selector = compile_selector(expression)
    assert selector.counts_cost
    assert selector.max_cost > 1_000_000
    with pytest.raises(CelEvaluationError, match=COST_EXCEEDED):
        selector.matches(SMALL)


@pytest.mark.parametrize(
    ("device", "outcome"),
    [
        pytest.param(SMALL, True, id="short-list-fits"),
        pytest.param(DEVICE, CelEvaluationError, id="long-list-exceeds"),
    ],
)
def test_limit_depends_on_the_actual_sizes(device: DeviceView, outcome: object) -> None:
    selector = compile_selector(f"{A}.ids.all(x, x >= 0)", cost_limit=100)
    assert selector.counts_cost
    assert _outcome(selector, device) == outcome


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"{A}.ids.exists(x, x == 99) || true", id="or-true-absorbs-no-limit"),
        pytest.param(f"{A}.ids.all(x, x >= 0) || true", id="all-then-true"),
        pytest.param(f"[1, 2].all(i, {A}.ids.exists(x, x == 99)) || true", id="nested"),
        pytest.param(f"cel.bind(v, {A}.ids.exists(x, x == 99), true)", id="unused-binding"),
        pytest.param(
            f"[1, 2].all(i, i == 1 ? {A}.nothing : {A}.ids.exists(x, x == 99))",
            id="earlier-error-absorbed-first",
        ),
    ],
)
def test_cost_error_is_not_absorbed(expression: str) -> None:
    selector = compile_selector(expression, cost_limit=60)
    assert selector.counts_cost
    with pytest.raises(CelEvaluationError, match=COST_EXCEEDED):
        selector.matches(DEVICE)


def test_each_evaluation_has_its_own_meter() -> None:
    selector = compile_selector(f"{A}.ids.all(x, x >= 0)", cost_limit=100)
    for _ in range(5):  # 2 elements cost well under half the limit; nothing accumulates
        assert selector.matches(SMALL) is True


def test_compile_time_checks_hold_for_metered_selectors() -> None:
    with pytest.raises(CelCompileError, match="missing"):
        compile_selector(f'{A}.names.exists(n, n.matches("(unclosed"))', cost_limit=1)
    with pytest.raises(CelCompileError, match="decimal clause"):
        compile_selector(f'{A}.ids.exists(n, "%d".format([1.5]) == "")', cost_limit=1)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated_selector(), st.lists(devices(), min_size=1, max_size=4))
def test_generated_selectors_metered_agree_and_stay_under_the_estimate(
    expression: str, sample: list[DeviceView]
) -> None:
    try:
        plain = compile_selector(expression)
    except CelCompileError:
        return
    metered = _metered(expression)
    for device in sample:
        outcome = _outcome(plain, device)
        assert _outcome(metered, device) == outcome, (expression, device)
        if outcome in (True, False):
            assert metered.actual_cost(device) <= plain.max_cost, (expression, device)


_K8S = 'device.attributes["dra.example.com"]'
_K8S_CAPACITY = 'device.capacity["dra.example.com"]'


def _k8s_device(attributes: dict[str, Any] | None = None, memory: str | None = None) -> DeviceView:
    capacity = {"dra.example.com": {"name": Quantity.parse(memory)}} if memory else {}
    return DeviceView("dra.example.com", {"dra.example.com": attributes or {}}, capacity, True)


@pytest.mark.parametrize(
    ("expression", "kubernetes_estimate", "device"),
    [
        pytest.param('device.driver == "dra.example.com"', 4, _k8s_device(), id="driver"),
        pytest.param(f"{_K8S}.name > 0", 5, _k8s_device({"name": 1}), id="int"),
        pytest.param(
            f"{_K8S}.names.exists(x, x > 0)",
            5 + 6 * 64,
            _k8s_device({"names": tuple(range(-63, 1))}),
            id="macro-on-list-none-found",
        ),
        pytest.param(
            f'{_K8S}.name.includes("fish")',
            4 + 48,
            _k8s_device({"name": tuple(f"x{i}" for i in range(48))}),
            id="includes-longest-list",
        ),
        pytest.param(
            f'{_K8S}.services.split("example").size() >= 2',
            19,
            _k8s_device({"services": "some_example_value"}),
            id="split",
        ),
        pytest.param(
            f'{_K8S}.services.matches("[^a]?sym")',
            18,
            _k8s_device({"services": "asymetric"}),
            id="regex",
        ),
        pytest.param(
            f'{_K8S_CAPACITY}.name.isGreaterThan(quantity("1Ki"))',
            6,
            _k8s_device(memory="1Mi"),
            id="quantity",
        ),
        pytest.param(
            f"1 in {_K8S}.names", 4 + 64, _k8s_device({"names": tuple(range(2, 50))}), id="in-list"
        ),
        pytest.param("device.allowMultipleAllocations == true", 3, _k8s_device(), id="multi"),
    ],
)
def test_actual_cost_stays_under_kubernetes_estimate(
    expression: str, kubernetes_estimate: int, device: DeviceView
) -> None:
    # cel-go's actual cost never exceeds its estimate; our meter, on the worst device these
    # Kubernetes cases allow, must not either (k8s.io/dynamic-resource-allocation compile_test).
    assert 0 < _metered(expression).actual_cost(device) <= kubernetes_estimate


_RANGE = "lists.range"


@pytest.mark.parametrize(
    ("expression", "cancelled"),
    [
        # Kubernetes prices isSorted/sum/min/max/indexOf/lastIndexOf by a traversal of the list
        # (1 per number): ~600,000 for the range plus ~600,000 passes the limit, 2 x 400,000
        # does not (the length depends on the device, so nothing is folded or bounded early)
        pytest.param(f"{_RANGE}(600000).sum() > 0", True, id="sum"),
        pytest.param(f"{_RANGE}(600000).isSorted()", True, id="is-sorted"),
        pytest.param(f"{_RANGE}(600000).max() > 0", True, id="max"),
        pytest.param(f"{_RANGE}(600000).min() == 0", True, id="min"),
        pytest.param(f"{_RANGE}(600000).indexOf(5) == 5", True, id="index-of"),
        pytest.param(f"{_RANGE}(600000).lastIndexOf(5) == 5", True, id="last-index-of"),
        pytest.param(f"{_RANGE}(400000).sum() > 0", False, id="sum-under"),
    ],
)
def test_list_library_costs_a_traversal(expression: str, cancelled: bool) -> None:
    _cancelled_on_small(
        expression.replace("(600000)", f"(600000 + {A}.ids.size())").replace(
            "(400000)", f"(400000 + {A}.ids.size())"
        ),
        cancelled,
    )


def _cancelled_on_small(expression: str, cancelled: bool) -> None:
    """`expression` is metered, and on SMALL is cancelled for cost, or matches."""
    selector = compile_selector(expression)
    assert selector.counts_cost
    if cancelled:
        with pytest.raises(CelEvaluationError, match=COST_EXCEEDED):
            selector.matches(SMALL)
    else:
        assert selector.matches(SMALL)


@pytest.mark.parametrize(
    ("expression", "device", "price"),
    [
        # a traversal: a tenth of each string's length, rounded down, 1 per other element
        pytest.param(
            f"{A}.names.isSorted()",
            DeviceView(DRV, {DRV: {"names": ("a" * 64, "b" * 64)}}, {}, False),
            12,
            id="strings",
        ),
        pytest.param(
            f"{A}.ids.sum() > 0",
            DeviceView(DRV, {DRV: {"ids": (1, 2, 3)}}, {}, False),
            3 + 1,
            id="numbers",
        ),
        pytest.param(
            f'{A}.model.indexOf("x") < 0',
            DeviceView(DRV, {DRV: {"model": "m" * 64}}, {}, False),
            6 + 1,
            id="string-index-of",
        ),
    ],
)
def test_list_library_actual_cost(expression: str, device: DeviceView, price: int) -> None:
    # the attribute path costs 4 (device, .attributes, [domain], .name); the rest is the call
    # (and a comparison of numbers, 1)
    assert _metered(expression).actual_cost(device) == 4 + price


@pytest.mark.parametrize(
    ("loop", "cancelled"),
    [
        # cel-go's map step `accu + [x]` creates a list per element (10): 80,000 elements cost
        # ~1,040,000 with the range, past the limit
        pytest.param(".map(x, x).size() > 0", True, id="map"),
        # filter: rejected elements cost the condition and `accu`; kept ones the new list too
        pytest.param(".filter(x, x < 0).size() == 0", False, id="filter-none-kept"),
        pytest.param(".filter(x, x >= 0).size() > 0", True, id="filter-all-kept"),
        pytest.param(".all(x, x >= 0)", False, id="all"),
    ],
)
def test_list_building_loops_cost_a_list_per_element(loop: str, cancelled: bool) -> None:
    # 80,000 elements (SMALL has two ids), a length not known before evaluation
    _cancelled_on_small(f"{_RANGE}(80000 + {A}.ids.size() - 2){loop}", cancelled)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f'{A}.model.split(",").size() > 0', id="split"),
        pytest.param(f'{A}.model.replace("a", "bb").size() > 0', id="replace"),
        pytest.param(f"isQuantity({A}.model)", id="is-quantity"),
        pytest.param(f"isSemver({A}.model, true)", id="is-semver"),
        pytest.param(f'{A}.model + {A}.model == ""', id="concat"),
        pytest.param(f'{A}.model.matches("a.*b")', id="regex"),
        pytest.param(f'{A}.model.findAll("a").size() > 0', id="find-all"),
    ],
)
def test_text_functions_stay_under_the_estimate(expression: str) -> None:
    # the estimate decides whether evaluations are metered at all, so it must bound what the
    # meter would charge, for the longest attribute string (64 characters) too; split and
    # replace cost twice a tenth of the text and the quantity / semver parsers a tenth, at run
    # time as in Kubernetes, and were estimated below that
    device = DeviceView(DRV, {DRV: {"model": "a,b " * 16}}, {}, False)
    assert _metered(expression).actual_cost(device) > 0


@pytest.mark.parametrize(
    "expression",
    [
        # each replace inserts ten characters around every one: the ninth would build a
        # 429-million-character string, which Kubernetes' meter cancels on its input's price
        pytest.param("'x'" + ".replace('', 'abcdefghij')" * 9 + ".size() > 0", id="replace-chain"),
        # 600,011 for the range and 600,000 for the sum: Kubernetes cancels it at every
        # evaluation, constant or not
        pytest.param("lists.range(600000).sum() > 0", id="constant-sum"),
    ],
)
def test_constant_calls_are_metered_not_folded(expression: str) -> None:
    # cel-go folds no calls; folding them at compile time made them free (the sum passed) and
    # ran the replace chain while compiling, until memory ran out (a MemoryError, not a
    # CelCompileError)
    selector = compile_selector(expression)
    assert selector.counts_cost
    with pytest.raises(CelEvaluationError, match=COST_EXCEEDED):
        selector.matches(SMALL)
