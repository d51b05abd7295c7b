"""CEL types for the static checker, and the declared type of DRA's `device` variable.

Types are small immutable values: `int`, `list(string)`, `map(string, map(string, dyn))`,
`optional_type(T)` (what `a.?b`, `m[?k]` and `optional.of(x)` yield). `dyn` is assignable to and
from everything (attribute values are `dyn`, as in Kubernetes), and a single-letter name (`A`,
`B`) is a type parameter that binds on first use in one overload; once bound to `dyn` it stays
`dyn` (`optional(dyn).orValue(1)` is `dyn`, as in cel-go). Kubernetes' opaque types `net.IP`,
`net.CIDR` and `kubernetes.URL` (`lib_net`) are plain named types: `==` between two of the same
type, no ordering, no conversion from strings except by `ip()` / `cidr()` / `url()`; so is
`kubernetes.NamedFormat` (`lib_format_k8s`), made only by `format.<name>()` / `format.named()`.
A type used as a value (`int`, `type(x)`) is `type(T)`; as in cel-go any two such types may meet
in `==`, and at run time they are equal when they name the same type (`list(int)` and
`list(string)` are both `list`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.celtime import Duration, Timestamp
from gpudra_cel.k8s_formats import NamedFormat
from gpudra_cel.netaddr import IPAddr, IPPrefix
from gpudra_cel.neturl import ParsedURL
from gpudra_cel.values import CelOptional, CelTypeValue, CelUint

__all__ = [
    "BOOL",
    "BYTES",
    "CIDR",
    "DEVICE",
    "DEVICE_FIELDS",
    "DOUBLE",
    "DURATION",
    "DYN",
    "FORMAT",
    "INT",
    "IP",
    "NULL",
    "QUANTITY",
    "SEMVER",
    "STRING",
    "TIMESTAMP",
    "TYPE",
    "TYPE_IDENTIFIERS",
    "UINT",
    "URL",
    "CelType",
    "assignable",
    "join",
    "list_of",
    "map_of",
    "optional_of",
    "type_of",
    "value_has_type",
]


@dataclass(frozen=True, slots=True)
class CelType:
    name: str
    params: tuple[CelType, ...] = field(default=())

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(str(p) for p in self.params)})"

    @property
    def is_param(self) -> bool:
        return len(self.name) == 1 and self.name.isupper()


DYN = CelType("dyn")
BOOL = CelType("bool")
INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
NULL = CelType("null_type")
QUANTITY = CelType("Quantity")
SEMVER = CelType("Semver")
DEVICE = CelType("kubernetes.DRADevice")
IP = CelType("net.IP")  # Kubernetes' IP, CIDR and URL libraries (`lib_net`)
CIDR = CelType("net.CIDR")
URL = CelType("kubernetes.URL")
FORMAT = CelType("kubernetes.NamedFormat")  # Kubernetes' format library (`lib_format_k8s`)
TIMESTAMP = CelType("google.protobuf.Timestamp")  # CEL's standard time types (`lib_time`)
DURATION = CelType("google.protobuf.Duration")
TYPE = CelType("type")  # a type as a value: `type(x)`, `int`; `type(T)` when T is known
_NET_CLASSES: dict[str, type] = {
    "net.IP": IPAddr,
    "net.CIDR": IPPrefix,
    "kubernetes.URL": ParsedURL,
    "kubernetes.NamedFormat": NamedFormat,
    "google.protobuf.Timestamp": Timestamp,
    "google.protobuf.Duration": Duration,
}


def list_of(elem: CelType) -> CelType:
    return CelType("list", (elem,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


def optional_of(elem: CelType) -> CelType:
    return CelType("optional_type", (elem,))


def type_of(t: CelType) -> CelType:
    """The static type of a type value whose type is `t` (`type(int)` for `int`)."""
    return CelType("type", (t,))


# cel-go's standard type identifiers (and its optional library's `optional_type`): each names
# a type value; `list` and `map` are the kinds, whatever their elements
TYPE_IDENTIFIERS: dict[str, CelType] = {
    name: type_of(CelType(name))
    for name in (
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "bytes",
        "list",
        "map",
        "null_type",
        "type",
        "optional_type",
        TIMESTAMP.name,
        DURATION.name,
    )
}


DEVICE_FIELDS: dict[str, CelType] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, DYN)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}

NUMERIC = frozenset({INT, UINT, DOUBLE})


def assignable(param: CelType, arg: CelType, bindings: dict[str, CelType] | None = None) -> bool:
    """Can a value of static type `arg` be passed where `param` is declared?"""
    if bindings is None:
        bindings = {}
    if param.is_param:
        bound = bindings.get(param.name)
        if bound is None:
            bindings[param.name] = arg
            return True
        if bound == DYN or arg == DYN:  # as cel-go: `optional(dyn).orValue(1)` stays dyn
            return True
        return assignable(bound, arg, bindings)
    if param == DYN or arg == DYN:
        return True
    if param.name == "type" and arg.name == "type":  # as cel-go: any type value fits any
        return True
    if param.name != arg.name or len(param.params) != len(arg.params):
        return False
    return all(assignable(p, a, bindings) for p, a in zip(param.params, arg.params, strict=True))


def substitute(t: CelType, bindings: dict[str, CelType]) -> CelType:
    if t.is_param:
        return bindings.get(t.name, DYN)
    if not t.params:
        return t
    return CelType(t.name, tuple(substitute(p, bindings) for p in t.params))


def join(a: CelType, b: CelType) -> CelType:
    """The most precise type covering both (`dyn` when they differ)."""
    if a == b:
        return a
    if a.name == b.name and len(a.params) == len(b.params) and a.params:
        return CelType(a.name, tuple(join(x, y) for x, y in zip(a.params, b.params, strict=True)))
    return DYN


def value_has_type(value: object, t: CelType) -> bool:
    """Run-time check that a value belongs to a declared (parameter-free) type's kind."""
    name = t.name
    if name == "dyn" or t.is_param:
        return True
    kind = type(value)
    if name == "int":
        return kind is int
    if name == "uint":
        return kind is CelUint
    if name == "double":
        return kind is float
    if name == "string":
        return kind is str
    if name == "bool":
        return kind is bool
    if name == "bytes":
        return kind is bytes
    if name == "list":
        return kind is tuple or kind is list
    if name == "map":
        return isinstance(value, dict) or hasattr(value, "keys")
    if name == "Quantity":
        return kind is Quantity
    if name == "Semver":
        return kind is Semver
    if name == "optional_type":
        return kind is CelOptional
    if name in _NET_CLASSES:
        return kind is _NET_CLASSES[name]
    if name == "null_type":
        return value is None
    if name == "type":
        return kind is CelTypeValue
    return False
