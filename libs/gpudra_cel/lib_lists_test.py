"""cel-go's lists extension (version 3) and the optional library's list functions (version 2),
end to end through compiled selectors: values and errors as cel-go gives them (its `ext/lists`
and `cel/optional` tests), a type error for what no overload declares, and costs that the
estimate bounds and the meter counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_cel import CelCompileError, CelEvaluationError, DeviceView, compile_selector
from gpudra_cel.checker import check
from gpudra_cel.cost import estimate_cost
from gpudra_cel.dispatch import dispatch
from gpudra_cel.library import FUNCTIONS
from gpudra_cel.runtime_cost import compile_counting
from gpudra_cel.selector import CountingSelector
from gpudra_cel.syntax import parse
from gpudra_cel.values import CelOptional, CelUint

DRV = "dra.example.com"
A = f'device.attributes["{DRV}"]'
DEVICE = DeviceView(
    DRV, {DRV: {"ids": (3, 1, 2, 1), "names": ("b", "a", "c"), "n": 2, "model": "H100"}}, {}
)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("[1, 2, 3, 4].slice(1, 3) == [2, 3]", id="slice"),
        pytest.param("[1, 2, 3, 4].slice(0, 0) == []", id="slice-empty"),
        pytest.param(f"{A}.ids.slice(1, {A}.n) == [1]", id="slice-attribute"),
        # mixed nesting needs dyn(): Kubernetes wants list literals homogeneous
        pytest.param(
            "[dyn([1]), dyn([dyn(2), dyn([3])]), dyn(4)].flatten()"
            " == [dyn(1), dyn(2), dyn([3]), dyn(4)]",
            id="flatten-one-level",
        ),
        pytest.param(
            "[dyn(1), dyn([dyn(2), dyn([dyn(3), dyn([4])])])].flatten(2)"
            " == [dyn(1), dyn(2), dyn(3), dyn([4])]",
            id="flatten-depth",
        ),
        pytest.param("[dyn(1), dyn([2])].flatten(0) == [dyn(1), dyn([2])]", id="flatten-zero"),
        pytest.param(
            "[dyn(1), dyn(2), dyn([]), dyn([]), dyn([3, 4])].flatten() == [1, 2, 3, 4]",
            id="flatten-empties",
        ),
        pytest.param(f"{A}.ids.flatten() == {A}.ids", id="flatten-flat-dyn"),
        pytest.param("lists.range(4) == [0, 1, 2, 3]", id="range"),
        pytest.param("lists.range(0) == [] && lists.range(-3) == []", id="range-empty"),
        pytest.param(f"lists.range({A}.n).map(i, i * 2) == [0, 2]", id="range-attribute"),
        pytest.param("[5, 1, 2].reverse() == [2, 1, 5]", id="reverse"),
        pytest.param(
            "[dyn(1), dyn(2), dyn(1.0), dyn(3u), dyn(2)].distinct() == [dyn(1), dyn(2), dyn(3u)]",
            id="distinct-numeric",
        ),
        pytest.param(f"{A}.ids.distinct() == [3, 1, 2]", id="distinct-attribute"),
        pytest.param("[3, 1, 2].sort() == [1, 2, 3]", id="sort-ints"),
        pytest.param("['b', 'c', 'a'].sort() == ['a', 'b', 'c']", id="sort-strings"),
        pytest.param("[true, false].sort() == [false, true]", id="sort-bools"),
        pytest.param("[2.5, -1.0].sort() == [-1.0, 2.5]", id="sort-doubles"),
        pytest.param("[b'b', b'a'].sort() == [b'a', b'b']", id="sort-bytes"),
        # cel-go's comparable types include durations and timestamps
        pytest.param(
            "[duration('2s'), duration('-1s')].sort() == [duration('-1s'), duration('2s')]",
            id="sort-durations",
        ),
        pytest.param(
            "[timestamp(5), timestamp(1)].sort() == [timestamp(1), timestamp(5)]",
            id="sort-timestamps",
        ),
        pytest.param("[3, 1, 2].sortBy(x, timestamp(-x)) == [3, 2, 1]", id="sortBy-timestamp-keys"),
        pytest.param(f"{A}.names.sort() == ['a', 'b', 'c']", id="sort-attribute"),
        pytest.param("[].sort() == []", id="sort-empty"),
        pytest.param("[1, 2, 3].first() == optional.of(1)", id="first"),
        pytest.param("[1, 2, 3].last().value() == 3", id="last"),
        pytest.param("![].first().hasValue() && ![].last().hasValue()", id="first-last-empty"),
        pytest.param(f"{A}.ids.last().orValue(0) == 1", id="last-attribute"),
        pytest.param("optional.unwrap([optional.of(42), optional.none()]) == [42]", id="unwrap"),
        pytest.param("[optional.none(), optional.of('a')].unwrapOpt() == ['a']", id="unwrapOpt"),
        pytest.param(f"[{A}.?model, {A}.?nothing].unwrapOpt() == ['H100']", id="unwrap-chain"),
        pytest.param("cel.bind(lists, [2, 1], lists.sort() == [1, 2])", id="lists-variable"),
        pytest.param("[3, 1, 2].sortBy(x, -x) == [3, 2, 1]", id="sortBy"),
        pytest.param(
            "[{'n': dyn(2), 'v': dyn('b')}, {'n': dyn(1), 'v': dyn('a')}].sortBy(m, m.n)"
            ".map(m, m.v) == ['a', 'b']",
            id="sortBy-maps",
        ),
        pytest.param("['bb', 'a', 'cc'].sortBy(s, s.size()) == ['a', 'bb', 'cc']", id="stable"),
        pytest.param(f"{A}.names.sortBy(n, n)[0] == 'a'", id="sortBy-attribute"),
        pytest.param("[].sortBy(x, x) == []", id="sortBy-empty"),
    ],
)
def test_list_functions(expression: str) -> None:
    assert compile_selector(expression).matches(DEVICE) is True


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param(
            "[1, 2].slice(-1, 1) == []",
            r"cannot slice\(-1, 1\), negative indexes not supported",
            id="slice-negative",
        ),
        pytest.param(
            "[1, 2].slice(2, 1) == []",
            r"cannot slice\(2, 1\), start index must be less than or equal to end index",
            id="slice-reversed",
        ),
        pytest.param(
            "[1, 2].slice(0, 3) == []",
            r"cannot slice\(0, 3\), list is length 2",
            id="slice-past-end",
        ),
        pytest.param("[[1]].flatten(-1) == []", "level must be non-negative", id="flatten-neg"),
        pytest.param(
            f"dyn([1, {A}.model]).sort() == []",
            "list elements must have the same type",
            id="sort-mixed",
        ),
        pytest.param(
            "dyn([quantity('1'), quantity('2')]).sort() == []",
            "list elements must be comparable",
            id="sort-quantities",
        ),
        pytest.param(
            f"lists.range({A}.n * 1000000).size() > 0",
            "actual cost limit exceeded",
            id="range-too-long",
        ),
        pytest.param(
            f"lists.range({A}.n * 1000).distinct().size() > 0",
            "actual cost limit exceeded",
            id="distinct-too-long",
        ),
        pytest.param("dyn([1]).unwrapOpt() == []", "expected optionals", id="unwrap-non-optional"),
        pytest.param(
            "[1, 2].sortBy(x, x == 1 ? 'a' : dyn(1)) == []",
            "list elements must have the same type",
            id="sortBy-mixed-keys",
        ),
        pytest.param(
            f"lists.range({A}.n * 1000).sortBy(i, -i).size() > 0",
            "actual cost limit exceeded",
            id="sortBy-too-long",
        ),
    ],
)
def test_list_function_errors(expression: str, message: str) -> None:
    selector = compile_selector(expression)
    with pytest.raises(CelEvaluationError, match=message):
        selector.matches(DEVICE)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param("[[1]].sort() == []", "no matching overload for 'sort'", id="sort-lists"),
        pytest.param("[1].unwrapOpt() == []", "no matching overload", id="unwrap-plain-list"),
        pytest.param("'abc'.reverse() == 'cba'", "no matching overload", id="string-reverse-v3"),
        pytest.param(
            "[1, 2].sortBy(x, [x]) == []", "no matching overload for '@sortByAssociatedKeys'"
        ),
        pytest.param("{'a': 1}.sortBy(k, k) == []", "sortBy can only be applied", id="sortBy-map"),
        pytest.param("'ab'.sortBy(c, c) == []", "sortBy can only be applied", id="sortBy-literal"),
        pytest.param("[1].sortBy(x.y, x) == []", "variable", id="sortBy-variable"),
        pytest.param("lists.nope(1)", "undeclared reference to 'lists.nope'", id="namespace"),
        pytest.param("[1, 2].slice(1) == [2]", "no matching overload", id="slice-one-arg"),
        # Kubernetes' list library declares min / max / isSorted for its comparable types only
        pytest.param(
            "[quantity('1')].min() == quantity('1')",
            "no matching overload for 'min'",
            id="min-quantities",
        ),
        pytest.param("[[1]].max() == [1]", "no matching overload for 'max'", id="max-lists"),
        pytest.param(
            "[{'a': 1}].isSorted()", "no matching overload for 'isSorted'", id="isSorted-maps"
        ),
    ],
)
def test_undeclared_forms_are_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message):
        compile_selector(expression)


def _metered(expression: str) -> tuple[CountingSelector, int]:
    tree = parse(expression)
    checked = check(tree, expression)
    estimate = estimate_cost(tree, checked)
    fn, slots = compile_counting(tree, checked, expression, estimate)
    return CountingSelector(expression, fn, slots, estimate, estimate), estimate


@pytest.mark.parametrize(
    ("expression", "at_least"),
    [
        # the list created (10), the call (1) and the elements copied
        pytest.param(f"{A}.ids.slice(0, 3).size() == 3", 3 + 11, id="slice"),
        pytest.param(f"lists.range({A}.n * 10).size() == 20", 20 + 11, id="range"),
        pytest.param(f"{A}.ids.reverse().size() == 4", 4 + 11, id="reverse"),
        # n² comparisons at 2 units (+0.1 for strings)
        pytest.param(f"{A}.ids.distinct().size() == 3", 2 * 16 + 11, id="distinct"),
        pytest.param(f"{A}.names.sort().size() == 3", int(2.1 * 9) + 11, id="sort-strings"),
        pytest.param(f"{A}.ids.flatten().size() == 4", 4 + 11, id="flatten"),
        # 4 iterations (loop 3 + i 1 + `-` 1) and the sort of 4 keys (2 * 16 + 11)
        pytest.param(f"{A}.ids.sortBy(i, -i).size() == 4", 4 * 5 + 2 * 16 + 11, id="sortBy"),
    ],
)
def test_list_costs_are_metered_within_the_estimate(expression: str, at_least: int) -> None:
    selector, estimate = _metered(expression)
    assert selector.matches(DEVICE) is True
    assert at_least <= selector.actual_cost(DEVICE) <= estimate


_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**64 - 1).map(CelUint),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.none(),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_VALUES, max_size=6).map(tuple),
    st.integers(-3, 10),
    st.integers(-3, 10),
    st.sampled_from(["slice", "flatten", "reverse", "distinct", "sort", "first", "last", "range"]),
)
def test_list_functions_give_a_value_or_a_cel_error(
    items: tuple[object, ...], a: int, b: int, function: str
) -> None:
    overloads = FUNCTIONS["lists.range" if function == "range" else function]
    arguments: dict[str, list[object]] = {
        "slice": [items, a, b],
        "flatten": [items, a],
        "range": [a * b],
    }
    args = arguments.get(function, [items])
    arity = len(args)  # the checker hands the compiler the overloads of the call's arity
    fitting = tuple(ov for ov in overloads if len(ov.args) + (ov.target is not None) == arity)
    try:
        result = dispatch(function, fitting, args)
    except CelEvaluationError:
        return
    assert isinstance(result, tuple | CelOptional)
    if function in ("sort", "reverse", "distinct"):
        assert len(result) <= len(items)  # type: ignore[arg-type]
