"""CEL values as plain Python objects, and the operators' run-time semantics on them.

Representation (chosen so a device's own values need no conversion):
`bool`, `int` (int64), `CelUint` (uint64, an `int` subclass), `float` (double), `str`, `bytes`,
`None` (null), `tuple`/`list` (list), `Mapping` (map), `Quantity`, `Semver`, `CelOptional`,
CEL's `google.protobuf.Timestamp` / `Duration` (`celtime.Timestamp`, `Duration`: `+`, `-`,
ordering and equality as cel-go defines them between the two), and Kubernetes' `net.IP` /
`net.CIDR` / `kubernetes.URL` (`netaddr.IPAddr`, `IPPrefix`, `neturl.ParsedURL`).

Promises: no implicit conversions (`1 == true` is false, `"a" < 1` is an error); equality is
CEL's heterogeneous equality (numbers compare by value across int/uint/double, an int or uint
against a double as a double, as cel-go does; other kinds of different type are unequal; inside
lists and maps with cel-go's quirk, see `_element_equal`); int64/uint64 overflow, division by
zero and modulus by zero are errors, as in cel-go.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Final

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.k8s_formats import NamedFormat
from gpudra_cel.netaddr import IPAddr, IPPrefix
from gpudra_cel.neturl import ParsedURL

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
UINT64_MAX: Final = (1 << 64) - 1


class CelUint(int):
    """A CEL `uint`: an int that CEL keeps apart from `int` in arithmetic and overloads."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelOptional:
    """CEL's `optional(T)`: a value or nothing."""

    __slots__ = ("value",)
    NONE: CelOptional

    def __init__(self, value: object, present: bool = True) -> None:
        self.value = value if present else _ABSENT

    @property
    def has_value(self) -> bool:
        return self.value is not _ABSENT

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CelOptional):
            return NotImplemented
        if self.has_value and other.has_value:
            return equal(self.value, other.value)
        return self.has_value == other.has_value

    def __hash__(self) -> int:
        return hash(self.has_value)

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has_value else "optional.none()"


class CelTypeValue:
    """A CEL type as a value (`int`, `type(x)`): equal to another exactly when the names are."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CelTypeValue):
            return NotImplemented
        return self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name


class Failed:
    """A `cel.bind` variable whose value is an error: raised only where the variable is used, so
    `cel.bind(v, <error>, false && v)` is false, as in cel-go."""

    __slots__ = ("error",)

    def __init__(self, error: CelEvaluationError) -> None:
        self.error = error


_ABSENT: Final = object()
CelOptional.NONE = CelOptional(None, present=False)

_NO_ENTRIES: Mapping[object, object] = {}


class DefaultingMap(Mapping[object, object]):
    """A map whose lookup of an absent key (`m.k`, `m[k]`, `has(m.k)`, `m[?k]`) yields an empty
    map, while `k in m`, `size(m)` and iteration see only its entries: Kubernetes'
    `device.attributes` / `device.capacity` (`newStringInterfaceMapWithDefault` overrides only
    `Find`)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Mapping[str, object]) -> None:
        self.entries = entries

    def __getitem__(self, key: object) -> object:
        return self.entries[key]  # type: ignore[index]

    def __iter__(self) -> Iterator[object]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"DefaultingMap({self.entries!r})"


_NET_TYPE_NAMES: dict[type, str] = {
    IPAddr: "net.IP",
    IPPrefix: "net.CIDR",
    ParsedURL: "kubernetes.URL",
    NamedFormat: "kubernetes.NamedFormat",
    Timestamp: "google.protobuf.Timestamp",
    Duration: "google.protobuf.Duration",
}


def type_name(value: object) -> str:
    """CEL's name for the type of a run-time value (used in error messages)."""
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, CelUint):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, tuple | list):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, Quantity):
        return "Quantity"
    if isinstance(value, Semver):
        return "Semver"
    if isinstance(value, CelOptional):
        return "optional_type"
    if isinstance(value, IPAddr | IPPrefix | ParsedURL | NamedFormat | Timestamp | Duration):
        return _NET_TYPE_NAMES[type(value)]
    if isinstance(value, CelTypeValue):
        return "type"
    return type(value).__name__


_RUNTIME_TYPE_NAMES: Final = {"Quantity": "kubernetes.Quantity", "Semver": "kubernetes.Semver"}


