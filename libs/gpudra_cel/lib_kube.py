"""Kubernetes' CEL libraries that DRA selectors get: quantity, semver, and DRA's `includes`.

Semantics follow `k8s.io/apiserver/pkg/cel/library` (quantity.go, semver.go) and
`k8s.io/dynamic-resource-allocation/cel` (`includes`): `quantity("1Gi")` parses Kubernetes
quantity syntax, `asInteger()` fails when the value is fractional or beyond int64,
`semver(s, true)` normalizes (`v` prefix, missing minor/patch, leading zeros) before parsing;
version components are uint64 (a larger one does not parse) and `major()` / `minor()` /
`patch()` wrap one past int64 to a negative int, as Go's conversion in Kubernetes does.
"""

from __future__ import annotations

from gpudra_api.errors import ApiError
from gpudra_api.quantity import Quantity
from gpudra_api.semver import Semver
from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload, overload
from gpudra_cel.types import BOOL, DOUBLE, DYN, INT, QUANTITY, SEMVER, STRING
from gpudra_cel.values import INT64_MAX, equal

__all__ = ["KUBE_OVERLOADS", "MAX_LIST_ATTRIBUTE_VALUES"]

# resourceapi.ResourceSliceMaxAttributeValuesPerDevice: the longest list attribute `includes`
# accepts (all list values of one device together are limited to this many).
MAX_LIST_ATTRIBUTE_VALUES = 48


def _quantity(text: str) -> Quantity:
    try:
        return Quantity.parse(text)
    except ApiError as exc:
        raise CelEvaluationError(f"quantity: {exc}") from exc


def _is_quantity(text: str) -> bool:
    try:
        Quantity.parse(text)
    except ApiError:
        return False
    return True


def _as_integer(q: Quantity) -> int:
    value = q.as_int()
    if value is None:
        raise CelEvaluationError(f"cannot convert value to integer: {q}")
    return value


def _add(q: Quantity, other: Quantity | int) -> Quantity:
    if isinstance(other, int):
        other = Quantity.of(other)
    return q + other


def _sub(q: Quantity, other: Quantity | int) -> Quantity:
    if isinstance(other, int):
        other = Quantity.of(other)
    return q - other


class _ShortVersionError(ValueError):
    pass


def _normalize(text: str) -> str:
    """Kubernetes' `normalizeAndParse` before its strict parse: drop one leading `v`, split into
    at most three parts on `.`, strip leading zeros from each part (the third holds the
    pre-release and build too), and fill a short version up with `.0`, which a short version
    carrying `-` or `+` in its last part may not be. Anything else stays for the parse to
    judge (`1-rc.2.3` keeps `1-rc` as its major)."""
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1 or part > "\x7f":  # Go measures bytes: one non-ASCII character is 2+
            part = part.lstrip("0")
            if not part or part[0] not in "0123456789":
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise _ShortVersionError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver(text: str, normalize: bool = False) -> Semver:
    try:
        return Semver.parse(_normalize(text) if normalize else text)
    except (ApiError, _ShortVersionError) as exc:
        raise CelEvaluationError(f"semver: {exc}") from exc


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        Semver.parse(_normalize(text) if normalize else text)
    except (ApiError, _ShortVersionError):
        return False
    return True


def _int_part(value: int) -> int:
    """Kubernetes' `types.Int(v.Major)`: Go's uint64 -> int64 conversion, which wraps (a
    component past int64 reads as negative, as in Kubernetes, instead of failing)."""
    return value - (1 << 64) if value > INT64_MAX else value


def _includes(target: object, item: object) -> bool:
    if isinstance(target, tuple | list):
        # as DRA's includesFunc: walk the list, giving up at the 49th element (a match among
        # the first 48 counts even in a longer list)
        for position, value in enumerate(target):
            if position >= MAX_LIST_ATTRIBUTE_VALUES:
                raise CelEvaluationError(
                    "'includes' function cannot be applied to lists longer than "
                    f"{MAX_LIST_ATTRIBUTE_VALUES} values"
                )
            if equal(value, item):
                return True
        return False
    return equal(target, item)


KUBE_OVERLOADS: tuple[Overload, ...] = (
    overload("quantity", None, (STRING,), QUANTITY, _quantity),
    overload("isQuantity", None, (STRING,), BOOL, _is_quantity),
    overload("sign", QUANTITY, (), INT, lambda q: q.sign),
    overload("isInteger", QUANTITY, (), BOOL, lambda q: q.is_integer()),
    overload("asInteger", QUANTITY, (), INT, _as_integer),
    overload("asApproximateFloat", QUANTITY, (), DOUBLE, lambda q: q.as_approximate_float()),
    overload("add", QUANTITY, (QUANTITY,), QUANTITY, _add),
    overload("add", QUANTITY, (INT,), QUANTITY, _add),
    overload("sub", QUANTITY, (QUANTITY,), QUANTITY, _sub),
    overload("sub", QUANTITY, (INT,), QUANTITY, _sub),
    overload("isLessThan", QUANTITY, (QUANTITY,), BOOL, lambda a, b: a < b),
    overload("isGreaterThan", QUANTITY, (QUANTITY,), BOOL, lambda a, b: a > b),
    overload("compareTo", QUANTITY, (QUANTITY,), INT, lambda a, b: a.compare(b)),
    overload("semver", None, (STRING,), SEMVER, _semver),
    overload("semver", None, (STRING, BOOL), SEMVER, _semver),
    overload("isSemver", None, (STRING,), BOOL, _is_semver),
    overload("isSemver", None, (STRING, BOOL), BOOL, _is_semver),
    overload("major", SEMVER, (), INT, lambda v: _int_part(v.major)),
    overload("minor", SEMVER, (), INT, lambda v: _int_part(v.minor)),
    overload("patch", SEMVER, (), INT, lambda v: _int_part(v.patch)),
    overload("isLessThan", SEMVER, (SEMVER,), BOOL, lambda a, b: a < b),
    overload("isGreaterThan", SEMVER, (SEMVER,), BOOL, lambda a, b: a > b),
    overload("compareTo", SEMVER, (SEMVER,), INT, lambda a, b: a.compare(b)),
    overload("includes", DYN, (DYN,), BOOL, _includes, cost="linear"),
)
