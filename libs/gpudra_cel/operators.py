"""Closures for CEL's operators: logic with error absorption, comparison, arithmetic, `in`.

A compiled node is `Fn`: a callable taking the activation list (`act[0]` is the device, the
other slots hold macro and `cel.bind` variables) and returning a value or raising
`CelEvaluationError`. `&&` and `||` are commutative about errors, as CEL requires: `false &&
<error>` and `<error> && false` are both false; otherwise the (first) error wins.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.values import (
    add,
    compare,
    contains,
    divide,
    equal,
    modulo,
    multiply,
    negate,
    no_overload,
    subtract,
)

__all__ = ["BINARY", "Fn", "logical_and", "logical_not", "logical_or", "ternary"]

Fn = Callable[[list[object]], object]


def logical_and(left: Fn, right: Fn) -> Fn:
    def and_(act: list[object]) -> object:
        try:
            lv = left(act)
            if lv is False:
                return False
            if lv is not True:
                raise no_overload("_&&_", lv)
        except CelEvaluationError:
            if _strictly(right, act, False):
                return False
            raise
        rv = right(act)
        if rv is True or rv is False:
            return rv
        raise no_overload("_&&_", rv)

    return and_


def logical_or(left: Fn, right: Fn) -> Fn:
    def or_(act: list[object]) -> object:
        try:
            lv = left(act)
            if lv is True:
                return True
            if lv is not False:
                raise no_overload("_||_", lv)
        except CelEvaluationError:
            if _strictly(right, act, True):
                return True
            raise
        rv = right(act)
        if rv is True or rv is False:
            return rv
        raise no_overload("_||_", rv)

    return or_


def _strictly(fn: Fn, act: list[object], wanted: bool) -> bool:
    """Does `fn` yield exactly `wanted`? Its own errors count as "no"."""
    try:
        return fn(act) is wanted
    except CelEvaluationError:
        return False


def logical_not(operand: Fn) -> Fn:
    def not_(act: list[object]) -> object:
        v = operand(act)
        if v is True:
            return False
        if v is False:
            return True
        raise no_overload("!_", v)

    return not_


def ternary(cond: Fn, yes: Fn, no: Fn) -> Fn:
    def pick(act: list[object]) -> object:
        c = cond(act)
        if c is True:
            return yes(act)
        if c is False:
            return no(act)
        raise no_overload("_?_:_", c)

    return pick


def _ordering(op: str, test: Callable[[int], bool]) -> Callable[[object, object], object]:
    def rel(a: object, b: object) -> object:
        return test(compare(a, b, op))

    return rel


BINARY: dict[str, Callable[[object, object], object]] = {
    "_==_": equal,
    "_!=_": lambda a, b: not equal(a, b),
    "_<_": _ordering("_<_", lambda c: c == -1),
    "_<=_": _ordering("_<=_", lambda c: c in (-1, 0)),
    "_>_": _ordering("_>_", lambda c: c == 1),
    "_>=_": _ordering("_>=_", lambda c: c in (0, 1)),
    "@in": lambda item, container: contains(container, item),
    "_+_": add,
    "_-_": subtract,
    "_*_": multiply,
    "_/_": divide,
    "_%_": modulo,
}

FAST_INT_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "_<_": operator.lt,
    "_<=_": operator.le,
    "_>_": operator.gt,
    "_>=_": operator.ge,
    "_==_": operator.eq,
    "_!=_": operator.ne,
}

UNARY_NEG = negate
