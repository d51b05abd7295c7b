"""cel-python's CEL grammar (`celpy/cel.lark`), loaded once into gpudra's own Lark parser.

Same grammar and options as cel-python's `CELParser`, with one difference: the lexer callback
that turns the identifiers `true`/`false` into boolean literals keeps their line:column (cel-python
drops it), so every token of the tree has a position. `optional_syntax` relies on that to find
the token after each optional mark, and error messages can point at a boolean literal. A syntax
error is `GrammarError` with the line:column of the offending token.
"""

from __future__ import annotations

import importlib.resources
import re
import threading

import lark

__all__ = ["GrammarError", "lexer", "parse_tree"]

_LOCK = threading.Lock()
_PARSER: lark.Lark | None = None


class GrammarError(Exception):
    """The text is not CEL; `reason` says why, `line`/`column` (1-based) where, 0 if unknown."""

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.column = column


def _boolean_literals(token: lark.Token) -> lark.Token:
    if token.value in ("true", "false"):
        return lark.Token.new_borrow_pos("BOOL_LIT", token.value, token)
    return token


def lexer() -> lark.Lark:
    """The Lark instance (built on first use; thread-safe)."""
    global _PARSER
    if _PARSER is None:
        with _LOCK:
            if _PARSER is None:
                text = importlib.resources.files("celpy").joinpath("cel.lark").read_text()
                _PARSER = lark.Lark(
                    text,
                    parser="lalr",
                    start="expr",
                    g_regex_flags=re.M,
                    lexer_callbacks={"IDENT": _boolean_literals},
                    propagate_positions=True,
                    maybe_placeholders=False,
                    priority="invert",
                )
    return _PARSER


def parse_tree(text: str) -> lark.Tree[lark.Token]:
    """Parse CEL text into Lark's tree, or raise `GrammarError`."""
    try:
        return lexer().parse(text)
    except lark.exceptions.UnexpectedToken as exc:
        token = exc.token
        reason = (
            "syntax error: unexpected end of expression"
            if token.type == "$END"
            else f"syntax error: unexpected {token.value!r}"
        )
        raise GrammarError(reason, exc.line or 0, exc.column or 0) from exc
    except lark.exceptions.UnexpectedCharacters as exc:
        reason = f"syntax error: unexpected character {exc.char!r}"
        raise GrammarError(reason, exc.line or 0, exc.column or 0) from exc
    except lark.exceptions.LarkError as exc:
        raise GrammarError(f"syntax error: {exc}".splitlines()[0], 0, 0) from exc
