"""Worst-case cost estimate of a selector, in the spirit of cel-go's estimator as Kubernetes
configures it for DRA.

Every value reachable from `device` has a known maximum size from the API limits (driver name 63
characters, at most 32 attributes/capacities per device, attribute strings and lists at most 64),
so iteration and string work are bounded; literals have their own size. Costs, as cel-go's and
Kubernetes' estimators price them: one unit per selection, index, variable and plain call;
comparisons, `in` and text functions cost only the data they scan (a tenth of a unit per
character, cel-go's traversal factor; `in` a list its length), a regex that times a quarter per
pattern character, Kubernetes' list functions one traversal, `includes` the longest list
attribute (48), `&&`/`||`/`?:` nothing beyond their operands (the dearer branch), URL / IP / CIDR
functions as `net_cost` says, `<format>.validate` as `lib_format_k8s` says; a comprehension costs
its range, what cel-go's expansion of the macro adds, and its length times its body and loop
step; `optMap`/`optFlatMap` run their body at most once, and optional selection/indexing (`.?`,
`[?]`) costs what plain selection/indexing costs. Most of Kubernetes' recorded figures come out
exactly (`upstream_test`); where Kubernetes' own estimate falls below what its run-time meter
can charge (a `dyn` receiver of a list function), this one keeps to the meter. The estimate is
an upper bound: an expression whose
estimate stays under the limit is evaluated without accounting; one whose estimate exceeds it is
compiled with run-time accounting (`runtime_cost`), or refused (`CelOptions.reject_costly`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudra_api.names import DEVICE_MAX_ID_LENGTH, DRIVER_NAME_MAX_LENGTH
from gpudra_cel.checker import Checked
from gpudra_cel.lib_format_k8s import format_estimate
from gpudra_cel.lib_kube import MAX_LIST_ATTRIBUTE_VALUES
from gpudra_cel.net_cost import net_estimate
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
)
from gpudra_cel.types import BYTES, DYN, STRING, TIMESTAMP

__all__ = ["estimate_cost"]

ATTRIBUTE_MAX_VALUE_LENGTH = 64
MAX_ATTRIBUTES_PER_DEVICE = 32
QUANTITY_SIZE = 8
# the longest `string(timestamp)`: "10000-01-01T04:59:59.999999999+05:00" (a timestamp shown in
# its own offset may pass year 9999)
TIMESTAMP_TEXT_SIZE = 36
_UNBOUNDED = 1 << 40
_PRICED_OPERATORS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in"})
# What cel-go's expansion of each comprehension adds to its range, body and filter, as its
# estimator prices it: (once: the accumulator's initial value and the result; per element: the
# loop condition and step). all: `true`, `accu` / `@not_strictly_false(accu)`, `accu && p`;
# exists: `false`, `accu` / `@not_strictly_false(!accu)`, `accu || p`; exists_one: `0`,
# `accu == 1` / `true`, `p ? accu + 1 : accu`; map and transformList: `[]`, `accu` / `true`,
# `accu + [f]` (a new list: 10); filter: the same with `[x]`; transformMap: `{}` (30), `accu` /
# `true`, `cel.@mapInsert(accu, k, f)`.
_LOOP_ESTIMATES: dict[str, tuple[int, int]] = {
    "all": (1, 3),
    "exists": (1, 4),
    "exists_one": (2, 2),
    "map": (11, 12),
    "filter": (11, 13),
    "transformList": (11, 12),
    "transformMap": (31, 3),
}
# Functions Kubernetes' and cel-go's estimators price by the text they work on, with no unit for
# the call: a tenth per character of the receiver (or of the argument of a global call), twice
# that for replace / split, the product of both texts for contains, (length + 1) / 10 times a
# quarter of the pattern for regular expressions, a tenth of the result for string `+`.
_TEXT_PRICED = frozenset(
    {
        "lowerAscii",
        "upperAscii",
        "substring",
        "trim",
        "format",
        "startsWith",
        "endsWith",
        "strings.quote",
        "replace",
        "split",
        "contains",
        "matches",
        "find",
        "findAll",
        "quantity",
        "isQuantity",
        "semver",
        "isSemver",
        "join",
        "_+_",
    }
)
_TRAVERSALS = frozenset({"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf"})
_SIZE_CHANGING = frozenset({"split", "findAll", "replace", "join", "_+_", "lowerAscii"})


@dataclass(frozen=True, slots=True)
class _Est:
    cost: int
    size: int  # maximum length of the value (string/bytes/list/map); 1 for scalars
    elem: int = 1  # maximum size of one element, for lists and maps


def estimate_cost(root: Node, checked: Checked) -> int:
    return _Estimator(checked).visit(root, {}).cost


def _scan(size: int) -> int:
    return math.ceil(size * 0.1)


class _Estimator:
    def __init__(self, checked: Checked) -> None:
        self.checked = checked

    def visit(self, node: Node, scope: dict[str, _Est]) -> _Est:
        if isinstance(node, Literal):
            value = node.value
            size = len(value) if isinstance(value, str | bytes) else 1
            return _Est(0, size)
        if isinstance(node, Ident):
            if node.name in scope:
                found = scope[node.name]
                return _Est(1, found.size, found.elem)
            return _Est(1, 4)  # device: an object with four fields
        if isinstance(node, Select | Has | OptSelect):
            return self.select(node, scope)
        if isinstance(node, Index | OptIndex):
            operand = self.visit(node.operand, scope)
            index = self.visit(node.index, scope)
            return _Est(operand.cost + index.cost + 1, operand.elem, _inner_elem(node, scope))
        if isinstance(node, ListLit | MapLit):
            parts = (
                [self.visit(i, scope) for i in node.items]
                if isinstance(node, ListLit)
                else [self.visit(x, scope) for kv in node.entries for x in kv]
            )
            count = len(node.items) if isinstance(node, ListLit) else len(node.entries)
            elem = max((p.size for p in parts), default=1)
            create = 10 if isinstance(node, ListLit) else 30  # cel-go's list / map creation
            return _Est(create + sum(p.cost for p in parts), count, elem)
        if isinstance(node, Bind):
            init = self.visit(node.init, scope)
            body = self.visit(node.body, {**scope, node.var: init})
            # cel-go expands cel.bind into a comprehension over an empty list literal, which its
            # estimator prices as any list creation (10)
            return _Est(init.cost + body.cost + 10, body.size, body.elem)
        if isinstance(node, Comprehension) and node.kind in ("optMap", "optFlatMap"):
            target = self.visit(node.range, scope)
            body = self.visit(node.body, {**scope, node.var: _Est(0, target.size, target.elem)})
            return _Est(target.cost + body.cost + 1, body.size, body.elem)
        if isinstance(node, Comprehension):
            rng = self.visit(node.range, scope)
            inner = {**scope, node.var: _Est(0, rng.elem, _UNBOUNDED)}
            if node.var2 is not None:  # index/key and value
                inner[node.var2] = _Est(0, rng.elem, _UNBOUNDED)
            body = self.visit(node.body, inner)
            predicate = self.visit(node.predicate, inner).cost if node.predicate else 0
            fixed, per_element = _LOOP_ESTIMATES.get(node.kind, (0, 3))
            per_item = body.cost + predicate + per_element
            if node.kind == "sortBy":  # the keys' map, then n² comparisons of 2 (+0.1 text)
                factor = 2.1 if body.size > 1 else 2.0
                sort = math.ceil(min(rng.size * rng.size, _UNBOUNDED) * factor) + 11
                return _Est(rng.cost + rng.size * per_item + sort, rng.size, rng.elem)
            growing = ("map", "filter", "transformList", "transformMap")
            size = rng.size if node.kind in growing else 1
            return _Est(rng.cost + fixed + rng.size * per_item, size, body.size)
        if isinstance(node, Call):
            return self.call(node, scope)
        return _Est(1, 1)

    def select(self, node: Select | Has | OptSelect, scope: dict[str, _Est]) -> _Est:
        operand = self.visit(node.operand, scope)
        if _is_device(node.operand, scope):
            sizes = {
                "driver": _Est(0, DRIVER_NAME_MAX_LENGTH),
                "attributes": _Est(0, MAX_ATTRIBUTES_PER_DEVICE, MAX_ATTRIBUTES_PER_DEVICE),
                "capacity": _Est(0, MAX_ATTRIBUTES_PER_DEVICE, MAX_ATTRIBUTES_PER_DEVICE),
            }
            found = sizes.get(node.field, _Est(0, 1))
            return _Est(operand.cost + 1, found.size, found.elem)
        if isinstance(node, Has):
            return _Est(operand.cost + 1, 1)
        return _Est(operand.cost + 1, operand.elem, _inner_elem(node, scope))

    def call(self, node: Call, scope: dict[str, _Est]) -> _Est:
        target = self.visit(node.target, scope) if node.target is not None else None
        args = [self.visit(a, scope) for a in node.args]
        cost = sum(a.cost for a in args) + (target.cost if target else 0)
        subject = target if target is not None else (args[0] if args else _Est(0, 1))
        fn = node.function
        if fn in ("_&&_", "_||_"):  # cel-go: the operands only (the right one at most)
            return _Est(cost, 1)
        if fn == "_?_:_":  # cel-go: the condition and the dearer branch
            cost = args[0].cost + max(args[1].cost, args[2].cost)
            return _Est(cost, max(args[1].size, args[2].size), max(args[1].elem, args[2].elem))
        if fn in _PRICED_OPERATORS:
            cost += self.operator_cost(node, args)
        elif fn in _TRAVERSALS and node.target is not None and target is not None:
            cost += self.traversal_cost(node.target, target)
        elif fn not in _TEXT_PRICED:
            cost += 1
        overloads = self.checked.overloads.get(id(node), ())
        takes_string = any(STRING in ov.args for ov in overloads)
        member, sizes = node.target is not None, [a.size for a in args]
        net = net_estimate(fn, member, subject.size, sizes, takes_string)
        if net is not None:  # Kubernetes' URL / IP / CIDR libraries
            return _Est(cost + net[0], net[1], net[2])
        receiver = node.target.function if isinstance(node.target, Call) else None
        formatted = format_estimate(fn, receiver and receiver.removeprefix("format."), sizes)
        if formatted is not None:  # Kubernetes' format library
            return _Est(cost + formatted[0], formatted[1], formatted[2])
        kinds = {ov.cost for ov in overloads}
        if fn in _TRAVERSALS and target is not None:
            pass  # priced above
        elif "regex" in kinds and args:
            pattern = args[0] if target is not None else args[1]  # s.matches(p) / matches(s, p)
            cost += _scan(subject.size + 1) * math.ceil(pattern.size * 0.25)
        elif fn == "includes":
            cost += MAX_LIST_ATTRIBUTE_VALUES  # as DRA's estimator: linear in the longest list
        elif fn in ("replace", "split"):
            cost += math.ceil(subject.size * 0.2)  # the traversal and the new string(s)
        elif fn == "contains":
            cost += _scan(subject.size) * _scan(args[0].size)
        elif fn in _TEXT_PRICED and fn not in ("_+_", "join"):
            cost += _scan(subject.size)
        elif "linear" in kinds:
            cost += max(1, _scan(subject.size))
        listed = _list_call(node, subject)
        if listed is not None:
            return _Est(cost + listed.cost, listed.size, listed.elem)
        size, elem = self.result_size(fn, subject, args)
        if fn == "string" and any(TIMESTAMP in ov.args for ov in overloads):
            size = max(size, TIMESTAMP_TEXT_SIZE)
        if fn == "join":  # priced at run time by the joined text: a tenth of twice its length
            cost += _scan(2 * size)
        elif fn == "_+_":  # strings and bytes: a tenth of the result; anything else 1
            kind = self.checked.types.get(id(node), DYN)
            text = _scan(size)
            cost += text if kind in (STRING, BYTES) else max(text, 1) if kind == DYN else 1
        return _Est(cost, size, elem)

    def operator_cost(self, node: Call, args: list[_Est]) -> int:
        """cel-go's price for a comparison or `in` itself, operands aside: equality, and the
        ordering of strings or bytes, scan the shorter operand (a tenth per character, nothing
        for the call); `in` a list scans the list, `in` a map is one lookup; ordering other
        kinds costs 1. Where an operand is `dyn`, cel-go takes the dearest overload it could
        be."""
        fn = node.function
        scan = _scan(min(args[0].size, args[1].size))
        if fn in ("_==_", "_!=_"):
            return scan
        kinds = [self.checked.types.get(id(a), DYN) for a in node.args]
        if fn == "@in":
            if kinds[1].name == "map":
                return 1
            return args[1].size if kinds[1].name == "list" else max(args[1].size, 1)
        if STRING in kinds or BYTES in kinds:
            return scan
        return max(scan, 1) if kinds == [DYN, DYN] else 1

    def traversal_cost(self, receiver: Node, est: _Est) -> int:
        """Kubernetes' list functions (`isSorted`, `sum`, `min`, `max`, `indexOf`,
        `lastIndexOf`) cost one traversal of the receiver and no unit for the call: a tenth per
        character of a string, 1 per element of a list plus a tenth of each string element.
        Kubernetes estimates a `dyn` receiver as a string, but a list there costs more to
        traverse at run time, and an estimate here must bound the run time (it decides whether
        evaluations are metered at all), so a `dyn` receiver is estimated as a list of strings."""
        kind = self.checked.types.get(id(receiver), DYN)
        if kind in (STRING, BYTES):
            return _scan(est.size)
        element = kind.params[0] if kind.name == "list" and kind.params else DYN
        per_element = 1 if element not in (STRING, BYTES, DYN) else 1 + _scan(est.elem)
        return min(est.size * per_element, _UNBOUNDED)

    def result_size(self, fn: str, subject: _Est, args: list[_Est]) -> tuple[int, int]:
        if fn == "_+_" and len(args) == 2:
            return args[0].size + args[1].size, max(args[0].elem, args[1].elem)
        if fn in ("split", "findAll"):
            return subject.size + 1, subject.size
        if fn == "replace":
            return subject.size * max(1, args[1].size + 1), 1
        if fn == "join":
            return subject.size * (subject.elem + max((a.size for a in args), default=0)), 1
        if fn in ("lowerAscii", "upperAscii", "trim", "substring", "charAt", "find"):
            return subject.size, 1
        if fn in ("_?_:_",):
            return max(args[1].size, args[2].size), max(args[1].elem, args[2].elem)
        if fn in ("orValue", "or"):  # the optional's value or the alternative
            return max(subject.size, args[0].size), max(subject.elem, args[0].elem)
        if fn in ("optional.of", "optional.ofNonZeroValue", "value"):
            return subject.size, subject.elem
        if fn in ("dyn", "min", "max", "sum"):
            return subject.size, 1
        if fn in ("string", "bytes"):
            return max(subject.size, 24), 1
        if fn in ("quantity", "add", "sub"):
            return QUANTITY_SIZE, 1
        if fn == "format":  # the text plus each argument printed (hex doubles, numbers ~32)
            return subject.size + 2 * sum(a.size * max(a.elem, 32) for a in args), 1
        if fn == "strings.quote":
            return 2 * subject.size + 2, 1
        return 1, 1


def _literal_int(node: Node, default: int) -> int:
    """A non-negative int literal's value (negative: 0), else `default` (cel-go's estimate)."""
    value = node.value if isinstance(node, Literal) else None
    if value.__class__ is int:
        assert isinstance(value, int)
        return max(0, value)
    return default


def _list_call(node: Call, subject: _Est) -> _Est | None:
    """cel-go's lists extension (version 3) estimates: the work beyond the call itself, plus 10
    for the list each call creates, and the result's size; None for other functions."""
    fn, args = node.function, node.args
    n, elem = subject.size, subject.elem
    if fn == "slice" and len(args) == 2:
        size = max(0, _literal_int(args[1], n) - _literal_int(args[0], 0))
        return _Est(size + 10, size, elem)
    if fn == "flatten":
        depth = _literal_int(args[0], _UNBOUNDED) if args else 1
        size = min(n * max(elem, 1), _UNBOUNDED)
        return _Est(min(depth * n, _UNBOUNDED) + 10, size, _UNBOUNDED)
    if fn == "lists.range" and len(args) == 1:
        size = _literal_int(args[0], _UNBOUNDED)
        return _Est(size + 10, size, 1)
    if fn == "reverse":
        return _Est(n + 10, n, elem)
    if fn in ("distinct", "sort"):
        factor = 2.1 if fn == "sort" and elem > 1 else 2.0  # strings/bytes cost a tenth more
        return _Est(math.ceil(min(n * n, _UNBOUNDED) * factor) + 10, n, elem)
    if fn in ("first", "last"):
        return _Est(0, elem, _UNBOUNDED)
    if fn in ("optional.unwrap", "unwrapOpt"):
        return _Est(0, n, elem)
    return None


def _is_device(node: Node, scope: dict[str, _Est]) -> bool:
    """The `device` variable, not a macro / cel.bind variable of that name."""
    return isinstance(node, Ident) and node.name == "device" and "device" not in scope


def _inner_elem(node: Select | Index | OptSelect | OptIndex, scope: dict[str, _Est]) -> int:
    """Element size after one more level of map access below `device`."""
    depth, current = 0, node.operand
    while isinstance(current, Select | Index | OptSelect | OptIndex):
        depth, current = depth + 1, current.operand
    if _is_device(current, scope) and depth == 1:
        # device.attributes[domain] -> a map of attributes, whose values are <= 64 long.
        return ATTRIBUTE_MAX_VALUE_LENGTH
    if _is_device(current, scope) and depth >= 2:
        return max(ATTRIBUTE_MAX_VALUE_LENGTH, MAX_LIST_ATTRIBUTE_VALUES, DEVICE_MAX_ID_LENGTH)
    return _UNBOUNDED
