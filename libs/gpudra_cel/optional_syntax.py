"""CEL's optional syntax (`a.?b`, `m[?k]`, `[?x, y]`, `{?k: v}`) on top of cel-python's grammar.

cel-python's Lark grammar has no optional syntax, so before parsing, each `?` that marks an
optional selection, index, list element or map entry is blanked out (replaced by one space, so
every line:column stays where it was) and remembered by the position of the token that follows
it. The syntax builder then asks `Marks.take(line, column)` at exactly the four places where CEL
allows the mark; a mark nobody took is a syntax error at the `?`.

The scan uses the grammar's own lexer, so a `?` inside a string, a bytes literal or a `//`
comment is never touched. A `?` is a mark only right after `.`, `[`, `{` or `,`, where a
conditional's `?` can never stand (it always follows a complete operand); every other `?` is
left for the grammar. If the lexer fails part way (an unterminated string), the marks found
before that point are still applied and the parser reports the real error.
"""

from __future__ import annotations

import lark

from gpudra_cel.errors import CelCompileError

__all__ = ["Marks", "blank_marks"]

_MARK_AFTER = frozenset({".", "[", "{", ","})


class Marks:
    """The optional marks of one expression, keyed by the position of the token after each."""

    __slots__ = ("_pending", "_taken")

    def __init__(self, pending: dict[tuple[int, int], tuple[int, int]] | None = None) -> None:
        self._pending = pending or {}
        self._taken: set[tuple[int, int]] = set()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(self, line: int, column: int) -> bool:
        """Was the token at line:column preceded by an optional mark? Asking again is fine (the
        builder may look at a subtree twice)."""
        key = (line, column)
        if key not in self._pending:
            return False
        self._taken.add(key)
        return True

    def check_all_taken(self, expression: str) -> None:
        """Raise a syntax error at the first `?` that stands where CEL allows no optional."""
        left = [mark for key, mark in self._pending.items() if key not in self._taken]
        if left:
            line, column = min(left)
            raise CelCompileError(
                "syntax error: unexpected '?' (optional syntax is allowed only in `a.?b`, "
                "`m[?k]`, `[?x]` and `{?k: v}`)",
                expression=expression,
                line=line,
                column=column,
            )


def blank_marks(expression: str, lexer: lark.Lark) -> tuple[str, Marks]:
    """The expression with every optional mark blanked, and the marks (`lexer`: the parser of
    `grammar`, whose terminals decide what is a string or a comment)."""
    if "?" not in expression:  # the common case costs one scan of the text
        return expression, Marks()
    pending: dict[tuple[int, int], tuple[int, int]] = {}
    offsets: list[int] = []
    previous: lark.Token | None = None
    mark: lark.Token | None = None
    try:
        for token in lexer.lex(expression):
            if mark is not None:
                pending[(token.line or 0, token.column or 0)] = (mark.line or 0, mark.column or 0)
                mark = None
            if token.value == "?" and previous is not None and previous.value in _MARK_AFTER:
                mark = token
                offsets.append(token.start_pos or 0)
            previous = token
    except lark.exceptions.LarkError:
        pass  # the parser will report it, at its own position
    if mark is not None:  # `a.?` at the very end: leave it for the grammar to reject
        offsets.pop()
    if not offsets:
        return expression, Marks()
    chars = list(expression)
    for offset in offsets:
        chars[offset] = " "
    return "".join(chars), Marks(pending)
