"""CEL's standard functions (`size`, type conversions, `dyn`), `optional`, cel-go's `sets`
extension (`sets.contains`, `sets.equivalent`, `sets.intersects`) and Kubernetes' list library
(`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`).

Conversions follow cel-go exactly where a selector could notice: `int("12")` accepts only base-10
digits with an optional sign, `int(2.9)` truncates, out-of-range doubles are errors, and
`string(1.5e6)` prints as Go's `%g` does (`1.5e+06`).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Mapping
from decimal import Decimal

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.celtime import MIN_UNIX_SECONDS, Duration, Timestamp
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
    map_of,
    optional_of,
    type_of,
)
from gpudra_cel.values import (
    UINT64_MAX,
    CelOptional,
    CelUint,
    add,
    check_int,
    compare,
    equal,
)
from gpudra_cel.values import type_of as runtime_type

__all__ = ["CORE_OVERLOADS"]

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_UINT_TEXT = re.compile(r"[0-9]+")
# Go's strconv.ParseFloat (cel-go's string -> double): decimal; hexadecimal with a mandatory
# binary exponent, underscores allowed between digits or after the 0x prefix; inf / infinity
# with an optional sign; nan without one (case-insensitive)
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity)|nan", re.IGNORECASE
)
_HEX_FLOAT_TEXT = re.compile(
    r"[+-]?0x(?:_?[0-9a-f](?:_?[0-9a-f])*(?:\.(?:[0-9a-f](?:_?[0-9a-f])*)?)?"
    r"|\.[0-9a-f](?:_?[0-9a-f])*)p[+-]?[0-9](?:_?[0-9])*",
    re.IGNORECASE,
)
_BOOL_TEXT = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOL_TEXT |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
A = CelType("A")


def _size(value: object) -> int:
    assert isinstance(value, str | bytes | tuple | list | Mapping)
    return len(value)


def _to_int(value: object) -> int:
    if isinstance(value, int) and value.__class__ is int:
        return value
    if isinstance(value, CelUint):
        return check_int(int(value))
    if isinstance(value, float):
        if math.isnan(value) or not -(2.0**63) < value < 2.0**63:
            raise CelEvaluationError("integer overflow")
        return int(value)
    if isinstance(value, str) and _INT_TEXT.fullmatch(value):
        return check_int(int(value))
    if isinstance(value, Timestamp):  # Unix seconds
        return value.seconds
    if isinstance(value, Duration):  # nanoseconds
        return value.nanos
    raise CelEvaluationError(f"cannot convert {value!r} to int")


def _to_uint(value: object) -> CelUint:
    if type(value) in (int, CelUint):
        assert isinstance(value, int)
        if 0 <= value <= UINT64_MAX:
            return CelUint(value)
        raise CelEvaluationError("unsigned integer overflow")
    if isinstance(value, float):
        if math.isnan(value) or not 0 <= value < 2.0**64:
            raise CelEvaluationError("unsigned integer overflow")
        return CelUint(int(value))
    if isinstance(value, str) and _UINT_TEXT.fullmatch(value) and int(value) <= UINT64_MAX:
        return CelUint(int(value))
    raise CelEvaluationError(f"cannot convert {value!r} to uint")


def _to_double(value: object) -> float:
    if type(value) in (int, CelUint, float):
        assert isinstance(value, int | float)
        return float(value)
    if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value):
        result = float(value)
        if math.isinf(result) and "inf" not in value.lower():
            raise CelEvaluationError(f"cannot convert {value!r} to double: out of range")
        return result
    if isinstance(value, str) and _HEX_FLOAT_TEXT.fullmatch(value):
        try:
            return float.fromhex(value.replace("_", ""))
        except OverflowError as exc:
            raise CelEvaluationError(f"cannot convert {value!r} to double: out of range") from exc
    raise CelEvaluationError(f"cannot convert {value!r} to double")


def go_format_double(value: float) -> str:
    """Go's `fmt.Sprintf("%g", value)` (what cel-go's `string(double)` prints): the shortest
    digits that read back exactly, in exponent form when the exponent is < -4 or >= 6."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    prefix = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return prefix + "0"
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # digits before the decimal point
    exp10 = point - 1
    if exp10 < -4 or exp10 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{prefix}{digits}{'0' * (point - len(digits))}"
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def _to_string(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return go_format_double(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CelEvaluationError("invalid UTF-8 in bytes, cannot convert to string") from exc
    if isinstance(value, Quantity | Semver | Timestamp | Duration):
        return str(value)
    raise CelEvaluationError(f"cannot convert {value!r} to string")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _BOOL_TEXT:
        return _BOOL_TEXT[value]
    raise CelEvaluationError(f"cannot convert {value!r} to bool")


def _to_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    assert isinstance(value, str)
    return value.encode("utf-8")


def _is_zero(value: object) -> bool:
    if value is None or value is False:
        return True
    if type(value) in (int, CelUint, float):
        return value == 0
    if isinstance(value, str | bytes | tuple | list | Mapping):
        return len(value) == 0
    if isinstance(value, Duration):
        return value.nanos == 0
    if isinstance(value, Timestamp):  # Go's Time.IsZero: 0001-01-01T00:00:00Z
        return value.seconds == MIN_UNIX_SECONDS and value.nanos == 0
    return False


def _value(opt: CelOptional) -> object:
    if not opt.has_value:
        raise CelEvaluationError("optional.none() dereference")
    return opt.value


def _is_sorted(items: tuple[object, ...]) -> bool:
    # Kubernetes stops only at a comparison that answers "greater"; NaN's refusal passes
    return all(compare(a, b, "isSorted") != 1 for a, b in itertools.pairwise(items))


def _sum(items: tuple[object, ...], zero: object = 0) -> object:
    if not items:
        return zero  # Kubernetes: the zero of the overload's element type
    total = items[0]
    if type(total) not in (int, CelUint, float, Duration):
        raise CelEvaluationError(f"sum: cannot add {type(total).__name__}")
    for item in items[1:]:
        total = add(total, item)
    return total


def _extreme(items: tuple[object, ...], sign: int, name: str) -> object:
    if not items:
        raise CelEvaluationError(f"{name} called on empty list")
    best = items[0]
    for item in items[1:]:
        if compare(item, best, name) == sign:
            best = item
    compare(best, best, name)  # a lone element must still be orderable
    return best


def _min(items: tuple[object, ...]) -> object:
    return _extreme(items, -1, "min")


def _max(items: tuple[object, ...]) -> object:
    return _extreme(items, 1, "max")


def _list_index_of(items: tuple[object, ...], item: object) -> int:
    return next((i for i, x in enumerate(items) if equal(x, item)), -1)


def _list_last_index_of(items: tuple[object, ...], item: object) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if equal(items[i], item)), -1)


