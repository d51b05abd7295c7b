"""CEL's standard timestamp and duration functions, as cel-go declares them and as Kubernetes
configures them (`cel.DefaultUTCTimeZone(true)`, `ValidateTimestampLiterals`,
`ValidateDurationLiterals`).

- Conversions: `timestamp(string)` (RFC 3339), `timestamp(int)` (Unix seconds),
  `duration(string)` (Go's duration syntax), `timestamp(timestamp)`, `duration(duration)`;
  `string()` and `int()` of both live in `lib_core`.
- Accessors on a timestamp, in UTC or in the time zone given as an IANA name (`"Europe/Berlin"`)
  or an offset (`"+05:30"`, read as cel-go reads it: hours and minutes through `strconv.Atoi`):
  `getFullYear`, `getMonth` (0-based), `getDayOfYear` (0-based), `getDate` (1-based day of the
  month), `getDayOfMonth` (0-based), `getDayOfWeek` (0 = Sunday), `getHours`, `getMinutes`,
  `getSeconds`, `getMilliseconds`; on a duration `getHours`, `getMinutes`, `getSeconds` (whole
  units, truncated, computed as Go's float64 `Hours()` / `Minutes()` / `Seconds()`) and
  `getMilliseconds`.
- A literal argument of `timestamp()` / `duration()` that does not convert is a compile error
  ("invalid timestamp argument"), as Kubernetes' validators make it.
- Every call costs 1, as cel-go's estimator and tracker price these functions (the default).

`+`, `-`, comparisons and equality live with the other operators (`values`); Go's `Local` zone
is read as UTC (Kubernetes' components run with UTC as their local zone).
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from collections.abc import Callable

from gpudra_cel.celtime import (
    MAX_UNIX_SECONDS,
    MIN_UNIX_SECONDS,
    Duration,
    Timestamp,
    civil,
    parse_duration,
    parse_timestamp,
    timestamp_from_unix,
)
from gpudra_cel.errors import CelCompileError, CelEvaluationError
from gpudra_cel.functions import Overload, overload
from gpudra_cel.syntax import Call, Literal, Node
from gpudra_cel.tree import walk
from gpudra_cel.types import DURATION, INT, STRING, TIMESTAMP

__all__ = ["TIME_OVERLOADS", "check_time_literals"]

_GO_INT = re.compile(r"[+-]?[0-9]+")
_UTC_NAMES = frozenset({"", "UTC", "Local"})  # Go's LoadLocation: "" and "UTC" are UTC
# the offset lookup of an IANA zone stays inside what Python's datetime can hold
_ZONE_LOOKUP_MIN = MIN_UNIX_SECONDS + 2 * 86400
_ZONE_LOOKUP_MAX = MAX_UNIX_SECONDS - 2 * 86400


def _go_atoi(text: str) -> int:
    if not _GO_INT.fullmatch(text):
        raise CelEvaluationError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    value = int(text) if len(text.lstrip("+-").lstrip("0")) <= 19 else 1 << 63
    if not -(1 << 63) <= value < 1 << 63:
        raise CelEvaluationError(f'strconv.Atoi: parsing "{text}": value out of range')
    return value


def _zone_offset(ts: Timestamp, zone: str) -> int:
    """Seconds east of UTC of `zone` at the instant `ts` (cel-go's `inTimeZone`)."""
    colon = zone.find(":")
    if colon == -1:
        if zone in _UTC_NAMES:
            return 0
        try:
            info = zoneinfo.ZoneInfo(zone)
        except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
            raise CelEvaluationError(f"unknown time zone {zone}") from None
        at = min(max(ts.seconds, _ZONE_LOOKUP_MIN), _ZONE_LOOKUP_MAX)
        local = datetime.datetime.fromtimestamp(at, tz=info)
        delta = local.utcoffset()
        return int(delta.total_seconds()) if delta is not None else 0
    hours = _go_atoi(zone[:colon])
    minutes = _go_atoi(zone[colon + 1 :])
    total = hours * 60 - minutes if zone[0] == "-" else hours * 60 + minutes
    return total * 60


def _field(index: int, adjust: int) -> Callable[..., int]:
    """An accessor returning component `index` of `civil()` plus `adjust`, in UTC or in the
    zone given as the second argument."""

    def get(ts: Timestamp, zone: str = "UTC") -> int:
        return civil(ts.seconds + _zone_offset(ts, zone))[index] + adjust

    return get


def _milliseconds(ts: Timestamp, zone: str = "UTC") -> int:
    _zone_offset(ts, zone)  # a bad zone is an error even here, as in cel-go
    return ts.nanos // 1_000_000


def _timestamp(value: object) -> Timestamp:
    if isinstance(value, Timestamp):
        return value
    if isinstance(value, str):
        return parse_timestamp(value)
    assert isinstance(value, int)
    return timestamp_from_unix(value)


def _duration(value: object) -> Duration:
    if isinstance(value, Duration):
        return value
    assert isinstance(value, str)
    return parse_duration(value)


def _whole(unit_nanos: int) -> Callable[[Duration], int]:
    """Go's `int64(d.Hours())` (and minutes, seconds): whole units and the remainder as
    float64, truncated."""

    def get(d: Duration) -> int:
        whole = abs(d.nanos) // unit_nanos * (1 if d.nanos >= 0 else -1)
        rest = d.nanos - whole * unit_nanos
        return int(float(whole) + float(rest) / float(unit_nanos))

    return get


_TIMESTAMP_FIELDS: dict[str, Callable[..., int]] = {
    "getFullYear": _field(0, 0),
    "getMonth": _field(1, -1),
    "getDate": _field(2, 0),
    "getDayOfMonth": _field(2, -1),
    "getHours": _field(3, 0),
    "getMinutes": _field(4, 0),
    "getSeconds": _field(5, 0),
    "getDayOfWeek": _field(6, 0),
    "getDayOfYear": _field(7, -1),
    "getMilliseconds": _milliseconds,
}
_DURATION_FIELDS: dict[str, Callable[[Duration], int]] = {
    "getHours": _whole(3600 * 1_000_000_000),
    "getMinutes": _whole(60 * 1_000_000_000),
    "getSeconds": _whole(1_000_000_000),
    "getMilliseconds": lambda d: abs(d.nanos) // 1_000_000 * (1 if d.nanos >= 0 else -1),
}

TIME_OVERLOADS: tuple[Overload, ...] = (
    *(overload("timestamp", None, (t,), TIMESTAMP, _timestamp) for t in (TIMESTAMP, STRING, INT)),
    *(overload("duration", None, (t,), DURATION, _duration) for t in (DURATION, STRING)),
    *(overload(name, TIMESTAMP, (), INT, get) for name, get in _TIMESTAMP_FIELDS.items()),
    *(overload(name, TIMESTAMP, (STRING,), INT, get) for name, get in _TIMESTAMP_FIELDS.items()),
    *(overload(name, DURATION, (), INT, get) for name, get in _DURATION_FIELDS.items()),
)

_CONVERSIONS: dict[str, Callable[[object], object]] = {
    "timestamp": _timestamp,
    "duration": _duration,
}


def check_time_literals(root: Node, expression: str) -> None:
    """Refuse `timestamp(<literal>)` / `duration(<literal>)` whose literal does not convert, as
    Kubernetes' `ValidateTimestampLiterals` / `ValidateDurationLiterals` do."""
    for node in walk(root):
        if not (
            isinstance(node, Call)
            and node.target is None
            and node.function in _CONVERSIONS
            and len(node.args) == 1
            and isinstance(node.args[0], Literal)
        ):
            continue
        value = node.args[0].value
        if not isinstance(value, str | int) or isinstance(value, bool):
            continue  # a type error, already reported by the checker
        try:
            _CONVERSIONS[node.function](value)
        except CelEvaluationError as exc:
            raise CelCompileError(
                f"invalid {node.function} argument ({exc})",
                expression=expression,
                line=node.args[0].line,
                column=node.args[0].column,
            ) from exc