def type_of(value: object) -> CelTypeValue:
    """CEL's `type(value)`: the type of a run-time value, named as cel-go and Kubernetes name it
    (`int`, `list`, `google.protobuf.Timestamp`, `kubernetes.Quantity`, `net.IP`)."""
    name = type_name(value)
    return CelTypeValue(_RUNTIME_TYPE_NAMES.get(name, name))


def no_overload(function: str, *args: object) -> CelEvaluationError:
    kinds = ", ".join(type_name(a) for a in args)
    return CelEvaluationError(f"found no matching overload for '{function}' applied to ({kinds})")


def is_number(value: object) -> bool:
    return type(value) in (int, float, CelUint)


def equal(a: object, b: object) -> bool:
    """CEL `==`."""
    ta, tb = type(a), type(b)
    if ta is tb and ta in (str, int, bool, bytes, CelUint):
        return a == b
    if ta in (int, float, CelUint) and tb in (int, float, CelUint):
        # heterogeneous numeric equality (NaN != NaN holds in Python too), with an int or uint
        # met by a double compared as a double, as cel-go does
        if ta is float and tb is not float:
            return a == float(b)  # type: ignore[arg-type]
        if tb is float and ta is not float:
            return float(a) == b  # type: ignore[arg-type]
        return a == b
    if ta is bool or tb is bool:
        return False
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_element_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            found, other = map_lookup(b, key)
            if not found or not _element_equal(value, other):
                return False
        return True
    if ta is tb and ta in _SAME_TYPE_EQUAL:
        return a == b
    if ta is tb is NamedFormat:  # as Kubernetes: the same name
        return a == b
    if isinstance(a, ParsedURL) and isinstance(b, ParsedURL):  # as Kubernetes: same String()
        return a.key() == b.key()
    return False


_SAME_TYPE_EQUAL: Final = (
    float,
    Quantity,
    Semver,
    CelOptional,
    type(None),
    IPAddr,
    IPPrefix,
    Timestamp,
    Duration,
    CelTypeValue,
)
_OPAQUE: Final = (Quantity, Semver, IPAddr, IPPrefix, ParsedURL, NamedFormat)


def _element_equal(a: object, b: object) -> bool:
    """Two elements (or map values) inside cel-go's list / map `Equal`, which stops only at an
    element comparison answering false: a Kubernetes value on the left refuses a value of
    another type (not null) with an error, which counts as equal there
    (`[dyn(semver("1.0.0"))] == [dyn("x")]` is true, the reverse false)."""
    if a.__class__ in _OPAQUE and b.__class__ is not a.__class__ and b is not None:
        return True
    return equal(a, b)


def equal_operator(a: object, b: object) -> bool:
    """CEL `a == b` as cel-go evaluates it: `equal`, except that a Kubernetes value on the left
    (Quantity, Semver, IP, CIDR, URL, format) refuses a value of another type on the right with
    an error (their `Equal` answers "no such overload"; null excepted), where a CEL built-in on
    the left just answers false. `!=`, `in` and `includes` pass over the refusal (cel-go's `!=`
    is "not true", its list search keeps only a true answer)."""
    if a.__class__ in _OPAQUE and b.__class__ is not a.__class__ and b is not None:
        raise no_overload("_==_", a, b)
    return equal(a, b)


def map_lookup(mapping: Mapping[object, object], key: object) -> tuple[bool, object]:
    """Find `key` in a CEL map: numeric keys match across int/uint/double of equal value; a
    `DefaultingMap` finds every key."""
    if mapping.__class__ is DefaultingMap:
        found, value = _lookup(mapping, key)
        return True, value if found else _NO_ENTRIES
    return _lookup(mapping, key)


def _lookup(mapping: Mapping[object, object], key: object) -> tuple[bool, object]:
    if isinstance(key, float):
        if not key.is_integer():
            return False, None
        key = int(key)
    if isinstance(key, bool):
        for k, v in mapping.items():
            if isinstance(k, bool) and k == key:
                return True, v
        return False, None
    if isinstance(key, int):
        for k, v in mapping.items():
            if type(k) in (int, CelUint) and k == key:
                return True, v
        return False, None
    try:
        if key in mapping:
            return True, mapping[key]
    except TypeError:
        pass
    return False, None


_ORDERED_SAME: Final = frozenset({str, bool, bytes, int, float, CelUint, Timestamp, Duration})


