"""Semantic versions as Kubernetes reads them (blang/semver's strict `Parse`, SemVer 2.0.0).

What this module promises:

- `Semver.parse` accepts exactly `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`: numeric parts without
  leading zeros and within uint64, dot-separated prerelease identifiers of `[0-9A-Za-z-]` (numeric
  ones without leading zeros), non-empty build identifiers of `[0-9A-Za-z-]`. No `v` prefix, no
  missing parts, no surrounding space; anything else raises `SemverParseError`.
- Ordering is SemVer precedence: numeric parts, then a version without prerelease is higher,
  then identifiers left to right (numeric < alphanumeric, numbers numerically, text by ASCII),
  then more identifiers is higher. Build metadata is ignored by `==`, `<` and `hash` (as
  blang's `Equals`/`Compare`, which the CEL semver library uses), but kept by `str()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudra_api.errors import ApiError

__all__ = ["Semver", "SemverParseError"]

_UINT64_MAX = (1 << 64) - 1
_MAX_TEXT = 1024
_IDENT = re.compile(r"[0-9A-Za-z-]+")
_DIGITS = re.compile(r"[0-9]+")

PrereleaseIdent = int | str


class SemverParseError(ApiError, ValueError):
    """A string is not a strict semantic version."""


def _number(part: str, what: str, text: str) -> int:
    if not _DIGITS.fullmatch(part):
        raise SemverParseError(f"version {text!r}: {what} {part!r} is not a number")
    if len(part) > 1 and part[0] == "0":
        raise SemverParseError(f"version {text!r}: {what} {part!r} has a leading zero")
    value = int(part)
    if value > _UINT64_MAX:
        raise SemverParseError(f"version {text!r}: {what} {part!r} is out of range")
    return value


def _prerelease_ident(part: str, text: str) -> PrereleaseIdent:
    if not _IDENT.fullmatch(part):
        raise SemverParseError(f"version {text!r}: prerelease identifier {part!r} is invalid")
    if _DIGITS.fullmatch(part):
        return _number(part, "prerelease identifier", text)
    return part


def _ident_key(ident: PrereleaseIdent) -> tuple[int, int, str]:
    # Numeric identifiers sort before alphanumeric ones.
    if isinstance(ident, int):
        return (0, ident, "")
    return (1, 0, ident)


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A strict semantic version. Compare with `<`/`==` or `compare`."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[PrereleaseIdent, ...] = ()
    build: tuple[str, ...] = field(default=())
    # The precedence key, computed once: comparisons are hot in selector evaluation.
    _order: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", self._key())

    @classmethod
    def parse(cls, text: str) -> Semver:
        if not isinstance(text, str):
            raise SemverParseError(f"version must be a string, not {type(text).__name__}")
        if not text:
            raise SemverParseError("version is empty")
        if len(text) > _MAX_TEXT:
            raise SemverParseError(f"version is longer than {_MAX_TEXT} characters")
        parts = text.split(".", 2)
        if len(parts) != 3:
            raise SemverParseError(f"version {text!r} does not have MAJOR.MINOR.PATCH")
        major = _number(parts[0], "major", text)
        minor = _number(parts[1], "minor", text)
        rest = parts[2]
        build: tuple[str, ...] = ()
        if "+" in rest:
            rest, build_text = rest.split("+", 1)
            build = tuple(build_text.split("."))
            for ident in build:
                if not _IDENT.fullmatch(ident):
                    raise SemverParseError(
                        f"version {text!r}: build identifier {ident!r} is invalid"
                    )
        prerelease: tuple[PrereleaseIdent, ...] = ()
        if "-" in rest:
            rest, pre_text = rest.split("-", 1)
            prerelease = tuple(_prerelease_ident(p, text) for p in pre_text.split("."))
        patch = _number(rest, "patch", text)
        return cls(major, minor, patch, prerelease, build)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release (no prerelease) sorts after all of its prereleases.
        return (
            self.major,
            self.minor,
            self.patch,
            0 if self.prerelease else 1,
            tuple(_ident_key(i) for i in self.prerelease),
        )

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by precedence (build metadata ignored)."""
        a, b = self._order, other._order
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._order == other._order

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._order < other._order

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._order <= other._order

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._order > other._order

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._order >= other._order

    def __hash__(self) -> int:
        return hash(self._order)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(i) for i in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"
