"""String functions: CEL's built-ins (`contains`, `startsWith`, `endsWith`, `matches`) and the
cel-go `strings` extension Kubernetes enables (`charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`,
`upperAscii`, `replace`, `split`, `substring`, `trim`, `join`, and from its version 1 `format` and
`strings.quote`, see `lib_format`), plus Kubernetes' regex library (`find`, `findAll`).

Indices count Unicode code points, as cel-go does. Regular expressions are RE2 (google-re2), and
`matches` is a search (an unanchored match anywhere), as in CEL. Bad indices are errors.
"""

from __future__ import annotations

import unicodedata

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.functions import Overload, overload
from gpudra_cel.lib_format import format_string, quote
from gpudra_cel.regex import compile_regex, find_all
from gpudra_cel.types import BOOL, DYN, INT, STRING, list_of

__all__ = ["STRING_OVERLOADS"]

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0")


def _matches(text: str, pattern: str) -> bool:
    return compile_regex(pattern).search(text) is not None


def _find(text: str, pattern: str) -> str:
    match = compile_regex(pattern).search(text)
    return "" if match is None else str(match.group(0))


def _find_all(text: str, pattern: str, limit: int = -1) -> tuple[str, ...]:
    return find_all(pattern, text, limit)


def _char_at(text: str, index: int) -> str:
    if index < 0 or index > len(text):
        raise CelEvaluationError(f"index out of range: {index}")
    return text[index : index + 1]


def _index_of(text: str, sub: str, offset: int = 0) -> int:
    # cel-go since 0.22 (Kubernetes 1.32): a negative offset is an error, an offset at or past
    # the end finds nothing; the empty string is found at the offset
    if sub == "":
        return offset
    if offset < 0:
        raise CelEvaluationError(f"index out of range: {offset}")
    return -1 if offset >= len(text) else text.find(sub, offset)


def _last_index_of(text: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        return text.rfind(sub)
    if sub == "":
        return offset
    if offset < 0:
        raise CelEvaluationError(f"index out of range: {offset}")
    return -1 if offset >= len(text) else text.rfind(sub, 0, offset + len(sub))


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    if count < 0:
        return text.replace(old, new)
    return text.replace(old, new, count)


def _split(text: str, sep: str, limit: int = -1) -> tuple[str, ...]:
    if limit == 0:
        return ()
    if sep == "":
        chars = list(text)
        if 0 < limit < len(chars):
            return (*chars[: limit - 1], "".join(chars[limit - 1 :]))
        return tuple(chars)
    if limit < 0:
        return tuple(text.split(sep))
    return tuple(text.split(sep, limit - 1))


def _substring(text: str, start: int, end: int | None = None) -> str:
    # cel-go's order of checks: the range (two arguments only), then start, then end
    if end is not None and start > end:
        raise CelEvaluationError(f"invalid substring range. start: {start}, end: {end}")
    stop = len(text) if end is None else end
    for index in (start, stop):
        if index < 0 or index > len(text):
            raise CelEvaluationError(f"index out of range: {index}")
    return text[start:stop]


def _is_go_space(char: str) -> bool:
    return char in _GO_SPACE or unicodedata.category(char) == "Zs" or char in "\u2028\u2029"


def _trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_go_space(text[start]):
        start += 1
    while end > start and _is_go_space(text[end - 1]):
        end -= 1
    return text[start:end]


def _join(items: tuple[object, ...], sep: str = "") -> str:
    for item in items:
        if not isinstance(item, str):  # cel-go (strings v2) names the first element at fault
            shown = (
                "null" if item is None else str(item).lower() if isinstance(item, bool) else item
            )
            raise CelEvaluationError(f"join: invalid input: {shown}")
    return sep.join(items)  # type: ignore[arg-type]


STRING_OVERLOADS: tuple[Overload, ...] = (
    overload("contains", STRING, (STRING,), BOOL, lambda s, x: x in s, cost="linear"),
    overload("startsWith", STRING, (STRING,), BOOL, str.startswith, cost="linear"),
    overload("endsWith", STRING, (STRING,), BOOL, str.endswith, cost="linear"),
    overload("matches", STRING, (STRING,), BOOL, _matches, cost="regex"),
    overload("matches", None, (STRING, STRING), BOOL, _matches, cost="regex"),
    overload("find", STRING, (STRING,), STRING, _find, cost="regex"),
    overload("findAll", STRING, (STRING,), list_of(STRING), _find_all, cost="regex"),
    overload("findAll", STRING, (STRING, INT), list_of(STRING), _find_all, cost="regex"),
    overload("charAt", STRING, (INT,), STRING, _char_at, cost="linear"),
    overload("indexOf", STRING, (STRING,), INT, _index_of, cost="linear"),
    overload("indexOf", STRING, (STRING, INT), INT, _index_of, cost="linear"),
    overload("lastIndexOf", STRING, (STRING,), INT, _last_index_of, cost="linear"),
    overload("lastIndexOf", STRING, (STRING, INT), INT, _last_index_of, cost="linear"),
    overload("lowerAscii", STRING, (), STRING, lambda s: s.translate(_ASCII_LOWER), "linear"),
    overload("upperAscii", STRING, (), STRING, lambda s: s.translate(_ASCII_UPPER), "linear"),
    overload("replace", STRING, (STRING, STRING), STRING, _replace, cost="linear"),
    overload("replace", STRING, (STRING, STRING, INT), STRING, _replace, cost="linear"),
    overload("split", STRING, (STRING,), list_of(STRING), _split, cost="linear"),
    overload("split", STRING, (STRING, INT), list_of(STRING), _split, cost="linear"),
    overload("substring", STRING, (INT,), STRING, _substring, cost="linear"),
    overload("substring", STRING, (INT, INT), STRING, _substring, cost="linear"),
    overload("trim", STRING, (), STRING, _trim, cost="linear"),
    overload("join", list_of(STRING), (), STRING, _join, cost="linear"),
    overload("join", list_of(STRING), (STRING,), STRING, _join, cost="linear"),
    overload("format", STRING, (list_of(DYN),), STRING, format_string, cost="linear"),
    overload("strings.quote", None, (STRING,), STRING, quote, cost="linear"),
)
