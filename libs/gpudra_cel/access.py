"""Run-time field selection, indexing and `has()` on CEL values (maps, lists, the device).

A missing map key is CEL's "no such key" error; selecting a field of a non-map, indexing a
non-container, or an index out of range are errors too. The device is a `Mapping` of its four
fields here (see `device`), so `dyn(device).foo` is "no such key: foo" like any map's.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.values import CelUint, Failed, map_lookup, no_overload, type_name

__all__ = ["has_field", "index_value", "list_position", "select_value"]


def select_value(operand: object, name: str) -> object:
    if isinstance(operand, Failed):
        raise operand.error
    if isinstance(operand, Mapping):
        found, value = map_lookup(operand, name)
        if not found:
            raise CelEvaluationError(f"no such key: {name}")
        return value
    raise CelEvaluationError(f"type '{type_name(operand)}' does not support field selection")


def list_position(function: str, items: object, index: object) -> int:
    """`index` as a position in the list `items` (an integral double counts as its int); any
    other type is no overload of `function` (`_[_]` or `_[?_]`)."""
    if isinstance(index, float) and index.is_integer():
        index = int(index)
    if type(index) not in (int, CelUint):
        raise no_overload(function, items, index)
    assert isinstance(index, int)
    return index


def index_value(operand: object, index: object) -> object:
    if isinstance(operand, Failed):
        raise operand.error
    if isinstance(operand, tuple | list):
        index = list_position("_[_]", operand, index)
        if not 0 <= index < len(operand):
            raise CelEvaluationError(f"index out of range: {index}")
        return operand[index]
    if isinstance(operand, Mapping):
        found, value = map_lookup(operand, index)
        if not found:
            raise CelEvaluationError(f"no such key: {index!r}")
        return value
    raise no_overload("_[_]", operand, index)


def has_field(value: object, name: str) -> bool:
    if isinstance(value, Failed):
        raise value.error
    if isinstance(value, Mapping):
        return map_lookup(value, name)[0]
    raise CelEvaluationError(f"has(): type '{type_name(value)}' has no fields")
