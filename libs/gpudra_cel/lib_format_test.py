"""`format()` as cel-go's strings extension (version 2, Kubernetes' en_US) prints and fails, from
cel-go's own formatting table (`ext/formatting_test.go`, the locale-aware formatter), end to end
through compiled selectors and directly on values the CEL syntax cannot write."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel import CelCompileError, CelEvaluationError, DeviceView, compile_selector
from gpudra_cel.lib_format import format_string, quote
from gpudra_cel.values import CelUint

if TYPE_CHECKING:
    from gpudra_cel.conftest import Matches

DRV = "dra.example.com"
A = f'device.attributes["{DRV}"]'
DEVICE = DeviceView(
    DRV,
    {DRV: {"model": "H100", "index": 3, "name": "fish", "flag": True, "ids": (1, 2)}},
    {},
)
SCI = "\u202f\u00d7\u202f10"  # x/text's scientific notation: narrow spaces around the sign


@pytest.mark.parametrize(
    ("text", "args", "expected"),
    [
        pytest.param("no substitution", [], "no substitution", id="no-op"),
        pytest.param(
            "str is %s and some more", ["filler"], "str is filler and some more", id="mid"
        ),
        pytest.param("%% and also %%", [], "% and also %", id="percent-escapes"),
        pytest.param("%%%s%%", ["text"], "%text%", id="inside-escapes"),
        pytest.param(
            "%d %d %d, %s %s %s",
            [1, 2, 3, "A", "B", "C"],
            "1 2 3, A B C",
            id="multiple",
        ),
        pytest.param("%.3f", [1.2345], "1.234", id="fixed-precision"),
        pytest.param("%f", [2.71828], "2.718280", id="fixed-default"),
        pytest.param("%.2f", [1234567.891], "1,234,567.89", id="fixed-grouping"),
        pytest.param("%.1f", [-1234.56], "-1,234.6", id="fixed-negative"),
        pytest.param("%f", ["NaN"], "NaN", id="fixed-nan-string"),
        pytest.param("%f", ["Infinity"], "∞", id="fixed-infinity-string"),
        pytest.param("%f", [-math.inf], "-∞", id="fixed-negative-infinity"),
        pytest.param("%.2f %e", [-0.0, -0.0], f"0.00 0.000000{SCI}⁰⁰", id="negative-zero"),
        pytest.param("%e", [2.71828], f"2.718280{SCI}⁰⁰", id="scientific-default"),
        pytest.param("%.6e", [1052.032911275], f"1.052033{SCI}⁰³", id="scientific"),
        pytest.param("%.2e", [0.00123], f"1.230000{SCI}⁻⁰³", id="scientific-ignores-precision"),
        pytest.param("%e", [-5.0e100], f"-5.000000{SCI}¹⁰⁰", id="scientific-three-digits"),
        pytest.param("%b", [5], "101", id="binary"),
        pytest.param("%b", [-5], "-101", id="binary-negative"),
        pytest.param("%b", [CelUint(64)], "1000000", id="binary-uint"),
        pytest.param("%b", [True], "1", id="binary-bool"),
        pytest.param("%o", [11], "13", id="octal"),
        pytest.param("%o", [CelUint(65535)], "177777", id="octal-uint"),
        pytest.param("%x is 30", [30], "1e is 30", id="hex"),
        pytest.param("%X", [30], "1E", id="hex-upper"),
        pytest.param("%x", [-30], "-1e", id="hex-negative"),
        pytest.param("%x", ["Hello world!"], "48656c6c6f20776f726c6421", id="hex-string"),
        pytest.param("%X", [b"\x00\x00byte"], "000062797465", id="hex-bytes"),
        pytest.param("%s", [2.71], "2.71", id="string-double"),
        pytest.param("%s", [0.000000002], "2e-09", id="string-double-exponent"),
        pytest.param("%s", [[2.71]], "[2.710000]", id="string-list-double"),
        pytest.param("%s", [math.inf], "+Inf", id="string-infinity"),
        pytest.param(
            "%s", [[math.nan, math.inf, -math.inf]], '["NaN", "+Inf", "-Inf"]', id="list-specials"
        ),
        pytest.param("%d", [CelUint(64)], "64", id="decimal-uint"),
        pytest.param("null: %s", [None], "null: null", id="null"),
        pytest.param("%s", [999999999999], "999999999999", id="string-int"),
        pytest.param("some bytes: %s", [b"xyz"], "some bytes: xyz", id="string-bytes"),
        pytest.param(
            "%s",
            [["abc", 3.14, None, [9, 8], b"\n"]],
            '["abc", 3.140000, null, [9, 8], b"\\n"]',
            id="string-list",
        ),
        pytest.param(
            "%s",
            [{"key1": b"xyz", "key5": None, "key4": True, "key3": 2.71828}],
            '{"key1":b"xyz", "key3":2.718280, "key4":true, "key5":null}',
            id="string-map-sorted",
        ),
        pytest.param(
            "%s",
            [{CelUint(2): "value2", True: math.nan, 10: -1.5}],
            '{10:-1.500000, 2:"value2", true:"NaN"}',
            id="map-key-kinds",
        ),
        pytest.param("%s, %s", [True, False], "true, false", id="bools"),
        pytest.param("%s", ['tab\tquote" é \x7f'], 'tab\tquote" é \x7f', id="string-as-is"),
        pytest.param("%s", [['q"\t\x01é\u00a0']], '["q\\"\\t\\x01é\\u00a0"]', id="go-quoting"),
    ],
)
def test_format_output(text: str, args: list[object], expected: str) -> None:
    assert format_string(text, args) == expected


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        pytest.param("%a", [1], 'unrecognized formatting clause "a"', id="unknown-clause"),
        pytest.param("%E", [0.5], 'unrecognized formatting clause "E"', id="upper-e"),
        pytest.param("%d %d %d", [0, 1], "index 2 out of range", id="too-few"),
        pytest.param("filler %", [1], "unexpected end of string", id="dangling-percent"),
        pytest.param("filler %", [], "index 0 out of range", id="dangling-no-args"),
        pytest.param("%.34", [5.0], "could not find end of precision specifier", id="precision"),
        pytest.param("%.f", [5.0], "error while converting precision", id="empty-precision"),
        pytest.param("%.99999f", [5.0], "exceeds maximum allowed precision", id="huge-precision"),
        pytest.param(
            "%b", ["abc"], "error during formatting: only integers and bools", id="binary-string"
        ),
        pytest.param("%d", [1.5], "decimal clause can only be used on integers, was given double"),
        pytest.param("%d", [True], "was given bool", id="decimal-bool"),
        pytest.param("%o", ["s"], "octal clause can only be used on integers", id="octal"),
        pytest.param("%x", [0.5], "can be formatted as hex, was given double", id="hex-double"),
        pytest.param("%f", [1], "fixed-point clause can only be used on doubles", id="fixed-int"),
        pytest.param("%e", [None], "scientific clause", id="scientific-null"),
        pytest.param("%f", ["inf"], "was given string", id="fixed-other-string"),
        pytest.param("%s", [b"\xff"], "invalid UTF-8", id="bad-bytes"),
        pytest.param("%s", [[{1.5: 1}]], "map key of type double", id="bad-map-key"),
        pytest.param("%d", [None], "was given null_type", id="decimal-null"),
        pytest.param("%s", [Quantity.parse("1Gi")], "given kubernetes.Quantity", id="quantity"),
        pytest.param("%s", [[Semver.parse("1.0.0")]], "for kubernetes.Semver", id="semver-in-list"),
    ],
)
def test_format_errors(text: str, args: list[object], message: str) -> None:
    with pytest.raises(CelEvaluationError, match=message):
        format_string(text, args)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f'"%s/%d".format([{A}.model, {A}.index]) == "H100/3"', True, id="device"),
        pytest.param(
            f'cel.bind(args, [{A}.index], "gpu-%03d".format(args) == "x")',
            'unrecognized formatting clause "0"',
            id="no-flags-at-run-time",
        ),
        pytest.param(f'"%s".format([{A}.ids]) == "[1, 2]"', True, id="list-attribute"),
        pytest.param(f'"%d".format([{A}.name]) == ""', "decimal clause", id="dyn-wrong-kind"),
        pytest.param('"%.1f".format([2.25]) == "2.2"', True, id="folded-half-even"),
        pytest.param('"%x".format([255]).upperAscii() == "FF"', True, id="chained"),
        pytest.param(
            '[dyn("a"), dyn(true)].join(",") == ""', "join: invalid input: true", id="join-v2"
        ),
        pytest.param(
            '[dyn("a"), dyn(1), dyn({})].join() == ""', "join: invalid input: 1$", id="join-v2-int"
        ),
        pytest.param(
            'dyn([dyn("a"), dyn({})]).join() == ""', "join: invalid input: {}", id="join-v2-map"
        ),
    ],
)
def test_format_in_selectors(expression: str, expected: bool | str, matches: Matches) -> None:
    matches(compile_selector(expression), DEVICE, expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param('"int is %d".format([5.2]) == ""', "decimal clause", id="decimal"),
        pytest.param('"double is %f".format([true]) == ""', "fixed-point clause", id="fixed"),
        pytest.param('"%e".format([1]) == ""', "scientific clause", id="scientific"),
        pytest.param('"%b".format(["a"]) == ""', "binary", id="binary"),
        pytest.param('"%x".format([1.0]) == ""', "hex", id="hex"),
        pytest.param('"%o".format([true]) == ""', "octal clause", id="octal"),
        pytest.param(
            '"%s".format([[1, quantity("1")]]) == ""', "given kubernetes.Quantity", id="nested"
        ),
        pytest.param('"%s %s".format(["abc"]) == ""', "index 1 out of range", id="too-few"),
        pytest.param('"%s".format(["a", "b", "c"]) == ""', "expected 1, got 3", id="too-many"),
        pytest.param('"filler %".format([]) == ""', "unexpected end of string", id="dangling"),
        pytest.param('"%j".format([123]) == ""', 'unrecognized formatting clause "j"', id="clause"),
        pytest.param('"%03d".format([1]) == ""', 'unrecognized formatting clause "0"', id="flags"),
        pytest.param('"%.34".format([5.0]) == ""', "end of precision specifier", id="precision"),
    ],
)
def test_literal_format_is_checked_when_compiling(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message) as info:
        compile_selector(expression)
    assert "\n | " in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('single-quote with "double quote"', '"single-quote with \\"double quote\\""'),
        pytest.param("two escape sequences \a\n", '"two escape sequences \\a\\n"', id="escapes"),
        pytest.param("back\\slash\t\v\f\r\b", '"back\\\\slash\\t\\v\\f\\r\\b"', id="all-escapes"),
        pytest.param("ünïcödé \x01", '"ünïcödé \x01"', id="kept-as-is"),
    ],
)
def test_strings_quote(text: str, expected: str) -> None:
    assert quote(text) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f"strings.quote({A}.name) == '\"fish\"'", True, id="attribute"),
        pytest.param("strings.quote('a\\nb').size() == 6", True, id="escaped-newline"),
        pytest.param("strings.quote('%s').format(['x']) == '\"x\"'", True, id="then-format"),
        pytest.param("strings.quote(1)", "no matching overload for 'strings.quote'", id="int"),
        pytest.param("strings.quotes('a')", "undeclared reference to 'strings.quotes'", id="typo"),
    ],
)
def test_strings_quote_is_callable_in_selectors(expression: str, expected: bool | str) -> None:
    if isinstance(expected, bool):
        assert compile_selector(expression).matches(DEVICE) is expected
    else:
        with pytest.raises(CelCompileError, match=expected):
            compile_selector(expression)


_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**64 - 1).map(CelUint),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-5, 5)), inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="%sdfeEbxXoq.0129 aé", max_size=12), st.lists(_VALUES, max_size=4))
def test_any_format_and_arguments_give_text_or_a_cel_error(text: str, args: list[object]) -> None:
    try:
        result: object = format_string(text, args)
    except CelEvaluationError as exc:  # the only failure there may be, with a message
        result = str(exc)
    assert isinstance(result, str)
    assert result or not text or "%" in text
