"""RE2 regular expressions for CEL, fast.

Every pattern is validated by RE2 (google-re2), so exactly RE2's syntax is accepted. google-re2's
Python binding costs ~5 µs per search, so a pattern built only from a conservative subset whose
meaning is the same in RE2 and in Python's `re` (literals, `.`, classes of literals and ranges,
groups, alternation, greedy/lazy quantifiers, `^`, `$`, and `\\d \\w \\s` spelled out as their
ASCII RE2 classes) is translated and run by `re` instead; anything else (flags, Unicode classes,
`\\b`, ...) runs on RE2 itself. `$` becomes `\\Z`, since Python's `$` also matches before a final
newline and RE2's does not.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

from gpudra_cel.errors import CelEvaluationError

__all__ = ["Pattern", "compile_regex", "literal_alternatives", "translate"]

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported to the caller, not to stderr
_CLASS_ESCAPES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_PUNCT = frozenset("\\.-[]()*+?|^${}/")
_LITERAL_EXTRA = frozenset(" -_:/,=@#%'\"<>~!&;")
_QUANT = re.compile(r"\{[0-9]+(,[0-9]*)?\}\??")


class Pattern(Protocol):
    def search(self, text: str) -> Any: ...

    def finditer(self, text: str) -> Any: ...


@functools.lru_cache(maxsize=512)
def compile_regex(pattern: str) -> Pattern:
    """An RE2-validated pattern object with `search`/`finditer` (cached)."""
    try:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
    except Exception as exc:  # re2 raises its own error type (and TypeError) for bad patterns
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise CelEvaluationError(f"invalid regular expression {pattern!r}: {detail}") from exc
    translated = translate(pattern)
    if translated is None:
        return compiled  # type: ignore[no-any-return]
    try:
        return re.compile(translated)
    except re.error:  # RE2 accepts a few things `re` refuses (`^*`): keep RE2 for those
        return compiled  # type: ignore[no-any-return]


def literal_alternatives(pattern: str) -> tuple[str, ...] | None:
    """`"H100|H200"` -> `("H100", "H200")` when the pattern is only literal alternatives (then a
    search is the same as a substring test); otherwise None."""
    parts = tuple(pattern.split("|"))
    for part in parts:
        if not part or not all(c.isalnum() or c in _LITERAL_EXTRA for c in part):
            return None
    return parts


def translate(pattern: str) -> str | None:
    """The same pattern for Python's `re`, or None when the pattern leaves the safe subset."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            if e in _CLASS_ESCAPES:
                out.append(f"[{_CLASS_ESCAPES[e]}]")
            elif e in _PUNCT:
                out.append("\\" + e)
            else:
                return None
            i += 2
        elif c == "[":
            end = _class(pattern, i, out)
            if end is None:
                return None
            i = end
        elif c == "(":
            if pattern.startswith("(?:", i):
                out.append("(?:")
                i += 3
            elif pattern.startswith("(?", i):
                return None  # flags and named groups: leave them to RE2
            else:
                out.append("(")
                i += 1
        elif c == "{":
            m = _QUANT.match(pattern, i)
            if m is None:
                return None
            out.append(m.group(0))
            i = m.end()
        elif c == "$":
            out.append("\\Z")
            i += 1
        elif c in ".*+?|)^" or c.isalnum() or c in _LITERAL_EXTRA or ord(c) > 127:
            out.append(re.escape(c) if c in _LITERAL_EXTRA or ord(c) > 127 else c)
            i += 1
        else:
            return None
    return "".join(out)


def _class(pattern: str, start: int, out: list[str]) -> int | None:
    """Translate `[...]` at `start`; return the index after it, or None."""
    i, n = start + 1, len(pattern)
    parts = ["["]
    if i < n and pattern[i] == "^":
        parts.append("^")
        i += 1
    first = True
    while i < n:
        c = pattern[i]
        if c == "]" and not first:
            parts.append("]")
            out.append("".join(parts))
            return i + 1
        first = False
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            if e in _CLASS_ESCAPES:
                parts.append(_CLASS_ESCAPES[e])
            elif e in _PUNCT:
                parts.append("\\" + e)
            else:
                return None
            i += 2
        elif c == "[" or c == "]":
            return None  # POSIX classes like [[:alpha:]] and a leading ']' are RE2-specific
        elif c.isalnum() or c in "-_.:/ ,=@#%'\"<>~!&;*+?|(){}$^" or ord(c) > 127:
            parts.append(c if c.isalnum() or c == "-" else re.escape(c))
            i += 1
        else:
            return None
    return None
