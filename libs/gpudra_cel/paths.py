"""Fused access to the device: `device.driver`, `device.attributes["d"]`,
`device.attributes["d"].name` (and `capacity`) as one closure each, plus fused comparisons of such
a path with a literal (`== "gpu"`, `< 4`, `in ["a", "b"]`), the shapes selectors are made of.

An unknown domain reads as an empty map and a missing name is "no such key", as in Kubernetes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.operators import BINARY, Fn
from gpudra_cel.values import DefaultingMap, equal_operator

__all__ = ["DEVICE_FIELDS", "DevicePath"]

DEVICE_FIELDS = {
    "driver": "driver",
    "attributes": "attributes",
    "capacity": "capacity",
    "allowMultipleAllocations": "allow_multiple_allocations",
}
_EMPTY: Mapping[str, object] = {}
_INT_OPS: dict[str, Callable[[int, int], bool]] = {
    "_<_": operator.lt,
    "_<=_": operator.le,
    "_>_": operator.gt,
    "_>=_": operator.ge,
    "_==_": operator.eq,
    "_!=_": operator.ne,
}


class DevicePath:
    """`device.<field>[.<domain>[.<name>]]` with literal keys."""

    __slots__ = ("domain", "field", "name")

    def __init__(self, field: str, domain: str | None = None, name: str | None = None) -> None:
        self.field = field  # DeviceView attribute name
        self.domain = domain
        self.name = name

    def fn(self) -> Fn:
        field, domain, name = self.field, self.domain, self.name
        if domain is None:
            if field == "driver":
                return lambda act: act[0].driver  # type: ignore[attr-defined]
            if field in ("attributes", "capacity"):  # unknown domains: empty maps
                return lambda act: DefaultingMap(getattr(act[0], field))
            return lambda act: getattr(act[0], field)
        if name is None:
            if field == "attributes":
                return lambda act: act[0].attributes.get(domain, _EMPTY)  # type: ignore[attr-defined]
            return lambda act: act[0].capacity.get(domain, _EMPTY)  # type: ignore[attr-defined]
        missing = f"no such key: {name}"
        if field == "attributes":

            def attribute(act: list[object]) -> object:
                try:
                    return act[0].attributes[domain][name]  # type: ignore[attr-defined]
                except KeyError:
                    raise CelEvaluationError(missing) from None

            return attribute

        def capacity(act: list[object]) -> object:
            try:
                return act[0].capacity[domain][name]  # type: ignore[attr-defined]
            except KeyError:
                raise CelEvaluationError(missing) from None

        return capacity

    def compare(self, op: str, constant: object) -> Fn | None:
        """A fused `<path> <op> <constant>` for the common cases, else None."""
        if self.name is None or self.field != "attributes":
            if self.field == "driver" and op in ("_==_", "_!=_") and isinstance(constant, str):
                if op == "_==_":
                    return lambda act: act[0].driver == constant  # type: ignore[attr-defined]
                return lambda act: act[0].driver != constant  # type: ignore[attr-defined]
            return None
        domain, name = self.domain, self.name
        missing = f"no such key: {name}"
        generic = BINARY[op]
        if op in ("_==_", "_!=_") and isinstance(constant, str):
            # For a string literal Python's == is CEL's: values of other kinds are just unequal.
            want = op == "_==_"

            def str_equal(act: list[object]) -> object:
                try:
                    value = act[0].attributes[domain][name]  # type: ignore[attr-defined]
                except KeyError:
                    raise CelEvaluationError(missing) from None
                if value == constant:
                    return want
                if want and value.__class__ is not str:
                    return equal_operator(value, constant)  # a Semver refuses a string
                return not want

            return str_equal
        if op in _INT_OPS and constant.__class__ is int:
            fast = _INT_OPS[op]

            def int_compare(act: list[object]) -> object:
                try:
                    value = act[0].attributes[domain][name]  # type: ignore[attr-defined]
                except KeyError:
                    raise CelEvaluationError(missing) from None
                if value.__class__ is int:
                    return fast(value, constant)  # type: ignore[arg-type]
                return generic(value, constant)

            return int_compare
        if (
            op == "@in"
            and isinstance(constant, tuple)
            and constant
            and all(isinstance(x, str) for x in constant)
        ):
            strings = frozenset(constant)

            def in_strings(act: list[object]) -> object:
                try:
                    value = act[0].attributes[domain][name]  # type: ignore[attr-defined]
                except KeyError:
                    raise CelEvaluationError(missing) from None
                if value.__class__ is str:
                    return value in strings
                return generic(value, constant)

            return in_strings
        return None