def compare(a: object, b: object, op: str) -> int:
    """-1/0/1 for CEL's ordering operators, 2 when NaN leaves them unordered; int/uint/double
    compare across types, an int or uint against a double as a double (cel-go converts it, so
    2**53 + 1 and 2.0**53 are equal there)."""
    ta, tb = type(a), type(b)
    if (ta is tb and ta in _ORDERED_SAME) or (
        ta in (int, float, CelUint) and tb in (int, float, CelUint)
    ):
        if ta is float and tb is not float:
            b = float(b)  # type: ignore[arg-type]
        elif tb is float and ta is not float:
            a = float(a)  # type: ignore[arg-type]
        if a < b:  # type: ignore[operator]
            return -1
        if a == b:
            return 0
        if a > b:  # type: ignore[operator]
            return 1
        return 2  # NaN: every ordering is false
    raise no_overload(op, a, b)


def check_int(value: int) -> int:
    if value < INT64_MIN or value > INT64_MAX:
        raise CelEvaluationError("integer overflow")
    return value


def check_uint(value: int) -> CelUint:
    if value < 0 or value > UINT64_MAX:
        raise CelEvaluationError("unsigned integer overflow")
    return CelUint(value)


def add(a: object, b: object) -> object:
    ta, tb = type(a), type(b)
    if ta is not tb:
        if isinstance(a, tuple | list) and isinstance(b, tuple | list):
            return tuple(a) + tuple(b)
        if isinstance(a, Timestamp) and isinstance(b, Duration):
            return a.add(b)
        if isinstance(a, Duration) and isinstance(b, Timestamp):
            return b.add(a)
        raise no_overload("_+_", a, b)
    if ta is int:
        return check_int(a + b)  # type: ignore[operator]
    if ta is CelUint:
        return check_uint(a + b)  # type: ignore[operator]
    if ta in (float, str, bytes, tuple, list):
        return a + b  # type: ignore[operator]
    if ta is Duration:
        return a.add(b)  # type: ignore[attr-defined]
    raise no_overload("_+_", a, b)


def subtract(a: object, b: object) -> object:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            return check_int(a - b)  # type: ignore[operator]
        if ta is CelUint:
            return check_uint(a - b)  # type: ignore[operator]
        if ta is float:
            return a - b  # type: ignore[operator]
        if ta is Timestamp or ta is Duration:
            return a.subtract(b)  # type: ignore[attr-defined]
    if ta is Timestamp and isinstance(b, Duration):
        return a.add(b.negate())  # type: ignore[attr-defined]
    raise no_overload("_-_", a, b)


def multiply(a: object, b: object) -> object:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            return check_int(a * b)  # type: ignore[operator]
        if ta is CelUint:
            return check_uint(a * b)  # type: ignore[operator]
        if ta is float:
            return a * b  # type: ignore[operator]
    raise no_overload("_*_", a, b)


def divide(a: object, b: object) -> object:
    ta = type(a)
    if ta is type(b):
        if ta is float:
            assert isinstance(a, float)
            assert isinstance(b, float)
            if b == 0.0:
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
        if ta in (int, CelUint):
            assert isinstance(a, int)
            assert isinstance(b, int)
            if b == 0:
                raise CelEvaluationError("division by zero")
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return check_int(quotient) if ta is int else check_uint(quotient)
    raise no_overload("_/_", a, b)


def modulo(a: object, b: object) -> object:
    ta = type(a)
    if ta is type(b) and ta in (int, CelUint):
        assert isinstance(a, int)
        assert isinstance(b, int)
        if b == 0:
            raise CelEvaluationError("modulus by zero")
        if ta is int and a == INT64_MIN and b == -1:  # cel-go: overflow, as for MIN / -1
            raise CelEvaluationError("integer overflow")
        remainder = abs(a) % abs(b) * (1 if a >= 0 else -1)
        return remainder if ta is int else CelUint(remainder)
    raise no_overload("_%_", a, b)


def negate(a: object) -> object:
    if isinstance(a, int) and a.__class__ is int:
        return check_int(-a)
    if isinstance(a, float):
        return -a
    if isinstance(a, Duration):  # declared for int and double only: reached through dyn()
        return a.negate()
    raise no_overload("-_", a)


def contains(container: object, item: object) -> bool:
    """CEL `item in container`."""
    if isinstance(container, tuple | list):
        return any(equal(item, x) for x in container)
    if isinstance(container, Mapping):
        return _lookup(container, item)[0]  # membership: a DefaultingMap's default is no entry
    raise no_overload("@in", item, container)


def to_bool(value: object, function: str) -> bool:
    if value is True or value is False:
        return value
    raise no_overload(function, value)
