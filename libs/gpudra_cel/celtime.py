"""CEL's `google.protobuf.Timestamp` and `google.protobuf.Duration` values, as cel-go (Go's
`time` package) reads, prints and combines them.

What this module promises:

- `Timestamp`: an instant with nanosecond precision, within cel-go's range (0001-01-01T00:00:00Z
  to 9999-12-31T23:59:59.999999999Z), and the UTC offset it was written with (`string()` prints
  it, as Go's `Format(time.RFC3339Nano)` does; an offset of zero is `Z`, as on a host whose local
  zone is UTC). Equality and ordering compare instants only.
- `Duration`: a signed count of nanoseconds within int64 (Go's `time.Duration`).
- `parse_timestamp` is Go's `time.Parse(time.RFC3339, s)`: `YYYY-MM-DDTHH:MM:SS`, an optional
  fraction (`.` or `,`, digits past the ninth ignored), then `Z` or `±HH:MM`; a one-digit hour
  and offsets up to 24:60 are accepted, as Go's general parser accepts them.
- `parse_duration` is Go's `time.ParseDuration`, fractions computed in float64 as Go does.
- Arithmetic follows cel-go's overflow checks: "timestamp overflow" outside the range, "integer
  overflow" where nanoseconds or seconds leave int64.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from gpudra_cel.errors import CelEvaluationError

__all__ = [
    "MAX_UNIX_SECONDS",
    "MIN_UNIX_SECONDS",
    "Duration",
    "Timestamp",
    "civil",
    "parse_duration",
    "parse_timestamp",
    "timestamp_from_unix",
]

MIN_UNIX_SECONDS: Final = -62135596800  # 0001-01-01T00:00:00Z
MAX_UNIX_SECONDS: Final = 253402300799  # 9999-12-31T23:59:59Z
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_SECOND: Final = 1_000_000_000
_TIMESTAMP_TEXT = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
    r"(?:[.,]([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})"
)
_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": _SECOND,
    "m": 60 * _SECOND,
    "h": 3600 * _SECOND,
}


def _checked(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CelEvaluationError("integer overflow")
    return value


@dataclass(frozen=True, slots=True, order=False)
class Duration:
    """`google.protobuf.Duration` (Go's `time.Duration`): `nanos` within int64."""

    nanos: int

    def __lt__(self, other: Duration) -> bool:
        return self.nanos < other.nanos

    def __gt__(self, other: Duration) -> bool:
        return self.nanos > other.nanos

    def __str__(self) -> str:
        """cel-go's `string(d)`: the seconds as Go's `FormatFloat(d.Seconds(), 'f', -1, 64)`,
        then `s`."""
        text = format(Decimal(repr(self.seconds_float())), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text + "s"

    def seconds_float(self) -> float:
        whole, rest = _go_divmod(self.nanos, _SECOND)
        return float(whole) + float(rest) / 1e9

    def add(self, other: Duration) -> Duration:
        return Duration(_checked(self.nanos + other.nanos))

    def subtract(self, other: Duration) -> Duration:
        return Duration(_checked(self.nanos - other.nanos))

    def negate(self) -> Duration:
        return Duration(_checked(-self.nanos))


@dataclass(frozen=True, slots=True, eq=False)
class Timestamp:
    """`google.protobuf.Timestamp`: `seconds` since the Unix epoch (floored), `nanos` in
    [0, 1e9), and the UTC `offset` (seconds east) it is shown in."""

    seconds: int
    nanos: int = 0
    offset: int = field(default=0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            return NotImplemented
        return self.seconds == other.seconds and self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash((self.seconds, self.nanos))

    def __lt__(self, other: Timestamp) -> bool:
        return (self.seconds, self.nanos) < (other.seconds, other.nanos)

    def __gt__(self, other: Timestamp) -> bool:
        return (self.seconds, self.nanos) > (other.seconds, other.nanos)

    def __str__(self) -> str:
        """Go's `Format(time.RFC3339Nano)` in the timestamp's own offset."""
        year, month, day, hour, minute, second = civil(self.seconds + self.offset)[:6]
        text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        if self.nanos:
            text += "." + f"{self.nanos:09d}".rstrip("0")
        if self.offset == 0:
            return text + "Z"
        sign = "-" if self.offset < 0 else "+"
        hours, minutes = divmod(abs(self.offset) // 60, 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"

    def add(self, duration: Duration) -> Timestamp:
        """cel-go's `addTimeDurationChecked`: seconds and nanoseconds apart, then the range."""
        whole, rest = _go_divmod(duration.nanos, _SECOND)
        seconds = _checked(self.seconds + whole)
        nanos = self.nanos + rest
        if nanos < 0:
            seconds, nanos = _checked(seconds - 1), nanos + _SECOND
        elif nanos >= _SECOND:
            seconds, nanos = _checked(seconds + 1), nanos - _SECOND
        if not MIN_UNIX_SECONDS <= seconds <= MAX_UNIX_SECONDS:
            raise CelEvaluationError("timestamp overflow")
        return Timestamp(seconds, nanos, self.offset)

    def subtract(self, other: Timestamp) -> Duration:
        seconds = _checked(self.seconds - other.seconds)
        return Duration(_checked(_checked(seconds * _SECOND) + self.nanos - other.nanos))


def _go_divmod(a: int, b: int) -> tuple[int, int]:
    """Go's `a / b` and `a % b` (truncated toward zero)."""
    quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    return quotient, a - quotient * b


def timestamp_from_unix(seconds: int) -> Timestamp:
    """cel-go's `timestamp(int)`: Unix seconds, UTC."""
    if not MIN_UNIX_SECONDS <= seconds <= MAX_UNIX_SECONDS:
        raise CelEvaluationError("timestamp overflow")
    return Timestamp(seconds)


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil(local_seconds: int) -> tuple[int, int, int, int, int, int, int, int]:
    """Year, month (1-12), day (1-31), hour, minute, second, weekday (0 = Sunday) and day of
    the year (1-366) of a count of seconds since 1970-01-01T00:00:00 (any year, 0 included)."""
    days, rest = divmod(local_seconds, 86400)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    weekday = (days + 4) % 7  # 1970-01-01 was a Thursday
    year_day = days - _days_from_civil(year, 1, 1) + 1
    return year, month, day, hour, minute, second, weekday, year_day


def parse_timestamp(text: str) -> Timestamp:
    """Go's `time.Parse(time.RFC3339, text)`, then cel-go's range check."""
    found = _TIMESTAMP_TEXT.fullmatch(text)
    if found is None:
        raise _conversion_error("google.protobuf.Timestamp")
    year, month, day, hour, minute, second = (int(g) for g in found.groups()[:6])
    fraction, zone = found.group(7), found.group(8)
    if not (
        1 <= month <= 12
        and 1 <= day <= _days_in(month, year)
        and hour < 24
        and minute < 60
        and second < 60
    ):
        raise _conversion_error("google.protobuf.Timestamp")
    offset = 0
    if zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_hours > 24 or zone_minutes > 60:  # Go's general parser allows 24:60
            raise _conversion_error("google.protobuf.Timestamp")
        offset = (zone_hours * 60 + zone_minutes) * 60 * (-1 if zone[0] == "-" else 1)
    nanos = int(fraction[:9].ljust(9, "0")) if fraction else 0
    days = _days_from_civil(year, month, day)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    if not MIN_UNIX_SECONDS <= seconds <= MAX_UNIX_SECONDS:
        raise CelEvaluationError("timestamp overflow")
    return Timestamp(seconds, nanos, offset)


def parse_duration(text: str) -> Duration:
    """Go's `time.ParseDuration`: `[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`, or `0`."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return Duration(0)
    if not rest:
        raise _conversion_error("google.protobuf.Duration")
    total = 0
    while rest:
        if not (rest[0] == "." or "0" <= rest[0] <= "9"):
            raise _conversion_error("google.protobuf.Duration")
        digits = _leading_digits(rest)
        whole_text, rest = rest[:digits], rest[digits:]
        # Go's leadingInt fails past 2^63 (checked on the digits first: Python's int() of
        # thousands of digits is refused)
        if len(whole_text.lstrip("0")) > 19:
            raise _conversion_error("google.protobuf.Duration")
        whole = int(whole_text) if whole_text else 0
        if whole > 1 << 63:
            raise _conversion_error("google.protobuf.Duration")
        fraction, scale, post = 0, 1.0, False
        if rest[:1] == ".":
            rest = rest[1:]
            digits = _leading_digits(rest)
            fraction, scale = _leading_fraction(rest[:digits])
            rest, post = rest[digits:], digits > 0
        if not whole_text and not post:
            raise _conversion_error("google.protobuf.Duration")
        end = 0
        while end < len(rest) and not (rest[end] == "." or "0" <= rest[end] <= "9"):
            end += 1
        unit = _UNITS.get(rest[:end])
        if unit is None:  # a missing or unknown unit
            raise _conversion_error("google.protobuf.Duration")
        rest = rest[end:]
        if whole > (1 << 63) // unit:
            raise _conversion_error("google.protobuf.Duration")
        value = whole * unit
        if fraction > 0:
            # float64, as Go: nanosecond-accurate for fractions of hours
            value += int(float(fraction) * (float(unit) / scale))
            if value > 1 << 63:
                raise _conversion_error("google.protobuf.Duration")
        total += value
        if total > 1 << 63:
            raise _conversion_error("google.protobuf.Duration")
    if negative:
        return Duration(-total)
    if total > _INT64_MAX:
        raise _conversion_error("google.protobuf.Duration")
    return Duration(total)


def _leading_digits(text: str) -> int:
    end = 0
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    return end


def _leading_fraction(digits: str) -> tuple[int, float]:
    """Go's `leadingFraction`: the digits' value and 10**count, precision dropped once more
    digits would overflow."""
    value, scale = 0, 1.0
    for digit in digits:
        if value > _INT64_MAX // 10:
            break
        candidate = value * 10 + int(digit)
        if candidate > 1 << 63:
            break
        value, scale = candidate, scale * 10
    return value, scale


def _conversion_error(target: str) -> CelEvaluationError:
    return CelEvaluationError(f"type conversion error from 'string' to '{target}'")
