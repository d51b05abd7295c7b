"""CEL operator semantics on plain values: equality, ordering, arithmetic, `in`."""

from __future__ import annotations

import math

import pytest

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import DeviceView, compile_selector
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.values import (
    CelOptional,
    CelUint,
    add,
    compare,
    contains,
    divide,
    equal,
    modulo,
    multiply,
    negate,
    subtract,
    type_name,
)

MAX, MIN = (1 << 63) - 1, -(1 << 63)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param(1, 1.0, True, id="int-double"),
        pytest.param(1, CelUint(1), True, id="int-uint"),
        pytest.param(1, True, False, id="int-bool"),
        pytest.param("1", 1, False, id="string-int"),
        pytest.param((1, "a"), [1, "a"], True, id="lists"),
        pytest.param({"a": 1}, {"a": 1.0}, True, id="maps-numeric-values"),
        pytest.param({1: "a"}, {CelUint(1): "a"}, True, id="maps-numeric-keys"),
        pytest.param({"a": 1}, {"b": 1}, False, id="maps-different-keys"),
        pytest.param(math.nan, math.nan, False, id="nan"),
        # cel-go compares an int or uint with a double as doubles (the integer rounded)
        pytest.param(2**53 + 1, float(2**53), True, id="int-double-rounded"),
        pytest.param(MAX, 2.0**63, True, id="int-max-double"),
        pytest.param(CelUint(2**64 - 1), 2.0**64, True, id="uint-max-double"),
        pytest.param(2**53 + 1, CelUint(2**53), False, id="int-uint-exact"),
        pytest.param(None, None, True, id="null"),
        pytest.param(Quantity.parse("1Ki"), Quantity.parse("1024"), True, id="quantity"),
        pytest.param(Semver.parse("1.0.0+a"), Semver.parse("1.0.0"), True, id="semver-build"),
        pytest.param(CelOptional(1), CelOptional(1.0), True, id="optional"),
        pytest.param(CelOptional.NONE, CelOptional(1), False, id="optional-none"),
    ],
)
def test_equal(a: object, b: object, expected: bool) -> None:
    assert equal(a, b) is expected
    assert equal(b, a) is expected


@pytest.mark.parametrize(
    ("fn", "a", "b", "expected"),
    [
        pytest.param(add, MAX, 1, "overflow", id="add-overflow"),
        pytest.param(subtract, MIN, 1, "overflow", id="sub-overflow"),
        pytest.param(multiply, MAX, 2, "overflow", id="mul-overflow"),
        pytest.param(divide, MIN, -1, "overflow", id="div-overflow"),
        pytest.param(
            modulo, MIN, -1, "overflow", id="mod-overflow"
        ),  # cel-go: overflow, as for MIN / -1
        pytest.param(modulo, MIN, 1, 0, id="mod-min-by-one"),
        pytest.param(subtract, CelUint(1), CelUint(2), "overflow", id="uint-underflow"),
        pytest.param(divide, 7, -2, -3, id="div-truncates"),
        pytest.param(modulo, -7, 2, -1, id="mod-sign-of-dividend"),
        pytest.param(divide, 1, 0, "division by zero", id="div-zero"),
        pytest.param(modulo, 1, 0, "modulus by zero", id="mod-zero"),
        pytest.param(divide, 1.0, 0.0, math.inf, id="double-div-zero"),
        pytest.param(add, 1, 1.0, "no matching overload", id="mixed-add"),
        pytest.param(add, "a", "b", "ab", id="concat"),
        pytest.param(add, (1,), [2], (1, 2), id="list-concat"),
        pytest.param(modulo, 1.5, 1.0, "no matching overload", id="double-mod"),
        pytest.param(add, True, True, "no matching overload", id="bool-add"),
    ],
)
def test_arithmetic(fn: object, a: object, b: object, expected: object) -> None:
    assert callable(fn)
    if isinstance(expected, str) and not isinstance(a, str):
        with pytest.raises(CelEvaluationError, match=expected):
            fn(a, b)
    else:
        assert fn(a, b) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param(1, 1.5, -1, id="int-double"),
        pytest.param(CelUint(2), 1, 1, id="uint-int"),
        pytest.param("a", "b", -1, id="strings"),
        pytest.param(False, True, -1, id="bools"),
        pytest.param(math.nan, 1.0, 2, id="nan-unordered"),
        pytest.param(2**53 + 1, float(2**53), 0, id="int-double-as-doubles"),
        pytest.param(float(2**53), 2**53 + 1, 0, id="double-int-as-doubles"),
        pytest.param(MAX, 2.0**63, 0, id="int-max-double"),
        pytest.param(CelUint(2**64 - 1), 2.0**64, 0, id="uint-max-double"),
        pytest.param(-1, -0.5, -1, id="negative"),
    ],
)
def test_compare(a: object, b: object, expected: int) -> None:
    assert compare(a, b, "_<_") == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param("a", 1, id="string-int"),
        pytest.param(True, 1, id="bool-int"),
        pytest.param(Quantity.parse("1"), Quantity.parse("2"), id="quantity-needs-methods"),
        pytest.param((1,), (2,), id="lists"),
    ],
)
def test_compare_errors(a: object, b: object) -> None:
    with pytest.raises(CelEvaluationError, match="no matching overload"):
        compare(a, b, "_<_")


