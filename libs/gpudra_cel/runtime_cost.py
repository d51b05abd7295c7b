"""Run-time cost accounting: the counting variant of a compiled selector, for the expressions
whose worst-case estimate does not stay under the cost limit.

Kubernetes evaluates DRA selectors with cel-go's cost tracker and cancels an evaluation once its
actual cost passes the limit ("operation cancelled: actual cost limit exceeded"). gpudra compiles
this variant only when the static estimate (`cost.estimate_cost`) cannot prove the limit out of
reach, so ordinary selectors keep their uncounted closures.

Units follow cel-go's tracker as far as a closure compiler can (the approximation, in short):
1 per variable, field selection or index; 0 for literals and for calls folded at compile time
(cel-go folds them too); 10 per list literal built, 30 per map literal; `&&`, `||`, `?:` cost
nothing themselves; other calls 1, except the ones cel-go and Kubernetes price by the size of
their arguments, which are priced the same way from the actual values (`==`/`!=`/ordering: a
tenth of the shorter operand; `in` a list: its length; string concatenation; `contains`,
`startsWith`, `endsWith`, `matches`/`find`/`findAll`, `lowerAscii`, `upperAscii`, `substring`,
`trim`, `replace`, `split`, `join`, `indexOf`, `lastIndexOf`, `includes`, `quantity`,
`semver`, `format`, `strings.quote`; the lists extension's `slice`, `flatten`, `lists.range`,
`reverse`, `distinct`, `sort` as cel-go's version 3 tracks them; Kubernetes' URL / IP / CIDR
parsers and `containsIP` / `containsCIDR`, see `net_cost`; `<format>.validate`, see
`lib_format_k8s`); each iteration of a comprehension adds 3 for the loop's
condition and step (the estimator's figure). `has()` is free, as Kubernetes configures it.
Where the compiler fuses several nodes into one closure (`device.attributes["d"].name`), the
closure is charged the units of all of them. Fixed units are added once per charge point (see
`_Counting`), before the point runs: an error part-way through may have been charged for the
rest of its point (an over-count, never an under-count). The counter lives in the activation
list, so one compiled selector may still be evaluated from several threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from gpudra_cel.checker import Checked
from gpudra_cel.compiler import Compiled, Const, _Compiler, _fn
from gpudra_cel.dispatch import dispatch
from gpudra_cel.errors import CelError, CelEvaluationError
from gpudra_cel.lib_format_k8s import FORMAT_RUNTIME_PRICES
from gpudra_cel.lib_lists import self_compare_cost
from gpudra_cel.net_cost import NET_RUNTIME_PRICES
from gpudra_cel.operators import BINARY, Fn
from gpudra_cel.regex import compile_regex
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
    Select,
)
from gpudra_cel.tree import children
from gpudra_cel.values import CelOptional

__all__ = ["COST_EXCEEDED", "METER_SLOT", "compile_counting", "cost_exceeded"]

COST_EXCEEDED = "operation cancelled: actual cost limit exceeded"
METER_SLOT = 1  # act[1]: a one-element list holding the evaluation's cost so far
LOOP_STEP_COST = 3  # per element of a comprehension cel-go does not expand (sortBy, optMap)
# cel-go's comprehension expansions at run time (its optimizer folds the `[]` / `{}` initial
# accumulators to constants): the result once (`accu`; `accu == 1` for exists_one); per element
# the loop condition and step (all: `@not_strictly_false(accu)` 2 + `accu && p` 1; exists: the
# same with `!accu`, 4; exists_one: `p ? accu + 1 : accu`, at most 2). A list-building step
# `accu + [f]` (accu 1, `+` 1, the new list 10) is charged only for the elements a filter keeps
# (a rejected one costs `accu`, 1): on the body for map / transformList (1 + 11; a constant
# `[f]` is folded: 1 + 1), from the result's length for filter (1 + 12, `[x]` included);
# transformMap's `cel.@mapInsert(accu, k, f)` costs 3 (1 + 2).
_LOOP_RESULT = {"all": 1, "exists": 1, "exists_one": 2}
_LOOP_RESULT |= dict.fromkeys(("map", "filter", "transformList", "transformMap"), 1)
_LOOP_EVERY = {"all": 3, "exists": 4, "exists_one": 2}
_LOOP_EVERY |= dict.fromkeys(("map", "filter", "transformList", "transformMap"), 1)
_LOOP_KEPT = {"map": 11, "transformList": 11, "transformMap": 2}
_FILTER_KEPT = 12
_FREE_CALLS = frozenset({"_&&_", "_||_", "_?_:_"})
_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


def cost_exceeded(spent: int, limit: int) -> CelEvaluationError:
    return CelEvaluationError(f"{COST_EXCEEDED} (cost {spent} > limit {limit})")


def _size(value: object) -> int:
    """cel-go's `actualSize`: the length of strings, bytes, lists and maps, else 1."""
    cls = value.__class__
    if cls is str or cls is tuple or cls is dict or cls is bytes or cls is list:
        return len(value)  # type: ignore[arg-type]
    if cls is int or cls is bool or cls is float:
        return 1
    if isinstance(value, Mapping):
        return len(value)
    if cls is CelOptional and value.has_value:  # type: ignore[attr-defined]
        return _size(value.value)  # type: ignore[attr-defined]
    return 1


