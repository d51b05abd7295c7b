"""Table tests of what `compile_selector` rejects, and where its message points."""

from __future__ import annotations

import pytest

from gpudra_cel import CelCompileError, CelError, CelOptions, compile_selector

D = 'device.attributes["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    ("expression", "fragment", "column"),
    [
        pytest.param("", "empty", 0, id="empty"),
        pytest.param("   ", "empty", 0, id="blank"),
        pytest.param("1 +", "unexpected end", 3, id="truncated"),
        pytest.param('device.driver == "x" &&& true', "syntax error", 24, id="bad-operator"),
        pytest.param("device.driver == 'x' # c", "unexpected character", 22, id="bad-char"),
        pytest.param("foo == 1", "undeclared reference to 'foo'", 1, id="unknown-ident"),
        pytest.param("device.drivr == 'x'", "undefined field 'drivr'", 1, id="unknown-field"),
        pytest.param(
            f"{D}.type.frobnicate()", "undeclared reference to 'frobnicate'", 1, id="unknown-fn"
        ),
        pytest.param("device.driver + 1 == 2", "'_+_' applied to (string, int)", 1, id="type-plus"),
        pytest.param("device.driver > 1", "'_>_' applied to (string, int)", 1, id="type-compare"),
        pytest.param("device.driver == 1", "'_==_' applied to (string, int)", 1, id="type-equal"),
        pytest.param(
            'device.capacity["d"].memory > quantity("1")', "'_>_'", 1, id="quantity-operator"
        ),
        pytest.param(
            "quantity(1).sign() == 1", "'quantity' applied to (int)", 1, id="quantity-int"
        ),
        pytest.param(
            "device.driver.startsWith(1)", "'startsWith' applied to string.(int)", 1, id="arg-type"
        ),
        pytest.param("device.driver", "must evaluate to bool, not string", 1, id="result-string"),
        pytest.param("1 + 2", "must evaluate to bool, not int", 1, id="result-int"),
        pytest.param("!device.driver", "expected bool, found string", 2, id="not-string"),
        pytest.param("device.allowMultipleAllocations && 1", "expected bool", 36, id="and-int"),
        pytest.param("(1).all(x, x)", "cannot iterate over int", 1, id="iterate-int"),
        pytest.param("has(device)", "field selection", 1, id="has-non-select"),
        pytest.param("cel.bind(1, 2, true)", "variable name", 10, id="bind-non-ident"),
        pytest.param("[1].all(1, true)", "variable name", 9, id="macro-non-ident"),
        pytest.param("x.y{a: 1}", "message construction", 1, id="message"),
        pytest.param(".device.driver == 'x'", "leading '.'", 1, id="dot-ident"),
        pytest.param("99999999999999999999 > 1", "out of range", 1, id="int-literal-range"),
        pytest.param("1 == 1.0", "'_==_' applied to (int, double)", 1, id="int-eq-double"),
        pytest.param('1 in ["a"]', "'@in' applied to (int, list(string))", 1, id="in-wrong-type"),
        pytest.param(
            f'{D}.productName.matches("[")', "invalid regular expression", 1, id="bad-regex"
        ),
        pytest.param("x" * 10241, "limit is 10240", 0, id="too-long"),
        # Kubernetes' base environment wants list and map literals homogeneous
        pytest.param(
            'device.driver in ["a", 1]',
            "expected type 'string' but found 'int'",
            24,
            id="mixed-list",
        ),
        pytest.param(
            f'{D}.index in [1, "1"]', "expected type 'int' but found 'string'", 50, id="hedged-in"
        ),
        pytest.param("[1, 2.0].size() == 2", "found 'double'", 5, id="int-double-list"),
        pytest.param(
            "[[1], ['a']].size() == 2",
            "expected type 'list(int)' but found 'list(string)'",
            7,
            id="nested-lists",
        ),
        pytest.param(
            "[optional.of(1), optional.of('a')].size() == 2",
            "expected type 'optional_type(int)' but found 'optional_type(string)'",
            18,
            id="optionals",
        ),
        pytest.param("[?optional.of(1), 'a'].size() == 2", "found 'string'", 19, id="opt-item"),
        pytest.param("{'a': 1, 'b': 'x'}.size() == 2", "found 'string'", 15, id="map-values"),
        pytest.param("{'a': 1, 2: 1}.size() == 2", "found 'int'", 10, id="map-keys"),
        pytest.param("dyn([1, 'a']).size() == 2", "found 'string'", 9, id="mixed-list-under-dyn"),
    ],
)
def test_rejects(expression: str, fragment: str, column: int) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert fragment in str(info.value)
    assert info.value.column == column
    if column:
        assert "^" in str(info.value)  # the message shows where


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f'{D}.type == "gpu" && {D}.index > 1', id="common"),
        pytest.param(f"{D}.anything.isGreaterThan(semver('1.0.0'))", id="dyn-receiver"),
        pytest.param(f"{D}.flag", id="dyn-result"),
        pytest.param(f"{D}.index == 3.0", id="dyn-vs-double"),
        pytest.param("1 < 2.5 && 2u > 1", id="cross-numeric-ordering"),
        pytest.param('"""multi\nline""".size() > 0', id="multiline-string"),
        # homogeneous literals: dyn() mixes on purpose, format() arguments are exempt, and an
        # empty literal or optional.none() takes its type from its neighbours
        pytest.param("[dyn(1), dyn('a')].size() == 2", id="dyn-elements"),
        pytest.param("'%s-%d'.format(['a', 1]) == 'a-1'", id="format-exempt"),
        pytest.param("'%s'.format([['a', 1]]) != ''", id="format-exempt-nested"),
        pytest.param("[optional.of(42), optional.none()].size() == 2", id="optional-none"),
        pytest.param("[[], [1]].size() == 2 && {'a': [], 'b': [1]}.size() == 2", id="empties"),
        pytest.param("[?optional.of(1), 2].size() == 2", id="optional-item"),
        pytest.param(f"[{D}.index, {D}.other].size() == 2", id="attributes"),
    ],
)
def test_accepts(expression: str) -> None:
    assert compile_selector(expression).expression == expression