def test_negate_contains_and_names() -> None:
    assert negate(5) == -5
    with pytest.raises(CelEvaluationError):
        negate(MIN)
    with pytest.raises(CelEvaluationError):
        negate(CelUint(1))
    assert contains((1, "a"), 1.0)
    assert contains({"k": 1}, "k")
    assert not contains({1: "a"}, "1")
    with pytest.raises(CelEvaluationError):
        contains("abc", "a")
    samples: list[object] = [None, True, 1, CelUint(1), 1.0, "", b"", (), {}]
    names = [type_name(v) for v in samples]
    assert names == ["null_type", "bool", "int", "uint", "double", "string", "bytes", "list", "map"]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # cel-go's list and map Equal stop only at an element comparison that answers false; a
        # Kubernetes value on the left refuses another type with an error, which they pass over
        pytest.param('[dyn(semver("1.0.0"))] == [dyn("1.0.0")]', True, id="list-semver-string"),
        pytest.param('[dyn("1.0.0")] == [dyn(semver("1.0.0"))]', False, id="list-string-semver"),
        pytest.param('[dyn(quantity("1"))] == [dyn(1)]', True, id="list-quantity-int"),
        pytest.param('[dyn(semver("1.0.0"))] != [dyn("x")]', False, id="list-not-equal"),
        pytest.param('[dyn(semver("1.0.0"))] == [dyn(null)]', False, id="list-null-is-false"),
        pytest.param(
            '[dyn(semver("1.0.0")), dyn(1)] == [dyn("x"), dyn(2)]', False, id="list-other-false"
        ),
        pytest.param('{"a": dyn(ip("1.2.3.4"))} == {"a": dyn("x")}', True, id="map-ip-string"),
        pytest.param('[[dyn(semver("1.0.0"))]] == [[dyn(1)]]', True, id="nested"),
        pytest.param(
            '[dyn(semver("1.0.0"))] in [[dyn("x")]]', True, id="in-compares-item-on-the-left"
        ),
        pytest.param('[dyn("x")] in [[dyn(semver("1.0.0"))]]', False, id="in-string-left"),
        pytest.param('semver("1.0.0") in [dyn("x")]', False, id="in-top-level-refusal"),
        # heterogeneous numbers inside lists and maps, built without mixed literals
        pytest.param("[dyn(1), dyn(2.0)] == [1, 2]", True, id="list-int-double"),
        pytest.param("dyn([1]) == [1u]", True, id="list-int-uint"),
        pytest.param("dyn({1: 'a'}) == {1u: 'a'}", True, id="map-int-uint-keys"),
        pytest.param("[dyn(0.0/0.0)] == [dyn(0.0/0.0)]", False, id="list-nan"),
    ],
)
def test_container_equality(expression: str, expected: bool) -> None:
    assert compile_selector(expression).matches(DeviceView("d", {}, {})) is expected
