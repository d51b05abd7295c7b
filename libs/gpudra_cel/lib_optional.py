"""Run-time semantics of CEL's optional chaining (cel-go's `OptionalTypes`, as Kubernetes
enables it), for the closures `compiler` builds.

Promises, as in cel-go and the cel-spec conformance file `optionals.textproto`:
- `x.?f` / `x[?k]` are `optional.of(x.f)` / `optional.of(x[k])` when the key is present (a list
  index in range), else `optional.none()`; on a none operand they are none;
- once a value is optional, plain selection and indexing keep it optional: `o.f` and `o[k]` on
  `optional.of(x)` are `x.?f` / `x[?k]`, on none they are none, so `a.?b.c` never fails on a
  missing `b` or `c`; selecting from a present value that is not a map is still an error;
- `has(o.f)` is false on none and `has(x.f)` on `optional.of(x)`;
- `[?e]` / `{?k: e}` keep the element / entry only when `e` has a value; an `e` that is not an
  optional is an error;
- `o.optMap(v, e)` is none on none, else `optional.of(e)` with `v` bound to the value;
  `optFlatMap` is the same but `e` must itself be an optional;
- `o.orValue(d)` / `o.or(p)` evaluate `d` / `p` only when `o` is none (they short-circuit).
The DRA `device.attributes` / `.capacity` maps find every domain (an unknown one is empty), so
`device.attributes.?d` and `device.attributes[?d]` always have a value, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpudra_cel.access import has_field, index_value, list_position, select_value
from gpudra_cel.calls import raiser
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.operators import Fn
from gpudra_cel.values import CelOptional, Failed, map_lookup, no_overload, type_name

__all__ = [
    "NONE",
    "OPTIONAL_METHODS",
    "device_optional_method",
    "entry_value",
    "has_any",
    "index_any",
    "index_optional",
    "optional_device_path",
    "optional_list",
    "optional_macro",
    "optional_method",
    "select_any",
    "select_optional",
]

NONE = CelOptional.NONE


def select_optional(value: object, name: str) -> CelOptional:
    """`value.?name` (also `value.name` when `value` is an optional)."""
    if value.__class__ is CelOptional:
        assert isinstance(value, CelOptional)
        if not value.has_value:
            return NONE
        value = value.value
    if isinstance(value, Mapping):
        found, item = map_lookup(value, name)
        return CelOptional(item) if found else NONE
    return CelOptional(select_value(value, name))  # an error: not something with fields


def index_optional(value: object, index: object) -> CelOptional:
    """`value[?index]` (also `value[index]` when `value` is an optional)."""
    if value.__class__ is CelOptional:
        assert isinstance(value, CelOptional)
        if not value.has_value:
            return NONE
        value = value.value
    if isinstance(value, Failed):
        raise value.error
    if isinstance(value, tuple | list):
        index = list_position("_[?_]", value, index)
        return CelOptional(value[index]) if 0 <= index < len(value) else NONE
    if isinstance(value, Mapping):
        if not isinstance(index, str | int | float):
            raise no_overload("_[?_]", value, index)
        found, item = map_lookup(value, index)
        return CelOptional(item) if found else NONE
    raise no_overload("_[?_]", value, index)


def select_any(value: object, name: str) -> object:
    """`value.name` where `value` may turn out to be an optional at run time (`dyn`)."""
    if value.__class__ is CelOptional:
        return select_optional(value, name)
    return select_value(value, name)


def index_any(value: object, index: object) -> object:
    """`value[index]` where `value` may turn out to be an optional at run time."""
    if value.__class__ is CelOptional:
        return index_optional(value, index)
    return index_value(value, index)


def has_any(value: object, name: str) -> bool:
    """`has(value.name)` where `value` may be an optional: false on none."""
    if value.__class__ is CelOptional:
        assert isinstance(value, CelOptional)
        if not value.has_value:
            return False
        value = value.value
    return has_field(value, name)


def entry_value(value: object) -> tuple[bool, object]:
    """(present, value) of an optional list element or map entry `?e`."""
    if value.__class__ is CelOptional:
        assert isinstance(value, CelOptional)
        return value.has_value, value.value
    if isinstance(value, Failed):
        raise value.error
    raise CelEvaluationError(
        f"an optional entry '?e' needs an optional value, got {type_name(value)}"
    )


def optional_macro(kind: str, target: Fn, slot: int, body: Fn) -> Fn:
    """`target.optMap(v, body)` / `target.optFlatMap(v, body)`, `v` living in `slot`."""
    flat = kind == "optFlatMap"

    def run(act: list[object]) -> object:
        opt = target(act)
        if opt.__class__ is not CelOptional:
            raise no_overload(kind, opt)
        assert isinstance(opt, CelOptional)
        if not opt.has_value:
            return NONE
        act[slot] = opt.value
        result = body(act)
        if not flat:
            return CelOptional(result)
        if result.__class__ is not CelOptional:
            raise CelEvaluationError(
                f"optFlatMap() must yield an optional, got {type_name(result)}"
            )
        return result

    return run


_DEREFERENCE = "optional.none() dereference"
OPTIONAL_METHODS = frozenset({"hasValue", "value", "orValue", "or"})
_EMPTY: Mapping[str, object] = {}


def optional_method(name: str, target: Fn, arg: Fn | None) -> Fn:
    """`o.hasValue()`, `o.value()`, `o.orValue(d)`, `o.or(p)` for a target the checker typed
    `optional_type(T)` (so it is a `CelOptional` at run time): no overload dispatch."""
    if name == "hasValue":
        return lambda act: target(act).has_value  # type: ignore[attr-defined]
    # `value()` is `orValue()` whose alternative fails with the dereference error.
    if name == "value":
        arg = raiser(CelEvaluationError(_DEREFERENCE))
    assert arg is not None
    # cel-go short-circuits both: the alternative is evaluated only for a none target, so
    # `o.orValue(1 / 0)` is o's value when it has one.
    if name in ("value", "orValue"):
        alternative = arg

        def or_value(act: list[object]) -> object:
            opt = target(act)
            if opt.has_value:  # type: ignore[attr-defined]
                return opt.value  # type: ignore[attr-defined]
            return alternative(act)

        return or_value

    def or_(act: list[object]) -> object:
        opt = target(act)
        return opt if opt.has_value else arg(act)  # type: ignore[attr-defined]

    return or_


def device_optional_method(
    name: str, field: str, domain: str, key: str, arg: Fn | None, default: object
) -> Fn | None:
    """`device.attributes["d"].?key.<method>(...)` (or `capacity`, or `[?"key"]`) as one map
    lookup: `hasValue` is a membership test, `orValue(<literal>)` a `get`, `value` an index.
    `arg` is None when the argument is the literal `default`. None: not fused."""
    capacity = field == "capacity"

    def table(act: list[object]) -> Mapping[str, object]:
        device = act[0]
        tables = device.capacity if capacity else device.attributes  # type: ignore[attr-defined]
        return tables.get(domain, _EMPTY)  # type: ignore[no-any-return]

    if name == "hasValue":
        if capacity:
            return lambda act: key in act[0].capacity.get(domain, _EMPTY)  # type: ignore[attr-defined]
        return lambda act: key in act[0].attributes.get(domain, _EMPTY)  # type: ignore[attr-defined]
    if name == "orValue" and arg is None:
        if capacity:
            return lambda act: act[0].capacity.get(domain, _EMPTY).get(key, default)  # type: ignore[attr-defined]
        return lambda act: act[0].attributes.get(domain, _EMPTY).get(key, default)  # type: ignore[attr-defined]
    if name == "value":

        def value(act: list[object]) -> object:
            try:
                return table(act)[key]
            except KeyError:
                raise CelEvaluationError(_DEREFERENCE) from None

        return value
    return None


def optional_list(optional: tuple[int, ...], items: list[Fn]) -> Fn:
    """`[a, ?b, ...]`: `?b` contributes its value, or nothing when it is none."""
    marked = frozenset(optional)

    def build(act: list[object]) -> object:
        result: list[object] = []
        for i, item in enumerate(items):
            value = item(act)
            if i in marked:
                present, value = entry_value(value)
                if not present:
                    continue
            result.append(value)
        return tuple(result)

    return build


def optional_device_path(field: str, domain: str | None, name: str) -> Fn:
    """`device.attributes["d"].?name` (or `capacity`) as one lookup."""
    if field == "attributes":

        def attribute(act: list[object]) -> object:
            try:
                return CelOptional(act[0].attributes[domain][name])  # type: ignore[attr-defined]
            except KeyError:
                return NONE

        return attribute

    def capacity(act: list[object]) -> object:
        try:
            return CelOptional(act[0].capacity[domain][name])  # type: ignore[attr-defined]
        except KeyError:
            return NONE

    return capacity
