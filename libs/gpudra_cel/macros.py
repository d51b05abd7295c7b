"""Closures for CEL's comprehension macros: `all`, `exists`, `exists_one`, `map`, `filter`, and
the lists extension's `sortBy`.

Semantics follow cel-go's macro expansions: `all` is false as soon as one element is false, even
if another element failed (errors are absorbed like `&&`), an error only if no element is false;
`exists` mirrors that with true; `exists_one`, `map` and `filter` propagate the first error. A
map is iterated over its keys. The loop variable lives in activation slot `slot`.
Two-variable forms (cel-go's `all(i, v, ...)`, `existsOne`, `transformList`, `transformMap`) see
(index, element) of a list and (key, value) of a map, in slots `slot` and `slot2`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.lib_lists import sort_by_keys
from gpudra_cel.operators import Fn
from gpudra_cel.values import no_overload, type_name

__all__ = ["comprehension", "comprehension2", "sort_by_macro"]


def _items(value: object, kind: str) -> Iterable[object]:
    if isinstance(value, tuple | list):
        return value
    if isinstance(value, Mapping):
        return tuple(value.keys())
    raise CelEvaluationError(f"{kind}() cannot iterate over {type_name(value)}")


def comprehension(kind: str, rng: Fn, slot: int, pred: Fn | None, body: Fn) -> Fn:
    if kind == "all":
        return _quantifier(rng, slot, body, decisive=False, name="all")
    if kind == "exists":
        return _quantifier(rng, slot, body, decisive=True, name="exists")
    if kind == "exists_one":

        def exists_one(act: list[object]) -> object:
            count = 0
            for item in _items(rng(act), kind):
                act[slot] = item
                v = body(act)
                if v is True:
                    count += 1
                elif v is not False:
                    raise no_overload("exists_one", v)
            return count == 1

        return exists_one
    if kind == "filter":

        def filter_(act: list[object]) -> object:
            kept: list[object] = []
            for item in _items(rng(act), kind):
                act[slot] = item
                v = body(act)
                if v is True:
                    kept.append(item)
                elif v is not False:
                    raise no_overload("filter", v)
            return tuple(kept)

        return filter_

    def map_(act: list[object]) -> object:
        out: list[object] = []
        for item in _items(rng(act), kind):
            act[slot] = item
            if pred is not None:
                keep = pred(act)
                if keep is False:
                    continue
                if keep is not True:
                    raise no_overload("map", keep)
            out.append(body(act))
        return tuple(out)

    return map_


def _quantifier(rng: Fn, slot: int, body: Fn, *, decisive: bool, name: str) -> Fn:
    def quantify(act: list[object]) -> object:
        error: CelEvaluationError | None = None
        for item in _items(rng(act), name):
            act[slot] = item
            try:
                v = body(act)
            except CelEvaluationError as exc:
                error = error or exc
                continue
            if v is decisive:
                return decisive
            if v is not (not decisive):
                error = error or no_overload(name, v)
        if error is not None:
            raise error
        return not decisive

    return quantify


def sort_by_macro(rng: Fn, slot: int, key: Fn) -> Fn:
    """`l.sortBy(v, key)`: the elements ordered by `key` (errors propagate, as in `map`)."""

    def sort_by(act: list[object]) -> object:
        items = rng(act)
        if not isinstance(items, tuple | list):
            raise CelEvaluationError(f"sortBy() cannot iterate over {type_name(items)}")
        keys: list[object] = []
        for item in items:
            act[slot] = item
            keys.append(key(act))
        return sort_by_keys(tuple(items), tuple(keys))

    return sort_by


def _pairs(value: object, kind: str) -> Iterable[tuple[object, object]]:
    if isinstance(value, tuple | list):
        return tuple(enumerate(value))
    if isinstance(value, Mapping):
        return tuple(value.items())
    raise CelEvaluationError(f"{kind}() cannot iterate over {type_name(value)}")


def comprehension2(kind: str, rng: Fn, slot: int, slot2: int, pred: Fn | None, body: Fn) -> Fn:
    """The two-variable forms; `all`/`exists` absorb errors like their one-variable forms."""
    if kind in ("all", "exists"):
        decisive = kind == "exists"

        def quantify(act: list[object]) -> object:
            error: CelEvaluationError | None = None
            for key, value in _pairs(rng(act), kind):
                act[slot], act[slot2] = key, value
                try:
                    v = body(act)
                except CelEvaluationError as exc:
                    error = error or exc
                    continue
                if v is decisive:
                    return decisive
                if v is not (not decisive):
                    error = error or no_overload(kind, v)
            if error is not None:
                raise error
            return not decisive

        return quantify
    if kind == "exists_one":

        def exists_one(act: list[object]) -> object:
            count = 0
            for key, value in _pairs(rng(act), kind):
                act[slot], act[slot2] = key, value
                v = body(act)
                if v is True:
                    count += 1
                elif v is not False:
                    raise no_overload(kind, v)
            return count == 1

        return exists_one

    def transform(act: list[object]) -> object:
        mapped: dict[object, object] = {}
        listed: list[object] = []
        for key, value in _pairs(rng(act), kind):
            act[slot], act[slot2] = key, value
            if pred is not None:
                keep = pred(act)
                if keep is False:
                    continue
                if keep is not True:
                    raise no_overload(kind, keep)
            if kind == "transformList":
                listed.append(body(act))
            else:
                mapped[key] = body(act)
        return tuple(listed) if kind == "transformList" else mapped

    return transform
