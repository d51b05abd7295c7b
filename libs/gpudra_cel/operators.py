"""Closures for CEL's operators: `!`, `?:`, comparison, arithmetic, `in` (`&&`/`||` chains are
generated code, see `codegen`).

A compiled node is `Fn`: a callable taking the activation list (`act[0]` is the device, the
other slots hold macro and `cel.bind` variables) and returning a value or raising
`CelEvaluationError`. A non-bool operand of `!` or a non-bool `?:` condition is an error, and so
is ordering NaN (`<` and friends), as in cel-go.
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
    equal_operator,
    modulo,
    multiply,
    negate,
    no_overload,
    subtract,
)

__all__ = ["BINARY", "FAST_INT_COMPARE", "UNARY_NEG", "Fn", "logical_not", "ternary"]

Fn = Callable[[list[object]], object]


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
        order = compare(a, b, op)
        if order == 2:  # cel-go's Compare refuses NaN rather than answering false
            raise CelEvaluationError("NaN values cannot be ordered")
        return test(order)

    return rel


BINARY: dict[str, Callable[[object, object], object]] = {
    "_==_": equal_operator,
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
