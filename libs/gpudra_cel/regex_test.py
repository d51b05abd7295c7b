"""The RE2 -> Python `re` translation must not change what a pattern matches."""

from __future__ import annotations

import pytest
import re2  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_cel.errors import CelEvaluationError
from gpudra_cel.regex import (
    compile_regex,
    fast_text_limit,
    find_all,
    literal_alternatives,
    translate,
)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False

_PIECES = st.sampled_from(
    [
        "a",
        "b",
        "H",
        "1",
        "0",
        "-",
        " ",
        ".",
        "*",
        "+",
        "?",
        "*?",
        "|",
        "(",
        ")",
        "(?:",
        "[",
        "]",
        "[^",
        "a-z",
        "^",
        "$",
        "{2}",
        "{1,3}",
        "\\d",
        "\\w",
        "\\s",
        "\\.",
        "é",
        ":",
        "[0-9]",
        "[a-c]+",
        "\\-",
        ",",
    ]
)
_TEXT = st.text(alphabet="abH10- .\n\té:,zA_", max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=8).map("".join), st.lists(_TEXT, max_size=6))
def test_translation_matches_like_re2(pattern: str, texts: list[str]) -> None:
    translated = translate(pattern)
    if translated is None:
        return
    try:
        reference = re2.compile(pattern, _OPTIONS)
    except Exception:  # not RE2 syntax: compile_regex refuses it before translating
        return
    ours = compile_regex(pattern)
    for text in [*texts, pattern]:
        expected, got = reference.search(text), ours.search(text)
        assert (expected is None) == (got is None), (pattern, translated, text)
        if expected is not None and got is not None:
            assert expected.group(0) == got.group(0), (pattern, translated, text)


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        pytest.param("H100|H200", "H100|H200", id="alternation"),
        pytest.param("a$", "a\\Z", id="dollar-is-end-of-text"),
        pytest.param("\\d+", "[0-9]+", id="ascii-digit"),
        pytest.param("(?i)abc", None, id="flags-stay-on-re2"),
        pytest.param("\\bword", None, id="word-boundary-stays-on-re2"),
        pytest.param("[[:alpha:]]", None, id="posix-class-stays-on-re2"),
        pytest.param("\\pL", None, id="unicode-class-stays-on-re2"),
    ],
)
def test_translate(pattern: str, translated: str | None) -> None:
    assert translate(pattern) == translated


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        pytest.param("H100|H200", ("H100", "H200"), id="literals"),
        pytest.param("H100", ("H100",), id="one"),
        pytest.param("H1.0", None, id="dot"),
        pytest.param("a|", None, id="empty-branch"),
    ],
)
def test_literal_alternatives(pattern: str, expected: tuple[str, ...] | None) -> None:
    assert literal_alternatives(pattern) == expected


def test_newline_before_end() -> None:
    # Python's `$` would match before a trailing newline; RE2's (and ours) does not.
    assert compile_regex("a$").search("a\n") is None
    assert compile_regex("a$").search("a") is not None


@pytest.mark.parametrize("pattern", ["[", "a**", "(a)\\1", "a{1001}", "\\"])
def test_invalid_patterns_are_cel_errors(pattern: str) -> None:
    with pytest.raises(CelEvaluationError, match="invalid regular expression"):
        compile_regex(pattern)


# Patterns that make a backtracking engine (Python's `re`) take exponential or high-polynomial
# time on a text that almost matches; RE2, which Kubernetes uses, is linear in the text.
_HOSTILE = [
    pytest.param("(a+)+$", "a" * 64 + "!", id="nested-plus"),
    pytest.param("(a|aa)+$", "a" * 64 + "!", id="quantified-alternation"),
    pytest.param("(a|b)*c", "ab" * 200_000, id="quantified-group-long-text"),
    pytest.param("a*a*a*a*a*a*a*a*a*a*b", "a" * 64, id="adjacent-stars"),
    pytest.param("a?" * 40 + "a" * 40, "a" * 40, id="optional-ladder"),
    pytest.param("(?:a|a)(?:a|a)" * 15 + "b", "a" * 64, id="alternation-product"),
    pytest.param(".*.*=.*", "x" * 300_000, id="dot-stars-long-text"),
    pytest.param("[0-9]+x", "1" * 300_000, id="one-plus-long-text"),
]


@pytest.mark.parametrize(("pattern", "text"), _HOSTILE)
def test_hostile_patterns_answer_as_re2(pattern: str, text: str) -> None:
    # Before the fix these were handed to Python's `re` and did not finish.
    reference = re2.compile(pattern, _OPTIONS).search(text)
    got = compile_regex(pattern).search(text)
    assert (got is None) == (reference is None)


@pytest.mark.parametrize(
    ("pattern", "fast_for_64"),
    [
        pytest.param("^NVIDIA (A|H)100", True, id="anchored-alternation"),
        pytest.param("^gpu-[0-9]+$", True, id="one-plus"),
        pytest.param(".*H100.*", True, id="two-stars"),
        pytest.param("(H100)?-x", True, id="optional-group"),
        pytest.param("(a+)+$", False, id="quantified-group"),
        pytest.param("(ab){2}", False, id="counted-group"),
        pytest.param("a*a*a*a*a*a*a*a*a*a*b", False, id="many-stars"),
        pytest.param("a{1,1000}a{1,1000}a{1,1000}", False, id="wide-counted"),
    ],
)
def test_fast_text_limit(pattern: str, fast_for_64: bool) -> None:
    # Python's `re` runs a pattern only on texts short enough that its worst case stays small;
    # device attribute strings (at most 64 bytes) get the fast engine for ordinary patterns.
    limit = fast_text_limit(pattern)
    assert (limit is not None and limit >= 64) == fast_for_64


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        pytest.param("[0-9]+", "ab12cd345", ("12", "345"), id="plain"),
        pytest.param("a*", "baaa", ("", "aaa"), id="empty-after-match-left-out"),
        pytest.param("b*", "abc", ("", "b", ""), id="empties"),
        pytest.param("a??", "a", ("", ""), id="resume-after-empty"),
        pytest.param("a*", "é" + "a" * 5000, ("", "a" * 5000), id="long-text-on-re2"),
        pytest.param("x*", "a" * 3000, ("",) * 3001, id="long-text-empties"),
        pytest.param("(?i)A", "aAb", ("a", "A"), id="re2-only-pattern"),
    ],
)
def test_find_all_is_go_find_all_string(pattern: str, text: str, expected: tuple[str, ...]) -> None:
    assert find_all(pattern, text) == expected
    assert find_all(pattern, text, 2) == expected[:2]
    assert find_all(pattern, text, 0) == ()
