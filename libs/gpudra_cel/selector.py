"""`compile_selector`: a DRA CEL selector checked, cost-bounded and compiled once, then
evaluated per device as a Python closure.

Promises: compiling either returns a `CompiledSelector` or raises `CelCompileError` (never
another exception) whose message points at the expression; `matches` returns a bool or raises
`CelEvaluationError` (a missing key, an overflow, a non-bool result), as Kubernetes'
`DeviceMatches` does. A `CompiledSelector` holds no per-evaluation state, so one instance may be
used from several threads.
"""

from __future__ import annotations

import functools

from gpudra_cel.checker import check
from gpudra_cel.compiler import compile_tree
from gpudra_cel.cost import estimate_cost
from gpudra_cel.device import DeviceView
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.operators import Fn
from gpudra_cel.syntax import parse
from gpudra_cel.values import type_name

__all__ = ["DEFAULT_COST_LIMIT", "CompiledSelector", "compile_selector"]

DEFAULT_COST_LIMIT = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost


class CompiledSelector:
    """One compiled selector expression."""

    __slots__ = ("_fn", "_pad", "expression", "max_cost")

    def __init__(self, expression: str, fn: Fn, slots: int, max_cost: int) -> None:
        self.expression = expression
        self.max_cost = max_cost
        self._fn = fn
        self._pad = (None,) * (slots - 1)  # activation slots for macro / cel.bind variables

    def matches(self, device: DeviceView) -> bool:
        try:
            result = self._fn([device, *self._pad] if self._pad else [device])
        except CelError:
            raise
        except RecursionError as exc:
            raise CelEvaluationError("expression is nested too deeply to evaluate") from exc
        if result is True or result is False:
            return result
        raise CelEvaluationError(
            f"selector must evaluate to bool, got {type_name(result)}: {self.expression!r}"
        )

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"


def compile_selector(expression: str, *, cost_limit: int = DEFAULT_COST_LIMIT) -> CompiledSelector:
    """Parse, type-check, cost-check and compile `expression` (memoized per expression)."""
    if not isinstance(expression, str):
        raise CelCompileError(f"expression must be a string, not {type(expression).__name__}")
    return _compile(expression, cost_limit)


@functools.lru_cache(maxsize=4096)
def _compile(expression: str, cost_limit: int) -> CompiledSelector:
    try:
        tree = parse(expression)
        checked = check(tree, expression)
        cost = estimate_cost(tree, checked)
        if cost > cost_limit:
            raise CelCompileError(
                f"estimated cost {cost} exceeds the limit of {cost_limit}; "
                "reduce the work done per device (nested iteration, long strings)"
            )
        fn, slots = compile_tree(tree, checked, expression)
    except CelCompileError:
        raise
    except RecursionError as exc:
        raise CelCompileError("expression is nested too deeply") from exc
    return CompiledSelector(expression, fn, slots, cost)