def _traversal(value: object) -> int:
    """Kubernetes' `traversalCost`: a tenth of a string's UTF-8 length or of a byte string's
    length, rounded down; a list or map the sum over its elements (keys and values); 1 else."""
    if isinstance(value, str):
        return int(len(value.encode("utf-8", "surrogatepass")) * 0.1)
    if isinstance(value, bytes):
        return int(len(value) * 0.1)
    if isinstance(value, tuple | list):
        return sum(_traversal(item) for item in value)
    if isinstance(value, Mapping):
        return sum(_traversal(k) + _traversal(v) for k, v in value.items())
    return 1


def _tenth(n: int) -> int:
    return math.ceil(n * 0.1)


def _regex(values: Sequence[object], result: object) -> int:
    return _tenth(1 + _size(values[0])) * math.ceil(_size(values[1]) * 0.25)


# function -> price from the actual operand values (receiver first) and the result
_SIZED: dict[str, Callable[[Sequence[object], object], int]] = {
    "_==_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "_!=_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "_<_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "_<=_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "_>_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "_>=_": lambda v, r: _tenth(min(_size(v[0]), _size(v[1]))),
    "@in": lambda v, r: _size(v[1]) if isinstance(v[1], tuple | list) else 1,
    "_+_": lambda v, r: _tenth(_size(v[0]) + _size(v[1])) if isinstance(r, str | bytes) else 1,
    "contains": lambda v, r: _tenth(_size(v[0])) * _tenth(_size(v[1])),
    "startsWith": lambda v, r: _tenth(_size(v[0])),
    "endsWith": lambda v, r: _tenth(_size(v[0])),
    "matches": _regex,
    "find": _regex,
    "findAll": _regex,
    "lowerAscii": lambda v, r: _tenth(_size(v[0])),
    "upperAscii": lambda v, r: _tenth(_size(v[0])),
    "substring": lambda v, r: _tenth(_size(v[0])),
    "trim": lambda v, r: _tenth(_size(v[0])),
    "replace": lambda v, r: _tenth(2 * _size(v[0])),
    "split": lambda v, r: _tenth(2 * _size(v[0])),
    "join": lambda v, r: _tenth(2 * _size(r)),
    # Kubernetes' list functions, and indexOf on strings too: one traversal of the receiver
    **dict.fromkeys(
        ("isSorted", "sum", "min", "max", "indexOf", "lastIndexOf"), lambda v, r: _traversal(v[0])
    ),
    "includes": lambda v, r: _size(v[0]),
    "quantity": lambda v, r: _tenth(_size(v[0])),
    "isQuantity": lambda v, r: _tenth(_size(v[0])),
    "semver": lambda v, r: _tenth(_size(v[0])),
    "isSemver": lambda v, r: _tenth(_size(v[0])),
    "format": lambda v, r: _tenth(_size(v[0])),
    "strings.quote": lambda v, r: _tenth(_size(v[0])),
    # cel-go's lists extension (version 3): 1 for the call and 10 for the new list, plus
    "slice": lambda v, r: _size(r) + 11,  # the elements copied
    "flatten": lambda v, r: (v[1] if len(v) > 1 else 1) * _size(v[0]) + 11,  # type: ignore[operator]
    "lists.range": lambda v, r: _size(r) + 11,
    "reverse": lambda v, r: _size(r) + 11,
    "distinct": lambda v, r: self_compare_cost(v[0]),  # type: ignore[arg-type]
    "sort": lambda v, r: self_compare_cost(v[0]),  # type: ignore[arg-type]
    **NET_RUNTIME_PRICES,  # url, ip, cidr, isIP, isCIDR, ip.isCanonical, containsIP/CIDR
    **FORMAT_RUNTIME_PRICES,  # <format>.validate
}


