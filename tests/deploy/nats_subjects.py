"""NATS subject matching, as nats-server applies it to permissions.

A pattern is dot-separated tokens; `*` matches exactly one token, `>` (last token only) matches
one or more. `allows(patterns, subject)` is true when any pattern matches. Invalid patterns or
subjects (empty tokens, `>` not last) raise ValueError rather than silently matching nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


def _tokens(text: str, *, pattern: bool) -> list[str]:
    tokens = text.split(".")
    if not text or any(not t or " " in t for t in tokens):
        raise ValueError(f"invalid NATS {'pattern' if pattern else 'subject'}: {text!r}")
    if pattern and ">" in tokens[:-1]:
        raise ValueError(f"'>' must be the last token: {text!r}")
    if not pattern and any(t in ("*", ">") for t in tokens):
        raise ValueError(f"a subject cannot contain wildcards: {text!r}")
    return tokens


def matches(pattern: str, subject: str) -> bool:
    """Whether `subject` (no wildcards) matches `pattern`."""
    p = _tokens(pattern, pattern=True)
    s = _tokens(subject, pattern=False)
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def allows(patterns: Iterable[str], subject: str) -> bool:
    """Whether any of `patterns` matches `subject`."""
    return any(matches(p, subject) for p in patterns)