@pytest.mark.parametrize(
    ("expression", "limit"),
    [
        pytest.param(
            f"{D}.tags.all(a, {D}.tags.all(b, {D}.tags.all(c, a + b + c != '')))",
            10_000,
            id="nested-loops",
        ),
        pytest.param(f"{D}.name.matches('a+b+c+d+e+f+g+h+i+j')", 10, id="regex"),
        pytest.param('device.driver == "gpu.nvidia.com"', 1, id="tiny-limit"),
    ],
)
def test_cost_limit(expression: str, limit: int) -> None:
    with pytest.raises(CelCompileError, match="estimated cost"):
        compile_selector(expression, cost_limit=limit, options=CelOptions(reject_costly=True))
    # Without reject_costly (Kubernetes' allocator), the limit is enforced per evaluation.
    assert compile_selector(expression, cost_limit=limit).counts_cost


def test_cost_grows_with_iteration_and_is_reported() -> None:
    flat = compile_selector(f'{D}.type == "gpu"').max_cost
    loop = compile_selector(f'{D}.tags.exists(t, t == "gpu")').max_cost
    nested = compile_selector(f"{D}.tags.exists(t, {D}.tags.exists(u, t == u))").max_cost
    assert 0 < flat < loop < nested <= 1_000_000


def test_non_string_expression() -> None:
    with pytest.raises(CelError):
        compile_selector(42)  # type: ignore[arg-type]


def test_deep_nesting_is_a_compile_error() -> None:
    with pytest.raises(CelCompileError):
        compile_selector("(" * 400 + "true" + ")" * 400)


def test_long_condition_chains_are_not_deep_nesting() -> None:
    chain = " && ".join(f'device.attributes["d"].a{i} == "x"' for i in range(200))
    selector = compile_selector(chain + " || device.driver == 'gpu'")
    assert selector.max_cost < 10_000
