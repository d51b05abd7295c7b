"""`compile_selector`: a DRA CEL selector checked, cost-bounded and compiled once, then
evaluated per device as a Python closure.

Promises: compiling either returns a `CompiledSelector` or raises `CelCompileError` (never
another exception) whose message points at the expression; `matches` returns a bool or raises
`CelEvaluationError` (a missing key, an overflow, a non-bool result, the cost limit), as
Kubernetes' `DeviceMatches` does. The environment is chosen by `CelOptions` (feature gates; see
`environment`). When the worst-case cost estimate stays under the limit the selector is the plain
closure; otherwise it is the counting variant (`runtime_cost`), whose evaluation fails with
"operation cancelled: actual cost limit exceeded" once the actual cost passes the limit, as in
Kubernetes' allocator (or, with `CelOptions(reject_costly=True)`, the expression is refused at
compile time, as Kubernetes' API validation refuses it). A `CompiledSelector` holds no
per-evaluation state, so one instance may be used from several threads.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Iterator

from gpudra_cel.checker import check
from gpudra_cel.compiler import compile_tree
from gpudra_cel.cost import estimate_cost
from gpudra_cel.device import DeviceView
from gpudra_cel.environment import ALL_FEATURES, CelOptions, check_environment
from gpudra_cel.errors import CelCompileError, CelError, CelEvaluationError
from gpudra_cel.homogeneous import check_homogeneous_literals
from gpudra_cel.lib_format import check_format_literals
from gpudra_cel.lib_time import check_time_literals
from gpudra_cel.operators import Fn
from gpudra_cel.runtime_cost import compile_counting, cost_exceeded
from gpudra_cel.syntax import parse
from gpudra_cel.values import type_name

__all__ = ["DEFAULT_COST_LIMIT", "CompiledSelector", "CountingSelector", "compile_selector"]

DEFAULT_COST_LIMIT = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost
# Frames added to Python's recursion limit while a deeply nested expression is compiled or
# evaluated again after a RecursionError: the deepest expression cel-go's limits accept needs
# about 1,260 frames to compile and 510 to evaluate (`depth_test`), so 3,000 more is room.
RECURSION_ROOM = 3000
_ROOM_LOCK = threading.Lock()
_room_users = 0
_room_saved = 0


@contextlib.contextmanager
def recursion_room() -> Iterator[None]:
    """Python's recursion limit raised by `RECURSION_ROOM` while inside. The limit is one per
    process: it is raised when the first thread enters and put back when the last one leaves,
    so no thread loses room another still needs. Used only after a RecursionError, so ordinary
    (shallow) selectors never touch it."""
    global _room_users, _room_saved
    with _ROOM_LOCK:
        if _room_users == 0:
            _room_saved = sys.getrecursionlimit()
            sys.setrecursionlimit(_room_saved + RECURSION_ROOM)
        _room_users += 1
    try:
        yield
    finally:
        with _ROOM_LOCK:
            _room_users -= 1
            if _room_users == 0:
                sys.setrecursionlimit(_room_saved)


class CompiledSelector:
    """One compiled selector expression."""

    __slots__ = ("_fn", "_pad", "expression", "max_cost")
    counts_cost = False  # evaluations are not metered: the estimate stays under the limit

    def __init__(self, expression: str, fn: Fn, slots: int, max_cost: int) -> None:
        self.expression = expression
        self.max_cost = max_cost  # the worst-case estimate, in cel-go's units
        self._fn = fn
        self._pad = (None,) * (slots - 1)  # activation slots for macro / cel.bind variables

    def matches(self, device: DeviceView) -> bool:
        try:
            result = self._fn([device, *self._pad] if self._pad else [device])
        except RecursionError:  # a deep expression called from a deep stack: once more
            with recursion_room():
                try:
                    result = self._fn([device, *self._pad] if self._pad else [device])
                except RecursionError as exc:
                    raise CelEvaluationError("expression is nested too deeply to evaluate") from exc
        if result is True or result is False:
            return result
        raise CelEvaluationError(
            f"selector must evaluate to bool, got {type_name(result)}: {self.expression!r}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r})"


class CountingSelector(CompiledSelector):
    """A selector whose evaluations are metered against `cost_limit` (see `runtime_cost`)."""

    __slots__ = ("cost_limit",)
    counts_cost = True

    def __init__(self, expression: str, fn: Fn, slots: int, max_cost: int, limit: int) -> None:
        super().__init__(expression, fn, slots, max_cost)
        self.cost_limit = limit
        self._pad = self._pad[1:]  # slot 1 is the meter, filled per evaluation

    def matches(self, device: DeviceView) -> bool:
        try:
            meter, result = self._metered(device)
        except RecursionError:  # a deep expression called from a deep stack: once more
            with recursion_room():
                try:
                    meter, result = self._metered(device)
                except RecursionError as exc:
                    raise CelEvaluationError("expression is nested too deeply to evaluate") from exc
        if meter[0] > self.cost_limit:  # `error || true` is true in CEL, but not past the limit
            raise cost_exceeded(meter[0], self.cost_limit)
        if result is True or result is False:
            return result
        raise CelEvaluationError(
            f"selector must evaluate to bool, got {type_name(result)}: {self.expression!r}"
        )

    def _metered(self, device: DeviceView) -> tuple[list[int], object]:
        meter = [0]
        try:
            return meter, self._fn([device, meter, *self._pad])
        except CelError as exc:
            # a comprehension may have absorbed the limit error and failed on something else
            if meter[0] > self.cost_limit:
                raise cost_exceeded(meter[0], self.cost_limit) from exc
            raise

    def actual_cost(self, device: DeviceView) -> int:
        """The cost of evaluating on `device` (cel-go's `ActualCost`); errors as `matches`."""
        meter = [0]
        try:
            self._fn([device, meter, *self._pad])
        except CelError as exc:
            if meter[0] > self.cost_limit:
                raise cost_exceeded(meter[0], self.cost_limit) from exc
            raise
        if meter[0] > self.cost_limit:
            raise cost_exceeded(meter[0], self.cost_limit)
        return meter[0]


def compile_selector(
    expression: str,
    *,
    cost_limit: int = DEFAULT_COST_LIMIT,
    options: CelOptions = ALL_FEATURES,
) -> CompiledSelector:
    """Parse, type-check, cost-check and compile `expression` in the environment `options`
    describes (memoized per expression, limit and options)."""
    if not isinstance(expression, str):
        raise CelCompileError(f"expression must be a string, not {type(expression).__name__}")
    if not isinstance(options, CelOptions):
        raise CelCompileError(f"options must be CelOptions, not {type(options).__name__}")
    return _compile(expression, cost_limit, options)


@functools.lru_cache(maxsize=4096)
def _compile(expression: str, cost_limit: int, options: CelOptions) -> CompiledSelector:
    try:
        return _build(expression, cost_limit, options)
    except RecursionError:  # deeply nested (within cel-go's limits): once more, with room
        pass
    with recursion_room():
        try:
            return _build(expression, cost_limit, options)
        except RecursionError as exc:
            raise CelCompileError("expression is nested too deeply") from exc


def _build(expression: str, cost_limit: int, options: CelOptions) -> CompiledSelector:
    tree = parse(expression)
    checked = check(tree, expression)
    check_environment(tree, options, expression)
    check_format_literals(tree, checked, expression)
    check_time_literals(tree, expression)
    check_homogeneous_literals(tree, checked, expression)
    cost = estimate_cost(tree, checked)
    if cost <= cost_limit:
        fn, slots = compile_tree(tree, checked, expression)
        return CompiledSelector(expression, fn, slots, cost)
    if options.reject_costly:
        raise CelCompileError(
            f"estimated cost {cost} exceeds the limit of {cost_limit}; "
            "reduce the work done per device (nested iteration, long strings)"
        )
    fn, slots = compile_counting(tree, checked, expression, cost_limit)
    return CountingSelector(expression, fn, slots, cost, cost_limit)
