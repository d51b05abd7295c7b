"""RE2 regular expressions for CEL, fast.

Every pattern is validated by RE2 (google-re2), so exactly RE2's syntax is accepted. google-re2's
Python binding costs ~5 µs per search, so a pattern built only from a conservative subset whose
meaning is the same in RE2 and in Python's `re` (literals, `.`, classes of literals and ranges,
groups, alternation, greedy/lazy quantifiers, `^`, `$`, and `\\d \\w \\s` spelled out as their
ASCII RE2 classes) is translated and run by `re` instead; anything else (flags, Unicode classes,
`\\b`, ...) runs on RE2 itself. `$` becomes `\\Z`, since Python's `$` also matches before a final
newline and RE2's does not.

Python's `re` backtracks and RE2 does not: `(a+)+$` takes exponential time in `re`, `a*a*b` a
polynomial whose degree grows with the pattern, while RE2 stays linear in the text. So `re` gets
a pattern only when no quantifier but `?` applies to a group, and then only texts short enough
that the pattern's worst case (its bounded choices times, per start position, the text length
once for each unbounded quantifier) stays within `_STEP_BUDGET` (`fast_text_limit`); longer texts
go to RE2. Device attribute strings (at most 64 bytes) take the fast path for ordinary patterns,
and no pattern and text can make a search run away.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

from gpudra_cel.errors import CelEvaluationError

__all__ = [
    "Pattern",
    "compile_regex",
    "fast_text_limit",
    "find_all",
    "literal_alternatives",
    "translate",
]

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported to the caller, not to stderr
_CLASS_ESCAPES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_PUNCT = frozenset("\\.-[]()*+?|^${}/")
_LITERAL_EXTRA = frozenset(" -_:/,=@#%'\"<>~!&;")
_QUANT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}\??")
# The most backtracking one search by Python's `re` may do: paths explored times pattern length
_STEP_BUDGET = 4_000_000


class Pattern(Protocol):
    def search(self, text: str, pos: int = 0) -> Any: ...

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
    limit = None if translated is None else fast_text_limit(pattern)
    if translated is None or limit is None:
        return compiled  # type: ignore[no-any-return]
    try:
        fast = re.compile(translated)
    except re.error:  # RE2 accepts a few things `re` refuses (`^*`): keep RE2 for those
        return compiled  # type: ignore[no-any-return]
    return _ShortTextsFast(fast, compiled, limit)


class _ShortTextsFast:
    """Python's `re` for texts of up to `limit` code points, RE2 for longer ones."""

    __slots__ = ("_fast", "_limit", "_re2")

    def __init__(self, fast: re.Pattern[str], slow: Pattern, limit: int) -> None:
        self._fast, self._re2, self._limit = fast, slow, limit

    def search(self, text: str, pos: int = 0) -> Any:
        if len(text) <= self._limit:
            return self._fast.search(text, pos)
        return self._re2.search(text, pos)

    def finditer(self, text: str) -> Any:
        if len(text) <= self._limit:
            return self._fast.finditer(text)
        return self._re2.finditer(text)

    def go_matches(self, text: str) -> Iterator[Any]:
        if len(text) > self._limit:
            return iter(self._re2.finditer(text))
        return _resuming_searches(self._fast, text)


def find_all(pattern: str, text: str, limit: int = -1) -> tuple[str, ...]:
    """Go's `Regexp.FindAllString(text, limit)`, which Kubernetes' `findAll` is: successive
    non-overlapping matches, where an empty match is left out when it starts where the previous
    match ended and the search resumes one character after an empty match; at most `limit`
    matches (all when negative). Python's `re.finditer` differs on both counts (`"baaa"` with
    `a*` gives `["", "aaa", ""]` there, `["", "aaa"]` in Go)."""
    if limit == 0:
        return ()
    compiled = compile_regex(pattern)
    if isinstance(compiled, _ShortTextsFast):
        matches = compiled.go_matches(text)
    else:  # the RE2 binding resumes as Go does (it may repeat an empty match, left out below)
        matches = iter(compiled.finditer(text))
    found: list[str] = []
    previous_end = -1
    for match in matches:
        start, end = match.span()
        if start != end or start != previous_end:
            found.append(str(match.group(0)))
            if len(found) == limit:
                break
        previous_end = end
    return tuple(found)


def _resuming_searches(fast: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The searches Go's FindAll makes: from where a match ended, or one character on after an
    empty match (`re.finditer` instead retries there for a non-empty match)."""
    pos = 0
    while pos <= len(text):
        match = fast.search(text, pos)
        if match is None:
            return
        yield match
        end = match.end()
        pos = end + 1 if end == pos else end


def fast_text_limit(pattern: str) -> int | None:
    """The longest text Python's `re` may search with `pattern` (one `translate` accepts) while
    its worst case stays within `_STEP_BUDGET`; None when it must not search at all (a
    quantified group, whose backtracking is exponential, or too many bounded choices)."""
    shape = _backtracking_shape(pattern)
    if shape is None:
        return None
    paths, unbounded = shape
    allowed = _STEP_BUDGET // (paths * max(len(pattern), 1))
    # the largest n with (n + 1) ** (unbounded + 1) <= allowed: n + 1 start positions, each
    # trying up to n + 1 repetition counts for every unbounded quantifier
    power = unbounded + 1
    count = int(allowed ** (1 / power))  # n + 1, corrected for floating-point rounding below
    while count > 0 and count**power > allowed:
        count -= 1
    while (count + 1) ** power <= allowed:
        count += 1
    return count - 1 if count >= 1 else None


def _backtracking_shape(pattern: str) -> tuple[int, int] | None:
    """(the product of the pattern's bounded choices: alternatives, `?`, `{m,n}`; the number of
    unbounded quantifiers), or None when a quantifier other than `?` applies to a group. The
    pattern is one `translate` accepts (escapes are two characters, classes well formed)."""
    paths, unbounded = 1, 0
    branches = [1]  # alternatives of each open group, the whole pattern first
    previous = ""  # what a quantifier here would apply to: "atom", "group", "quantifier" or ""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i, previous = i + 2, "atom"
        elif c == "[":
            end = _class(pattern, i, [])
            if end is None:
                return None
            i, previous = end, "atom"
        elif c == "(":
            branches.append(1)
            i, previous = i + (3 if pattern.startswith("(?:", i) else 1), ""
        elif c == ")":
            if len(branches) < 2:
                return None
            paths *= branches.pop()
            i, previous = i + 1, "group"
        elif c == "|":
            branches[-1] += 1
            i, previous = i + 1, ""
        elif c == "?" and previous == "quantifier":  # `*?`, `+?`, `??`: lazy, no new choice
            i, previous = i + 1, ""
        elif c in "*+?{":
            if c == "{":
                m = _QUANT.match(pattern, i)
                if m is None:
                    return None
                low = int(m.group(1))
                high = low if m.group(2) is None else int(m.group(3)) if m.group(3) else None
                i = m.end()  # includes a lazy `?`
            else:
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                i += 1
            if previous == "group" and (low, high) != (0, 1):
                return None
            if high is None:
                unbounded += 1
            else:
                paths *= max(high - low + 1, 1)
            previous = "quantifier"
        else:
            i, previous = i + 1, "atom"
    if len(branches) != 1:
        return None
    return paths * branches[0], unbounded


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
