"""cel-go's lists extension at the version Kubernetes declares for every CEL environment since
1.34 (`ext.Lists(ext.ListsVersion(3))`), and the list functions of the optional library at the
version `cel.OptionalTypes()` gives (the latest: 2).

- `l.slice(start, end)`, `l.flatten()` / `l.flatten(depth)`, `lists.range(n)`, `l.reverse()`,
  `l.distinct()`, `l.sort()` (ints, uints, doubles, bools, strings or bytes, all of one type);
- `l.first()` / `l.last()`: an optional of the first / last element (none on an empty list);
  `optional.unwrap(l)` / `l.unwrapOpt()`: the values of a list of optionals, nones dropped.

`l.sortBy(v, key)` (a macro: the syntax tree has it as a comprehension) orders by the keys
(`sort_by_keys`). Errors are cel-go's ("cannot slice(2, 1), start index must be less than or
equal to end index", "level must be non-negative", "list elements must have the same type",
...). A call whose own cost (cel-go's units: `lists.range(n)` is n,
`distinct`/`sort` twice the square of the length) would alone pass Kubernetes' per-evaluation
limit fails with the limit's error before doing the work, so `lists.range(1 << 40)` cannot
exhaust memory or time.
"""

from __future__ import annotations

import functools

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload, overload
from gpudra_cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    list_of,
    optional_of,
)
from gpudra_cel.values import CelOptional, CelUint, compare, equal

__all__ = ["LIST_OVERLOADS", "MAX_CALL_COST", "self_compare_cost", "sort_by_keys"]

MAX_CALL_COST = 1_000_000  # Kubernetes' per-evaluation limit: no single call may cost more
LIST_CREATE_COST = 10
A = CelType("A")
# cel-go's comparable types, as its lists extension declares them
_COMPARABLE = (INT, UINT, DOUBLE, BOOL, DURATION, TIMESTAMP, STRING, BYTES)
_ORDERED_CLASSES = frozenset({int, CelUint, float, bool, Duration, Timestamp, str, bytes})


def _too_costly(cost: int, what: str) -> CelEvaluationError:
    return CelEvaluationError(
        f"operation cancelled: actual cost limit exceeded ({what} alone costs {cost} > "
        f"{MAX_CALL_COST})"
    )


def _slice(items: tuple[object, ...], start: int, end: int) -> tuple[object, ...]:
    if start < 0 or end < 0:
        raise CelEvaluationError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise CelEvaluationError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if len(items) < end:
        raise CelEvaluationError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return tuple(items[start:end])


def _flatten(items: tuple[object, ...], depth: int = 1) -> tuple[object, ...]:
    if depth < 0:
        raise CelEvaluationError("level must be non-negative")
    flat: list[object] = []
    for item in items:
        if isinstance(item, tuple | list) and depth > 0:
            flat.extend(_flatten(tuple(item), depth - 1))
        else:
            flat.append(item)
    return tuple(flat)


def _range(n: int) -> tuple[int, ...]:
    if n + 1 + LIST_CREATE_COST > MAX_CALL_COST:
        raise _too_costly(n + 1 + LIST_CREATE_COST, f"lists.range({n})")
    return tuple(range(max(n, 0)))


def self_compare_cost(items: tuple[object, ...]) -> int:
    """cel-go's cost of `distinct()` / `sort()`: n² comparisons, 2 units each (+0.1 for text)."""
    n = len(items)
    factor = 2.1 if n and items[0].__class__ in (str, bytes) else 2.0
    return int(n * n * factor) + 1 + LIST_CREATE_COST


def _distinct(items: tuple[object, ...]) -> tuple[object, ...]:
    cost = self_compare_cost(items)
    if cost > MAX_CALL_COST:
        raise _too_costly(cost, "distinct()")
    unique: list[object] = []
    for item in items:
        if not any(equal(item, seen) for seen in unique):
            unique.append(item)
    return tuple(unique)


def _sort(items: tuple[object, ...]) -> tuple[object, ...]:
    return sort_by_keys(items, items, "sort()")


def sort_by_keys(
    items: tuple[object, ...], keys: tuple[object, ...], what: str = "sortBy()"
) -> tuple[object, ...]:
    """`items` ordered by their `keys` (cel-go's `@sortByAssociatedKeys`, behind `sort()` and
    the `sortBy` macro): keys of one comparable type, equal keys keep their order."""
    cost = self_compare_cost(keys)
    if cost > MAX_CALL_COST:
        raise _too_costly(cost, what)
    if not keys:
        return tuple(items)
    kind = keys[0].__class__
    if kind not in _ORDERED_CLASSES or kind in (Quantity, Semver):
        raise CelEvaluationError("list elements must be comparable")
    if len(keys) > 1 and any(key.__class__ is not kind for key in keys):
        raise CelEvaluationError("list elements must have the same type")

    def by_key(i: int, j: int) -> int:
        return _order(keys[i], keys[j])

    order = sorted(range(len(keys)), key=functools.cmp_to_key(by_key))
    return tuple(items[i] for i in order)


def _order(a: object, b: object) -> int:
    result = compare(a, b, "sort")
    return 0 if result == 2 else result  # NaN: unordered, left where it is


def _first(items: tuple[object, ...]) -> CelOptional:
    return CelOptional(items[0]) if items else CelOptional.NONE


def _last(items: tuple[object, ...]) -> CelOptional:
    return CelOptional(items[-1]) if items else CelOptional.NONE


def _unwrap(items: tuple[object, ...]) -> tuple[object, ...]:
    values: list[object] = []
    for item in items:
        if not isinstance(item, CelOptional):
            raise CelEvaluationError(f"optional.unwrap: expected optionals, found {item!r}")
        if item.has_value:
            values.append(item.value)
    return tuple(values)


_LIST = list_of(A)

LIST_OVERLOADS: tuple[Overload, ...] = (
    overload("slice", _LIST, (INT, INT), _LIST, _slice),
    overload("flatten", list_of(_LIST), (), _LIST, _flatten),
    overload("flatten", list_of(DYN), (INT,), list_of(DYN), _flatten),
    overload("lists.range", None, (INT,), list_of(INT), _range),
    overload("reverse", _LIST, (), _LIST, lambda items: tuple(reversed(items))),
    overload("distinct", _LIST, (), _LIST, _distinct),
    *(overload("sort", list_of(t), (), list_of(t), _sort) for t in _COMPARABLE),
    overload("first", _LIST, (), optional_of(A), _first),
    overload("last", _LIST, (), optional_of(A), _last),
    overload("optional.unwrap", None, (list_of(optional_of(A)),), _LIST, _unwrap),
    overload("unwrapOpt", list_of(optional_of(A)), (), _LIST, _unwrap),
)