def _sets_contains(items: tuple[object, ...], wanted: tuple[object, ...]) -> bool:
    return all(any(equal(x, w) for x in items) for w in wanted)


def _sets_intersects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return any(equal(x, y) for x in a for y in b)


_ANY_LIST, _ANY_MAP = list_of(A), map_of(A, CelType("B"))
# Kubernetes' list library's comparable types (isSorted, min, max)
_COMPARABLE = (INT, UINT, DOUBLE, BOOL, DURATION, TIMESTAMP, STRING, BYTES)

CORE_OVERLOADS: tuple[Overload, ...] = (
    *(overload("size", None, (t,), INT, _size) for t in (STRING, BYTES, _ANY_LIST, _ANY_MAP)),
    *(overload("size", t, (), INT, _size) for t in (STRING, BYTES, _ANY_LIST, _ANY_MAP)),
    *(
        overload("int", None, (t,), INT, _to_int)
        for t in (INT, UINT, DOUBLE, STRING, TIMESTAMP, DURATION)
    ),
    *(overload("uint", None, (t,), UINT, _to_uint) for t in (INT, UINT, DOUBLE, STRING)),
    *(overload("double", None, (t,), DOUBLE, _to_double) for t in (INT, UINT, DOUBLE, STRING)),
    *(
        overload("string", None, (t,), STRING, _to_string)
        for t in (STRING, BOOL, INT, UINT, DOUBLE, BYTES, TIMESTAMP, DURATION)
    ),
    *(overload("bool", None, (t,), BOOL, _to_bool) for t in (BOOL, STRING)),
    *(overload("bytes", None, (t,), BYTES, _to_bytes) for t in (BYTES, STRING)),
    overload("dyn", None, (A,), DYN, lambda v: v),
    overload("type", None, (A,), type_of(A), runtime_type),
    overload("optional.of", None, (A,), optional_of(A), CelOptional),
    overload("optional.none", None, (), optional_of(DYN), lambda: CelOptional.NONE),
    overload(
        "optional.ofNonZeroValue",
        None,
        (A,),
        optional_of(A),
        lambda v: CelOptional.NONE if _is_zero(v) else CelOptional(v),
    ),
    overload("hasValue", optional_of(A), (), BOOL, lambda o: o.has_value),
    overload("value", optional_of(A), (), A, _value),
    overload("orValue", optional_of(A), (A,), A, lambda o, v: o.value if o.has_value else v),
    overload(
        "or",
        optional_of(A),
        (optional_of(A),),
        optional_of(A),
        lambda o, p: o if o.has_value else p,
    ),
    overload("sets.contains", None, (_ANY_LIST, _ANY_LIST), BOOL, _sets_contains, "linear"),
    overload(
        "sets.equivalent",
        None,
        (_ANY_LIST, _ANY_LIST),
        BOOL,
        lambda a, b: _sets_contains(a, b) and _sets_contains(b, a),
        "linear",
    ),
    overload("sets.intersects", None, (_ANY_LIST, _ANY_LIST), BOOL, _sets_intersects, "linear"),
    # isSorted / min / max: one overload per comparable type, as Kubernetes declares them
    *(overload("isSorted", list_of(t), (), BOOL, _is_sorted, cost="linear") for t in _COMPARABLE),
    # one overload per summable type, int first, as Kubernetes declares them: an empty list sums
    # to its element type's zero (0, 0u, 0.0, duration("0s"))
    *(
        overload("sum", list_of(t), (), t, functools.partial(_sum, zero=zero), cost="linear")
        for t, zero in ((INT, 0), (UINT, CelUint(0)), (DOUBLE, 0.0), (DURATION, Duration(0)))
    ),
    *(overload("min", list_of(t), (), t, _min, cost="linear") for t in _COMPARABLE),
    *(overload("max", list_of(t), (), t, _max, cost="linear") for t in _COMPARABLE),
    overload("indexOf", _ANY_LIST, (A,), INT, _list_index_of, cost="linear"),
    overload("lastIndexOf", _ANY_LIST, (A,), INT, _list_last_index_of, cost="linear"),
)
