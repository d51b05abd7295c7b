"""Table tests of CEL optionals in DRA selectors: values, run-time errors, type errors, syntax
errors and cost, through `compile_selector`, on devices shaped as NVIDIA's driver publishes them.

The "spec" table restates, in our own words and as boolean selectors, the behaviours that the
cel-spec conformance file `optionals.textproto` pins down for cel-go (the reference Kubernetes
uses); its proto-message cases have no DRA equivalent and are left out.
"""

from __future__ import annotations

import re

import pytest

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import CelCompileError, CelEvaluationError, DeviceView, compile_selector

H100 = DeviceView(
    driver="gpu.nvidia.com",
    attributes={
        "gpu.nvidia.com": {
            "type": "gpu",
            "index": 3,
            "productName": "H100",
            "cudaComputeCapability": Semver.parse("9.0.0"),
            "cliques": ("c1.0", "c1.1"),
        },
        "x.io": {"k": "v", "n": 0},
    },
    capacity={"gpu.nvidia.com": {"memory": Quantity.parse("80Gi")}},
)
BARE = DeviceView(driver="other.example.com", attributes={}, capacity={})
D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    ("expression", "on_h100", "on_bare"),
    [
        # the three typical selectors
        pytest.param(f'{D}.?productName.orValue("") == "H100"', True, False, id="product-or"),
        pytest.param(
            f'{C}.?memory.orValue(quantity("0")).isGreaterThan(quantity("40Gi"))',
            True,
            False,
            id="memory-or",
        ),
        pytest.param('device.attributes["x.io"][?"k"].hasValue()', True, False, id="index-has"),
        # selection and indexing on the DRA maps
        pytest.param(f"{D}.?index.value() == 3", True, "error", id="value-or-error"),
        pytest.param(f"{D}.?index.orValue(7) == 3", True, False, id="int-or"),
        # a dyn value's optional stays dyn with a default of another kind, as in cel-go
        pytest.param(f'{D}.?index.orValue("none") == 3', True, False, id="dyn-or-string"),
        pytest.param(f'{D}["productName"].size() > 0 || {D}.?nope.hasValue()', True, "error"),
        pytest.param(f'{D}[?"index"].orValue(0) == 3', True, False, id="index-literal"),
        # the fused DRA-map forms and the general ones must agree; or/orValue short-circuit
        pytest.param(f"{D}.?index.orValue({D}.index) == 3", True, "error", id="lazy-default"),
        pytest.param(f"{D}.?index.orValue(1 / 0) == 3", True, "error", id="lazy-error"),
        pytest.param(
            f"{D}.?index.or(optional.of(1 / 0)).value() == 3", True, "error", id="lazy-or"
        ),
        pytest.param(f"{D}.?index.or({D}.?index).value() == 3", True, "error", id="or-value"),
        pytest.param(f'{C}[?"memory"].hasValue()', True, False, id="capacity-has"),
        pytest.param(f'{C}.?memory.value().isGreaterThan(quantity("1"))', True, "error"),
        pytest.param(f"[{D}.?index][0].orValue(-1) == 3", True, False, id="general-orValue"),
        pytest.param(f"[{D}.?index][0].hasValue()", True, False, id="general-hasValue"),
        pytest.param(f"[{D}.?index][0].value() == 3", True, "error", id="general-value"),
        pytest.param(f'{D}[?"ind" + "ex"].orValue(0) == 3', True, False, id="index-computed"),
        pytest.param("device.attributes.?foo.hasValue()", True, True, id="domain-always-found"),
        pytest.param('device.attributes[?"foo"].value().size() == 0', True, True, id="empty-dom"),
        pytest.param(f'{D}.?cliques.orValue([]).exists(c, c == "c1.1")', True, False, id="list"),
        pytest.param(f'{D}.?cliques[1].orValue("") == "c1.1"', True, False, id="chain-index"),
        pytest.param(f'{D}.?cliques[?5].orValue("x") == "x"', True, True, id="out-of-range"),
        pytest.param(
            f'{D}.?cudaComputeCapability.optMap(v, v.isGreaterThan(semver("8.0.0")))'
            ".orValue(false)",
            True,
            False,
            id="optMap-semver",
        ),
        pytest.param(
            f"{D}.?productName.optFlatMap(p, optional.ofNonZeroValue(p)).hasValue()",
            True,
            False,
            id="optFlatMap",
        ),
        pytest.param(f'{D}.?productName.or(optional.of("none")).value() != ""', True, True),
        pytest.param('device.?driver.value().endsWith(".com")', True, True, id="device-field"),
        pytest.param("dyn(device).?nope.hasValue()", False, False, id="device-unknown-field"),
        pytest.param(
            f"cel.bind(g, {D}.?index, g.hasValue() && g.value() > 1)", True, False, id="bind"
        ),
        pytest.param(
            f'{D}.?type.orValue("") == "gpu" && {D}.index < 4', True, False, id="in-chain"
        ),
        pytest.param(f'[?{D}.?type, "x"].size() == 2', True, False, id="list-entry"),
        pytest.param(f'{{?"t": {D}.?type}}.size() == 1', True, False, id="map-entry"),
        pytest.param(f"has({D}.index) ? {D}.index == 3 : {D}.?index.hasValue()", True, False),
        pytest.param('"?" + "a.?b" == "?a.?b" ? true : false', True, True, id="mark-in-string"),
    ],
)
def test_values(expression: str, on_h100: bool | str, on_bare: bool | str) -> None:
    selector = compile_selector(expression)
    for device, expected in ((H100, on_h100), (BARE, on_bare)):
        if expected == "error":
            with pytest.raises(CelEvaluationError):
                selector.matches(device)
        else:
            assert selector.matches(device) is expected, device.driver


