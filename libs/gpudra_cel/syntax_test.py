"""Parsing into gpudra_cel's own tree: literals, macros, namespaces, positions."""

from __future__ import annotations

import pytest

from gpudra_cel.errors import CelCompileError
from gpudra_cel.syntax import Bind, Call, Comprehension, Has, Literal, parse
from gpudra_cel.values import CelUint


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("42", 42, id="int"),
        pytest.param("-9223372036854775808", -(1 << 63), id="int-min"),
        pytest.param("0x1F", 31, id="hex"),
        pytest.param("7u", CelUint(7), id="uint"),
        pytest.param("18446744073709551615u", CelUint((1 << 64) - 1), id="uint-max"),
        pytest.param("2.5", 2.5, id="double"),
        pytest.param("1e3", 1000.0, id="exponent-double"),
        pytest.param('"a\\tb"', "a\tb", id="escape"),
        pytest.param("'\\u00e9'", "é", id="unicode-escape"),
        pytest.param('r"a\\tb"', "a\\tb", id="raw"),
        pytest.param('b"\\x00a"', b"\x00a", id="bytes"),
        pytest.param("true", True, id="bool"),
        pytest.param("null", None, id="null"),
    ],
)
def test_literals(text: str, value: object) -> None:
    node = parse(text)
    assert isinstance(node, Literal)
    assert node.value == value
    assert type(node.value) is type(value)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9223372036854775808", id="int-overflow"),
        pytest.param("18446744073709551616u", id="uint-overflow"),
    ],
)
def test_literal_range(text: str) -> None:
    with pytest.raises(CelCompileError, match="out of range"):
        parse(text)


def test_macros_and_namespaces() -> None:
    node = parse("[1].exists(x, x > 0)")
    assert isinstance(node, Comprehension)
    assert (node.kind, node.var) == ("exists", "x")
    node = parse("[1].map(x, x > 0, x * 2)")
    assert isinstance(node, Comprehension)
    assert node.predicate is not None
    assert isinstance(parse("cel.bind(v, 1, v == 1)"), Bind)
    node = parse("{}.all(k, v, true)")
    assert isinstance(node, Comprehension)
    assert (node.var, node.var2) == ("k", "v")
    assert isinstance(parse("has(a.b)"), Has)
    call = parse("optional.of(1)")
    assert isinstance(call, Call)
    assert (call.function, call.target) == ("optional.of", None)


def test_positions_point_into_the_source() -> None:
    node = parse("true &&\n  device.driver == 'x'")
    assert isinstance(node, Call)
    right = node.args[1]
    assert (right.line, right.column) == (2, 3)