# the functions whose price needs their result (the rest are priced from their inputs alone)
_PRICED_BY_RESULT = frozenset(
    {"join", "_+_", "slice", "lists.range", "reverse", *NET_RUNTIME_PRICES, *FORMAT_RUNTIME_PRICES}
)


def compile_counting(root: Node, checked: Checked, expression: str, limit: int) -> tuple[Fn, int]:
    """Like `compiler.compile_tree`, but every closure adds its cost to `act[METER_SLOT]` and
    raises once the total passes `limit`. Returns the closure and its number of slots."""
    compiler = _Counting(checked, expression, limit)
    compiler.points.add(id(root))
    return _fn(compiler.visit(root, {})), compiler.slots + 1


def _unit(node: Node) -> int:
    """The fixed part of a node's cost (what does not depend on run-time sizes)."""
    if isinstance(node, Comprehension):
        return _LOOP_RESULT.get(node.kind, 0)
    if isinstance(node, Literal | Has):
        return 0
    if isinstance(node, Ident | Select | Index | Bind):
        return 1
    if isinstance(node, ListLit):
        return 10
    if isinstance(node, MapLit):
        return 30
    if isinstance(node, Call):
        return 0 if node.function in _FREE_CALLS or node.function in _SIZED else 1
    return 1  # optional selection/index and any later node kind: one step