# cel-spec optionals.textproto, each behaviour as a selector that is true when CEL agrees.
SPEC = [
    ("null", "optional.of(null).hasValue()"),
    ("null-non-zero", "!optional.ofNonZeroValue(null).hasValue()"),
    ("none-or-none-or-value", "optional.none().or(optional.none()).orValue(42) == 42"),
    ("none-optMap", "!optional.none().optMap(y, y + 1).hasValue()"),
    ("empty-map-optFlatMap", "!{}.?key.optFlatMap(k, k.?subkey).hasValue()"),
    ("empty-submap-optFlatMap", "!{'key': {}}.?key.optFlatMap(k, k.?subkey).hasValue()"),
    ("null-entry-present", "{'null_key': dyn(null)}.?null_key.hasValue()"),
    ("absent-key-absent-field", "!{true: dyn(0)}[?false].absent.hasValue()"),
    ("undefined-entry", "!{}.?null_key.invalid.hasValue()"),
    ("optFlatMap-value", "{'key': {'subkey': 'v'}}.?key.optFlatMap(k, k.?subkey).value() == 'v'"),
    (
        "optFlatMap-empty-string",
        "{'key': {'subkey': ''}}.?key.optFlatMap(k, k.?subkey).value() == ''",
    ),
    (
        "optFlatMap-non-zero",
        "!{'key': {'subkey': ''}}.?key.optFlatMap(k, optional.ofNonZeroValue(k.subkey)).hasValue()",
    ),
    ("optMap-value", "optional.of(42).optMap(y, y + 1).value() == 43"),
    ("non-zero-or", "optional.ofNonZeroValue(42).or(optional.of(20)).value() == 42"),
    ("ternary", "!(has({}.x) ? optional.of({}.x) : optional.none()).hasValue()"),
    ("empty-map-optselect", "!{}.?x.hasValue()"),
    ("has-through-none", "!has({}.?x.y)"),
    ("has-through-value", "has({'x': {'y': 'z'}}.?x.y)"),
    (
        "chaining-1",
        "optional.ofNonZeroValue('').or(optional.of({'c': {'d': 'bye'}}.c['d']))"
        ".orValue('default') == 'bye'",
    ),
    ("chaining-2", "{'c': {'d': 'bye'}}.c[?'d'].orValue('default') == 'bye'"),
    ("chaining-3", "{'c': {}}.c[?'missing'].orValue('default') == 'default'"),
    ("chaining-4", "optional.of({'c': {'i': 'bye'}}).c.i.orValue('default') == 'bye'"),
    (
        "chaining-5",
        "optional.of({'c': {}}).c.missing.or(optional.none()[0]).orValue('default') == 'default'",
    ),
    (
        "chaining-6",
        "optional.of({'c': {}}).c.missing.or(optional.of(['lv'])[0]).orValue('default') == 'lv'",
    ),
    ("chaining-7", "optional.of({'c': {'i': 'bye'}}).c['i'].orValue('default') == 'bye'"),
    ("chaining-8", "optional.of({'c': {}}).c['missing'].orValue('default') == 'default'"),
    (
        "chaining-9",
        "has(optional.of({'c': {'e': 'hi'}}).c) && !has(optional.of({'c': {'e': 'hi'}}).c.missing)",
    ),
    (
        "chaining-11",
        "{'c': {'d': 'bye'}}.?c.missing.or({'c': {'d': 'bye'}}.?c['d']).orValue('').size() == 3",
    ),
    (
        "chaining-12",
        "{?'n': optional.ofNonZeroValue({?'m': {'c': {'d': 'bye'}}.?c})} == "
        "{'n': {'m': {'d': 'bye'}}}",
    ),
    (
        "chaining-13",
        "{?'n': optional.ofNonZeroValue(dyn({?'m': {}.?c})), 's': dyn(true)} == {'s': true}",
    ),
    ("chaining-14", "[?{}.?c, ?optional.of(42), ?optional.none()] == [42]"),
    ("chaining-15", "[?optional.ofNonZeroValue({'c': []}.?c.orValue(dyn({})))] == []"),
    (
        "chaining-16",
        "!optional.ofNonZeroValue({?'n': optional.ofNonZeroValue({?'m': optional.of({}).?c})})"
        ".hasValue()",
    ),
    ("optional-empty-map", "!optional.of({}).?c.hasValue()"),
    ("none-optselect", "!optional.none().?field.hasValue()"),
    ("empty-list-optindex", "![][?0].hasValue()"),
    ("optional-empty-list-optindex", "!optional.of([])[?0].hasValue()"),
    ("none-optindex", "!optional.none()[?0].hasValue()"),
    ("list-optindex", "['foo'][?0].value() == 'foo'"),
    ("optional-list-optindex", "optional.of(['foo'])[?0].value() == 'foo'"),
    # mixed keys need dyn(): Kubernetes wants map literals homogeneous
    ("mixed-keys-bool", "{dyn(true): 1, dyn(2): 2, dyn(5u): 3}[?true].value() == 1"),
    ("mixed-keys-double", "{dyn(1u): 1.0, dyn(2): 2.0, dyn(3u): 3.0}[?3.0].value() == 3.0"),
    ("mixed-keys-uint", "{dyn(1u): 1.0, dyn(2): 2.0, dyn(3u): 3.0}[?2u].value() == 2.0"),
    ("mixed-keys-int", "{dyn(1u): 1.0, dyn(2): 2.0, dyn(3u): 3.0}[?1].value() == 1.0"),
    ("eq-none-none", "optional.none() == optional.none()"),
    ("eq-none-int", "!(optional.none() == optional.of(1))"),
    ("eq-int-none", "!(optional.of(1) == optional.none())"),
    ("eq-int-int", "optional.of(1) == optional.of(1)"),
    ("ne-none-none", "!(optional.none() != optional.none())"),
    ("ne-none-int", "optional.none() != optional.of(1)"),
    ("ne-int-int", "!(optional.of(1) != optional.of(1))"),
]


