"""Nesting limits: cel-go's parser, as Kubernetes uses it (the default `MaxRecursionDepth` of
250), refuses an expression when either of its two counters passes 250: the nesting of the
grammar's `expr` rule (parentheses, list and map literals, call arguments, index expressions,
conditionals: "expression recursion limit exceeded: 250") or the nesting of selections, calls on
a receiver, indexing, conditionals and binary operators ("max recursion depth exceeded").
Everything within both limits compiles and evaluates, whatever Python's recursion limit."""

from __future__ import annotations

import sys

import pytest

from gpudra_cel import CelCompileError, CountingSelector, DeviceView, compile_selector
from gpudra_cel.checker import check
from gpudra_cel.cost import estimate_cost
from gpudra_cel.runtime_cost import compile_counting
from gpudra_cel.selector import recursion_room
from gpudra_cel.syntax import parse

_DEVICE = DeviceView("gpu.nvidia.com", {"d": {"a": 1}}, {})
_EXPR_LIMIT = "expression recursion limit exceeded: 250"
_VISIT_LIMIT = "max recursion depth exceeded"


def _maps(n: int) -> str:
    return "{'a': " * n + "true" + "}" * n


def _lists(n: int) -> str:
    return "[" * n + "true" + "]" * n


# (deepest expression cel-go accepts, one level deeper, the error it gives); each accepted one
# is true. Counts: `expr` entries include the whole expression's; `==` is one binary operator.
LIMITS = [
    pytest.param("(" * 249 + "1" + ")" * 249 + " == 1", "(" * 250 + "1" + ")" * 250 + " == 1", _EXPR_LIMIT, id="parentheses"),
    pytest.param(_lists(249) + " != []", _lists(250) + " != []", _EXPR_LIMIT, id="lists"),
    pytest.param("int(" * 249 + "1" + ")" * 249 + " == 1", "int(" * 250 + "1" + ")" * 250 + " == 1", _EXPR_LIMIT, id="calls"),
    pytest.param(_maps(249) + " != {}", _maps(250) + " != {}", _EXPR_LIMIT, id="maps"),
    pytest.param("false ? false : " * 249 + "true", "false ? false : " * 250 + "true", _EXPR_LIMIT, id="conditionals"),
    pytest.param(" + ".join(["1"] * 250) + " == 250", " + ".join(["1"] * 251) + " == 251", _VISIT_LIMIT, id="additions"),
    pytest.param("1 == 1" + " == true" * 249, "1 == 1" + " == true" * 250, _VISIT_LIMIT, id="relations"),
    pytest.param(_maps(249) + ".a" * 249, _maps(249) + ".a" * 251, _VISIT_LIMIT, id="selections"),
    pytest.param(_lists(249) + "[0]" * 249, _lists(249) + "[0]" * 251, _VISIT_LIMIT, id="indexes"),
    pytest.param("'a'" + ".lowerAscii()" * 249 + " == 'a'", "'a'" + ".lowerAscii()" * 250 + " == 'a'", _VISIT_LIMIT, id="methods"),
    pytest.param('device.attributes["d"].a' + " + 0" * 246 + " == 1", 'device.attributes["d"].a' + " + 0" * 247 + " == 1", _VISIT_LIMIT, id="device-chain"),
]  # fmt: skip


@pytest.mark.parametrize(("deepest", "too_deep", "message"), LIMITS)
def test_cel_go_nesting_limits(deepest: str, too_deep: str, message: str) -> None:
    assert compile_selector(deepest).matches(_DEVICE) is True
    assert _metered(deepest).matches(_DEVICE) is True
    with pytest.raises(CelCompileError, match=message):
        compile_selector(too_deep)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("-" * 4000 + "1 == 1", id="negations"),
        pytest.param("!" * 4000 + "true", id="nots"),
        pytest.param("!!1 == 1", id="even-nots-vanish"),
        pytest.param("--'a' == 'a'", id="even-negations-vanish"),
        pytest.param(" && ".join(["true"] * 1000), id="and-chain"),
        pytest.param(" || ".join(["false"] * 1000) + " || true", id="or-chain"),
    ],
)
def test_flat_chains_have_no_depth(expression: str) -> None:
    """cel-go reads `--x`, `!!x`, `a && b && c` as flat lists, not nesting (and drops an even
    run of `!` or `-` altogether)."""
    assert compile_selector(expression).matches(_DEVICE) is True


def test_deepest_expression_from_a_deep_call_stack() -> None:
    """A fresh deepest expression compiles and evaluates from a call stack that has already
    used most of Python's recursion limit."""

    def nested(levels: int) -> bool:
        if levels:
            return nested(levels - 1)
        expression = "[" * 249 + "2" + "]" * 249 + " != []"  # not compiled before
        selector = compile_selector(expression)
        return selector.matches(_DEVICE) and selector.matches(_DEVICE)

    limit = sys.getrecursionlimit()
    assert nested(max(0, limit - _frames() - 100)) is True
    assert sys.getrecursionlimit() == limit  # the room is given back


def _metered(expression: str) -> CountingSelector:
    """The metered variant, limited at its own estimate (compiled with room, as `_compile`
    does for deep expressions)."""
    with recursion_room():
        tree = parse(expression)
        checked = check(tree, expression)
        estimate = estimate_cost(tree, checked)
        fn, slots = compile_counting(tree, checked, expression, estimate)
    return CountingSelector(expression, fn, slots, estimate, estimate)


def _frames() -> int:
    """How many frames the calling thread's stack holds."""
    count, frame = 0, sys._getframe()
    while frame.f_back is not None:
        count, frame = count + 1, frame.f_back
    return count + 1
