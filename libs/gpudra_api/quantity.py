"""Kubernetes `resource.Quantity`: parsing, exact arithmetic and the canonical string form.

What this module promises (the parts of apimachinery's `resource.Quantity` that DRA relies on):

- `Quantity.parse` accepts exactly `<sign?><digits>[.<digits>]<suffix>` where the suffix is a
  binary SI suffix (`Ki`..`Ei`), a decimal SI suffix (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`,
  `E`) or a decimal exponent (`e3`, `E-2`, `e+6`); anything else raises `QuantityParseError`.
  A bare sign or `.` without any digit is rejected (Kubernetes reads those as zero; we treat them
  as the typos they are).
- Values are exact (`fractions.Fraction`). As in Kubernetes, a non-zero value finer than 1n is
  rounded *up* (away from zero) to the next nano unit, and a binary-SI or exponent-form value
  above 2^63-1 is capped there.
- Equality, hashing and ordering use the value only; the format (binary SI, decimal SI, decimal
  exponent) is remembered for `str()` and follows Kubernetes' rules through `+`/`-`.
- `str()` is Kubernetes' canonical form: `1024Mi` -> `1Gi`, `1000m` -> `1`, `0.5` -> `500m`,
  `1.5Gi` -> `1536Mi`, `512Ki`... binary values below 1024 or non-integral fall back to
  decimal SI exactly as `CanonicalizeBytes` does.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

from gpudra_api.errors import ApiError

__all__ = ["Quantity", "QuantityFormat", "QuantityParseError"]

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_NANO = Fraction(1, 10**9)
_MAX_TEXT = 1024  # far above any real quantity; bounds the work a hostile string can cause
_MAX_EXPONENT = 10_000  # |e| beyond this is nonsense input, not a quantity

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_BY_EXP = {exp: suffix for suffix, exp in _BINARY.items()}

_SYNTAX = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_EXPONENT = re.compile(r"[eE]([-+]?[0-9]+)")


class QuantityParseError(ApiError, ValueError):
    """A string is not a Kubernetes quantity."""


class QuantityFormat(enum.Enum):
    """How a quantity was written; decides its canonical string (apimachinery's `Format`)."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


def _parse_suffix(suffix: str, text: str) -> tuple[int, int, QuantityFormat]:
    """Return (base, exponent, format) of a suffix: value = number * base**exponent."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], QuantityFormat.DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], QuantityFormat.BINARY_SI
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        raise QuantityParseError(f"quantity {text!r}: unknown suffix {suffix!r}")
    exponent = int(match.group(1))
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityParseError(f"quantity {text!r}: exponent {exponent} is out of range")
    return 10, exponent, QuantityFormat.DECIMAL_EXPONENT


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity. Build with `Quantity.parse`, `Quantity.of` or arithmetic."""

    value: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI
    # The value in nano units when that is exact (always, for parsed quantities): integer
    # comparisons are several times faster than Fraction ones, and comparisons are hot.
    _nanos: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        scaled = self.value * 1_000_000_000
        object.__setattr__(self, "_nanos", scaled.numerator if scaled.denominator == 1 else None)

    @classmethod
    def parse(cls, text: str | int) -> Quantity:
        """Parse Kubernetes quantity syntax (an `int` is taken as a plain decimal number)."""
        if isinstance(text, bool) or not isinstance(text, str | int):
            raise QuantityParseError(f"quantity must be a string or int, not {type(text).__name__}")
        if isinstance(text, int):
            return cls.of(text)
        if not text:
            raise QuantityParseError("quantity is empty")
        if len(text) > _MAX_TEXT:
            raise QuantityParseError(f"quantity is longer than {_MAX_TEXT} characters")
        match = _SYNTAX.fullmatch(text)
        if match is None:
            raise QuantityParseError(
                f"quantity {text!r} does not match '<number><suffix>' (e.g. '40Gi', '500m', '1e3')"
            )
        sign, whole, frac, suffix = match.groups()
        frac = frac or ""
        if not whole and not frac:
            raise QuantityParseError(f"quantity {text!r} has no digits")
        base, exponent, fmt = _parse_suffix(suffix, text)
        magnitude = Fraction(
            int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac)
        )
        magnitude *= Fraction(base) ** exponent
        if magnitude and (magnitude / _NANO).denominator != 1:
            magnitude = Fraction(math.ceil(magnitude / _NANO)) * _NANO
        if fmt is not QuantityFormat.DECIMAL_SI and magnitude > _INT64_MAX:
            magnitude = Fraction(_INT64_MAX)
        return cls(-magnitude if sign == "-" else magnitude, fmt)

    @classmethod
    def of(cls, value: int | Fraction, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """A quantity with an exact value (no rounding: the caller owns its precision)."""
        return cls(Fraction(value), fmt)

    # ---------------------------------------------------------------- value queries
    @property
    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.value > 0) - (self.value < 0)

    @property
    def is_zero(self) -> bool:
        return self.value == 0

    def is_integer(self) -> bool:
        """True when `as_int()` would succeed (integral and within int64)."""
        return self.as_int() is not None

    def as_int(self) -> int | None:
        """Kubernetes' `AsInt64`: the value as an int, or None when it has a fractional part or
        does not fit into a signed 64-bit integer."""
        if self.value.denominator != 1:
            return None
        number = self.value.numerator
        if number < _INT64_MIN or number > _INT64_MAX:
            return None
        return number

    def as_approximate_float(self) -> float:
        """The nearest float (`AsApproximateFloat64`); +-inf when beyond float range."""
        try:
            return float(self.value)
        except OverflowError:
            return math.inf if self.value > 0 else -math.inf

    # ---------------------------------------------------------------- arithmetic
    def _result_format(self, other: Quantity) -> QuantityFormat:
        # apimachinery: a zero receiver takes the other operand's format.
        return other.format if self.is_zero else self.format

    def __add__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.value + other.value, self._result_format(other))

    def __sub__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.value - other.value, self._result_format(other))

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    # ---------------------------------------------------------------- comparison
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.compare(other) < 0

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.compare(other) <= 0

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.compare(other) > 0

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.compare(other) >= 0

    def __hash__(self) -> int:
        return hash(self.value)

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1 as `Quantity.Cmp`."""
        a, b = self._nanos, other._nanos
        if a is None or b is None:
            return (self.value > other.value) - (self.value < other.value)
        return (a > b) - (a < b)

    # ---------------------------------------------------------------- canonical form
    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __str__(self) -> str:
        if self.value == 0:
            return "0"
        fmt = self.format
        if fmt is QuantityFormat.BINARY_SI and (
            -1024 < self.value < 1024 or self.value.denominator != 1
        ):
            fmt = QuantityFormat.DECIMAL_SI  # as Kubernetes: never round a binary value
        sign = "-" if self.value < 0 else ""
        if fmt is QuantityFormat.BINARY_SI:
            mantissa, exponent = abs(self.value.numerator), 0
            while exponent < 60 and mantissa % 1024 == 0:
                mantissa //= 1024
                exponent += 10
            return f"{sign}{mantissa}{_BINARY_BY_EXP.get(exponent, '')}"
        mantissa, exponent = _decimal_mantissa(abs(self.value))
        if exponent == 0:
            return f"{sign}{mantissa}"
        if fmt is QuantityFormat.DECIMAL_SI and exponent in _DECIMAL_BY_EXP:
            return f"{sign}{mantissa}{_DECIMAL_BY_EXP[exponent]}"
        return f"{sign}{mantissa}e{exponent}"


def _decimal_mantissa(magnitude: Fraction) -> tuple[int, int]:
    """Write a positive value as mantissa * 10**exponent with exponent a multiple of 3 and the
    mantissa as small as possible (apimachinery's `AsCanonicalBytes`).

    Values that are not a finite decimal (only reachable through `Quantity.of`) are rounded up
    to nano precision first, the same rule parsing applies.
    """
    exponent = 0
    while magnitude.denominator != 1:
        if exponent <= -9:
            magnitude = Fraction(math.ceil(magnitude))
            break
        magnitude *= 10
        exponent -= 1
    mantissa = magnitude.numerator
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's % floors, so this always moves the exponent down
    return mantissa * 10**shift, exponent - shift