@pytest.mark.parametrize("expression", [pytest.param(e, id=name) for name, e in SPEC])
def test_spec_behaviour(expression: str) -> None:
    assert compile_selector(expression).matches(BARE) is True


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        pytest.param("{'n': dyn(null)}.?n.invalid.hasValue()", "field selection", id="null-select"),
        pytest.param("{true: dyn(0)}[?true].absent.hasValue()", "field selection", id="int-select"),
        pytest.param(
            "optional.ofNonZeroValue({'c': {'d': 'bye'}}.a.z).hasValue()",
            "no such key: a",
            id="plain-select-still-fails",
        ),
        pytest.param("optional.none().value() == 1", "optional.none() dereference", id="value"),
        pytest.param(f"{D}.?nope.value() == 1", "optional.none() dereference", id="attr-value"),
        pytest.param("[?dyn(1)] == [1]", "needs an optional value", id="list-entry-plain"),
        pytest.param("{?'k': dyn(1)} == {}", "needs an optional value", id="map-entry-plain"),
        pytest.param("dyn(1).optMap(x, x).hasValue()", "optMap", id="optMap-plain"),
        pytest.param("dyn([1])[?'a'].hasValue()", "_[?_]", id="list-string-index"),
        pytest.param(
            "optional.of(1).optFlatMap(x, dyn(x)).hasValue()", "must yield an optional", id="flat"
        ),
    ],
)
def test_evaluation_errors(expression: str, fragment: str) -> None:
    selector = compile_selector(expression)
    with pytest.raises(CelEvaluationError, match=re.escape(fragment)):
        selector.matches(H100)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        pytest.param(f"{D}.?type", "must evaluate to bool, not optional_type(dyn)", id="result"),
        pytest.param(f'{D}.?type == "gpu"', "'_==_' applied to (optional_type(dyn), string)"),
        pytest.param("[?1] == [1]", "needs an optional value, found int", id="list-entry-int"),
        pytest.param("{?'k': 'v'} == {}", "needs an optional value, found string", id="map-entry"),
        pytest.param("(1).?x.hasValue()", "type 'int' does not support field selection"),
        pytest.param("device.?nope.hasValue()", "undefined field 'nope' of device"),
        pytest.param("[1][?'a'].hasValue()", "'_[_]' applied to (list(int), string)"),
        pytest.param("optional.of(1).orValue('a') == 1", "'orValue' applied to"),
        pytest.param("optional.of(1).or(2).hasValue()", "'or' applied to"),
        pytest.param("(1).optMap(x, x).hasValue()", "optMap() needs an optional target"),
        pytest.param("optional.of(1).optFlatMap(x, x).hasValue()", "must yield an optional"),
        pytest.param("optional.of(1).hasValue(1)", "'hasValue' applied to"),
        pytest.param("optional.of(1).value() == 'a'", "'_==_' applied to (int, string)"),
        pytest.param(
            f'{C}.?memory.orValue(0).isGreaterThan(quantity("1"))', "'orValue' applied to"
        ),
    ],
)
def test_type_errors(expression: str, fragment: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("expression", "line", "column"),
    [
        pytest.param("f(a, ?b)", 1, 6, id="call-argument"),
        pytest.param("[?]", 1, 2, id="empty-list"),
        pytest.param("{?}", 1, 2, id="empty-map"),
        pytest.param(f"{D}.?type()", 1, 37, id="optional-call"),
        pytest.param(f"has({D}.?type)", 1, 1, id="has-optional"),
        pytest.param("true &&\n  device.attributes.?", 2, 21, id="trailing-mark"),
        pytest.param("device.driver == 'a' ? : true", 1, 24, id="ternary-missing-operand"),
        pytest.param("{'a': ?x}", 1, 7, id="optional-map-value"),
    ],
)
def test_syntax_errors_point_at_the_source(expression: str, line: int, column: int) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert "\n | " in str(info.value)  # the rendered message shows the line and a caret


@pytest.mark.parametrize(
    ("optional", "plain"),
    [
        pytest.param(f"{D}.?index.orValue(0) > 1", f"{D}.index > 1", id="select"),
        pytest.param(f'{D}[?"index"].orValue(0) > 1', f'{D}["index"] > 1', id="index"),
        pytest.param(
            f'{C}.?memory.orValue(quantity("0")).isGreaterThan(quantity("4"))',
            f'{C}.memory.isGreaterThan(quantity("4"))',
            id="quantity",
        ),
        pytest.param(
            f'{D}.?productName.optMap(p, p.startsWith("H")).orValue(false)',
            f'{D}.productName.startsWith("H")',
            id="optMap",
        ),
    ],
)
def test_cost_close_to_the_plain_form(optional: str, plain: str) -> None:
    # cel-go prices `.?` like `.` and each optional method call as one call.
    extra = compile_selector(optional).max_cost - compile_selector(plain).max_cost
    assert 0 <= extra <= 4