class _Counting(_Compiler):
    """Charges are summed per *charge point* (the root, each `&&`/`||` operand after the first,
    each `?:` branch, each comprehension body or filter): one closure per point adds the fixed
    units of everything evaluated unconditionally below it, so the meter costs one call per
    point, not per node. Size-dependent calls add their part themselves: before running when
    their inputs set the price, after when their result does. No call is folded: cel-go folds
    none, so a constant call costs at every evaluation."""

    fold_calls = False

    def __init__(self, checked: Checked, expression: str, limit: int) -> None:
        super().__init__(checked, expression)
        self.slots = METER_SLOT  # macro and cel.bind variables start after the meter
        self.limit = limit
        self.visited: set[int] = set()
        self.points: set[int] = set()
        self.loop_steps: dict[int, int] = {}  # step node -> charge per element
        self.loop_kept: dict[int, tuple[int, bool]] = {}  # body -> (charge, list-building)
        self.pending: list[int] = [0]  # fixed units of the open charge points (innermost last)

    def inline_compare(self, node: Node, scope: dict[str, int]) -> None:
        return None  # every operand of a chain is its own charge point

    def visit(self, node: Node, scope: dict[str, int]) -> Compiled:
        self.visited.add(id(node))
        point = id(node) in self.points
        if point:
            self.pending.append(0)
        self.mark_points(node)
        compiled = super().visit(node, scope)
        if isinstance(node, Comprehension) and node.kind == "sortBy":
            compiled = _sort_priced(_fn(compiled), self.limit)
        if isinstance(node, Comprehension) and node.kind == "filter":
            compiled = _kept_priced(_fn(compiled), _FILTER_KEPT, self.limit)
        if not isinstance(compiled, Const):  # a folded value is free, as in cel-go
            self.pending[-1] += _unit(node) + self.unvisited(node)
        if not point:
            return compiled
        charge = self.pending.pop() + self.loop_steps.get(id(node), 0)
        if id(node) in self.loop_kept:
            kept, builds_list = self.loop_kept[id(node)]
            charge += kept - 10 if builds_list and isinstance(compiled, Const) else kept
        return _charged(_fn(compiled), charge, self.limit) if charge else compiled

    def mark_points(self, node: Node) -> None:
        """Mark the children of `node` that are evaluated conditionally or repeatedly."""
        if isinstance(node, Comprehension):
            # the filter (map with a predicate) or else the body runs once per element
            step = node.predicate if node.predicate is not None else node.body
            every = _LOOP_EVERY.get(node.kind, LOOP_STEP_COST)
            self.loop_steps[id(step)] = self.loop_steps.get(id(step), 0) + every
            if node.kind in _LOOP_KEPT:
                builds_list = node.kind != "transformMap"
                self.loop_kept[id(node.body)] = (_LOOP_KEPT[node.kind], builds_list)
            self.points.update((id(step), id(node.body)))
        elif isinstance(node, Bind):
            self.mark_points(node.body)  # a chain body is compiled without visiting its node
        elif isinstance(node, Call) and node.function in ("_&&_", "_||_"):
            operands: list[Node] = []
            pending: list[Node] = [node]
            while pending:  # the compiler's left-to-right flattening of one operator
                current = pending.pop()
                if isinstance(current, Call) and current.function == node.function:
                    pending += reversed(current.args)
                else:
                    operands.append(current)
            self.points.update(id(o) for o in operands[1:])
        elif isinstance(node, Call) and node.function == "_?_:_":
            self.points.update((id(node.args[1]), id(node.args[2])))

    def unvisited(self, node: Node) -> int:
        """Units of the nodes below `node` that the compiler fused into its closure."""
        total = 0
        pending = children(node)
        while pending:
            child = pending.pop()
            if id(child) in self.visited:
                continue
            total += _unit(child)
            pending.extend(children(child))
        return total

    def call(self, node: Call, scope: dict[str, int]) -> Compiled:
        price = _SIZED.get(node.function)
        if price is None:
            return super().call(node, scope)
        operands = ([node.target] if node.target is not None else []) + list(node.args)
        compiled = [self.visit(o, scope) for o in operands]
        name = node.function
        op = BINARY.get(name)
        overloads = self.checked.overloads.get(id(node), ())
        if name in _REGEX_FUNCTIONS and len(compiled) >= 2:
            pattern = compiled[1]
            if isinstance(pattern, Const) and isinstance(pattern.value, str):
                try:  # a bad literal pattern is a compile error, with or without a meter
                    compile_regex(pattern.value)
                except CelError as exc:
                    raise self.error(str(exc), node) from exc
        fns = [_fn(c) for c in compiled]
        limit = self.limit
        if op is not None and len(fns) == 2:  # operators: no argument list to build
            first, second = fns
            binary = op

            def sized_operator(act: list[object]) -> object:
                a = first(act)
                b = second(act)
                result = binary(a, b)
                meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
                meter[0] += price((a, b), result)
                if meter[0] > limit:
                    raise cost_exceeded(meter[0], limit)
                return result

            return sized_operator
        if name not in _PRICED_BY_RESULT:

            def priced_first(act: list[object]) -> object:
                # priced from its inputs: charged before it runs, so a call that the limit
                # cancels (as cel-go does right after it) never builds its result
                values = [f(act) for f in fns]
                meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
                meter[0] += price(values, None)
                if meter[0] > limit:
                    raise cost_exceeded(meter[0], limit)
                return op(*values) if op is not None else dispatch(name, overloads, values)

            return priced_first

        def sized(act: list[object]) -> object:
            values = [f(act) for f in fns]
            result = op(*values) if op is not None else dispatch(name, overloads, values)
            meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
            meter[0] += price(values, result)
            if meter[0] > limit:
                raise cost_exceeded(meter[0], limit)
            return result

        return sized


def _sort_priced(fn: Fn, limit: int) -> Fn:
    """`sortBy`: its loop is metered as any comprehension's; the sort of its n keys adds what
    cel-go's tracker adds (priced from the elements: the keys are gone by then)."""

    def sort_by(act: list[object]) -> object:
        result = fn(act)
        meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
        meter[0] += self_compare_cost(result)  # type: ignore[arg-type]
        if meter[0] > limit:
            raise cost_exceeded(meter[0], limit)
        return result

    return sort_by


def _kept_priced(fn: Fn, per_item: int, limit: int) -> Fn:
    """`filter`: each element kept costs what cel-go's `accu + [x]` step costs beyond the
    rejecting step (charged from the result, which has one entry per kept element)."""

    def filter_(act: list[object]) -> object:
        result = fn(act)
        meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
        meter[0] += per_item * len(result)  # type: ignore[arg-type]
        if meter[0] > limit:
            raise cost_exceeded(meter[0], limit)
        return result

    return filter_


def _charged(fn: Fn, charge: int, limit: int) -> Fn:
    def charged(act: list[object]) -> object:
        meter: list[int] = act[METER_SLOT]  # type: ignore[assignment]
        meter[0] += charge
        if meter[0] > limit:
            raise cost_exceeded(meter[0], limit)
        return fn(act)

    return charged
