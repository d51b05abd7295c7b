"""Parsing into gpudra_cel's own tree: literals, macros, namespaces, positions, and CEL's optional
syntax (`a.?b`, `m[?k]`, `[?x]`, `{?k: v}`) beside the conditional's `?` and inside strings."""

from __future__ import annotations

import pytest

from gpudra_cel.errors import CelCompileError
from gpudra_cel.syntax import (
    Bind,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListLit,
    Literal,
    MapLit,
    Node,
    OptIndex,
    OptSelect,
    Select,
    parse,
)
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


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        pytest.param("strings.quote(s)", "Call(strings.quote, s)", id="strings"),
        pytest.param("sets.contains(a, b)", "Call(sets.contains, a, b)", id="sets"),
        pytest.param("optional.none()", "Call(optional.none)", id="optional"),
        pytest.param("x.strings.quote(s)", "Call(quote, Select(x, strings), s)", id="not-a-root"),
        pytest.param(
            "[s].all(strings, strings.size() > 0)",
            "all(ListLit(s), strings, Call(_>_, Call(size, strings), 0))",
            id="bound-by-a-macro",
        ),
        pytest.param(
            "cel.bind(strings, s, strings.size())",
            "Bind(strings, s, Call(size, strings))",
            id="bound-by-cel-bind",
        ),
        pytest.param(
            "cel.bind(strings, strings.quote(s), strings)",
            "Bind(strings, Call(strings.quote, s), strings)",
            id="init-is-outside-the-binding",
        ),
        pytest.param(
            "[s].all(strings, true) && strings.quote(s) == s",
            "Call(_&&_, all(ListLit(s), strings, True), Call(_==_, Call(strings.quote, s), s))",
            id="binding-ends-with-the-macro",
        ),
        pytest.param(
            "cel.bind(cel, 1, cel.bind(x, cel, x))",
            "Bind(cel, 1, Bind(x, cel, x))",
            id="cel-bind-is-a-macro",
        ),
    ],
)
def test_namespaces(text: str, shape: str) -> None:
    assert _shape(parse(text)) == shape


def test_positions_point_into_the_source() -> None:
    node = parse("true &&\n  device.driver == 'x'")
    assert isinstance(node, Call)
    right = node.args[1]
    assert (right.line, right.column) == (2, 3)


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        pytest.param("a.?b", "OptSelect(a, b)", id="select"),
        pytest.param("a. ?b", "OptSelect(a, b)", id="select-spaced"),
        pytest.param("m[?k]", "OptIndex(m, k)", id="index"),
        pytest.param("a.?b.c", "Select(OptSelect(a, b), c)", id="chain-select"),
        pytest.param("a.?b[0]", "Index(OptSelect(a, b), 0)", id="chain-index"),
        pytest.param("m[?k].?f", "OptSelect(OptIndex(m, k), f)", id="index-then-select"),
        pytest.param("[?x, y]", "ListLit(x, y ?0)", id="list-first"),
        pytest.param("[x, ?y, ?z]", "ListLit(x, y, z ?1,2)", id="list-later"),
        pytest.param("{?k: v, 'a': 1}", "MapLit(k: v, 'a': 1 ?0)", id="map-first"),
        pytest.param("{'a': 1, ?k: v}", "MapLit('a': 1, k: v ?1)", id="map-later"),
        pytest.param("[?true]", "ListLit(True ?0)", id="bool-literal-marked"),
        pytest.param("m[?false]", "OptIndex(m, False)", id="bool-index"),
        pytest.param("a ? b : c", "Call(_?_:_, a, b, c)", id="ternary"),
        pytest.param(
            "a.?b ? [?c] : {?d: e}",
            "Call(_?_:_, OptSelect(a, b), ListLit(c ?0), MapLit(d: e ?0))",
            id="both",
        ),
        pytest.param("'a.?b' == \"[?x]\"", "Call(_==_, 'a.?b', '[?x]')", id="marks-in-strings"),
        pytest.param("r'.?' == b'{?'", "Call(_==_, '.?', b'{?')", id="raw-and-bytes"),
        pytest.param("'''a.?b, [?c]''' == a", "Call(_==_, 'a.?b, [?c]', a)", id="triple-quoted"),
        pytest.param("a // what about [?this]\n.?b", "OptSelect(a, b)", id="comment"),
        pytest.param("o.optMap(v, v + 1)", "optMap(o, v, Call(_+_, v, 1))", id="optMap"),
    ],
)
def test_optional_syntax(text: str, shape: str) -> None:
    assert _shape(parse(text)) == shape


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        pytest.param("f(a, ?b)", 1, 6, id="argument"),
        pytest.param("[?]", 1, 2, id="empty-list"),
        pytest.param("{?}", 1, 2, id="empty-map"),
        pytest.param("a.?b()", 1, 3, id="method"),
        pytest.param("a.?", 1, 3, id="trailing"),
        pytest.param("{'k': ?v}", 1, 7, id="map-value"),
        pytest.param("true &&\n [?1, 2][0] == 1 && a.?", 2, 23, id="second-line"),
        pytest.param("a.?b + 'unterminated", 1, 8, id="real-error-first"),
    ],
)
def test_optional_syntax_errors(text: str, line: int, column: int) -> None:
    with pytest.raises(CelCompileError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert "^" in str(info.value)  # the excerpt with a caret under the offending place


def test_boolean_literals_keep_their_position() -> None:
    node = parse("x == [true,\n  false]")
    assert isinstance(node, Call)
    items = node.args[1]
    assert isinstance(items, ListLit)
    assert [(i.line, i.column) for i in items.items] == [(1, 7), (2, 3)]


def _shape(node: Node) -> str:
    """A compact rendering of a tree, for the tables above."""
    if isinstance(node, Ident):
        return node.name
    if isinstance(node, Literal):
        return repr(node.value)
    if isinstance(node, Select | OptSelect):
        return f"{type(node).__name__}({_shape(node.operand)}, {node.field})"
    if isinstance(node, Index | OptIndex):
        return f"{type(node).__name__}({_shape(node.operand)}, {_shape(node.index)})"
    if isinstance(node, ListLit):
        marks = f" ?{','.join(map(str, node.optional))}" if node.optional else ""
        return f"ListLit({', '.join(_shape(i) for i in node.items)}{marks})"
    if isinstance(node, MapLit):
        entries = ", ".join(f"{_shape(k)}: {_shape(v)}" for k, v in node.entries)
        marks = f" ?{','.join(map(str, node.optional))}" if node.optional else ""
        return f"MapLit({entries}{marks})"
    if isinstance(node, Comprehension):
        return f"{node.kind}({_shape(node.range)}, {node.var}, {_shape(node.body)})"
    if isinstance(node, Call):
        args = [_shape(a) for a in ((node.target,) if node.target else ()) + node.args]
        return f"Call({', '.join([node.function, *args])})"
    if isinstance(node, Bind):
        return f"Bind({node.var}, {_shape(node.init)}, {_shape(node.body)})"
    return type(node).__name__
