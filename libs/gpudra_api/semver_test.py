"""Table tests for strict semantic versions (blang/semver `Parse`, SemVer 2.0.0 precedence)."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudra_api.errors import ApiError
from gpudra_api.semver import Semver, SemverParseError


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        pytest.param("1.2.3", (1, 2, 3, (), ()), id="plain"),
        pytest.param("0.0.0", (0, 0, 0, (), ()), id="zeros"),
        pytest.param("550.54.15", (550, 54, 15, (), ()), id="driver-version"),
        pytest.param("1.2.3-alpha.1", (1, 2, 3, ("alpha", 1), ()), id="prerelease"),
        pytest.param("1.2.3-alpha-1", (1, 2, 3, ("alpha-1",), ()), id="hyphen-in-prerelease"),
        pytest.param("1.2.3+build.5", (1, 2, 3, (), ("build", "5")), id="build"),
        pytest.param("1.2.3-rc.1+b-7", (1, 2, 3, ("rc", 1), ("b-7",)), id="prerelease-and-build"),
        pytest.param("1.2.3+001", (1, 2, 3, (), ("001",)), id="build-leading-zero-ok"),
        pytest.param("1.2.3-0a", (1, 2, 3, ("0a",), ()), id="alnum-leading-zero-ok"),
        pytest.param("18446744073709551615.0.0", (2**64 - 1, 0, 0, (), ()), id="uint64-max"),
    ],
)
def test_parse(text: str, parts: tuple[object, ...]) -> None:
    v = Semver.parse(text)
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == parts
    assert str(v) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1.2", id="two-parts"),
        pytest.param("v1.2.3", id="v-prefix"),
        pytest.param("01.2.3", id="leading-zero-major"),
        pytest.param("1.02.3", id="leading-zero-minor"),
        pytest.param("1.2.03", id="leading-zero-patch"),
        pytest.param("1.2.3-01", id="leading-zero-numeric-prerelease"),
        pytest.param("1.2.3-", id="empty-prerelease"),
        pytest.param("1.2.3-a..b", id="empty-prerelease-ident"),
        pytest.param("1.2.3+", id="empty-build"),
        pytest.param("1.2.3+a_b", id="underscore-build"),
        pytest.param("1.2.3.4", id="four-parts"),
        pytest.param(" 1.2.3", id="leading-space"),
        pytest.param("1.2.x", id="letter-patch"),
        pytest.param("18446744073709551616.0.0", id="uint64-overflow"),
        pytest.param("-1.2.3", id="negative"),
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(SemverParseError) as info:
        Semver.parse(text)
    assert isinstance(info.value, ApiError)


def test_precedence_follows_semver_spec() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
        "10.0.0",
    ]
    versions = [Semver.parse(s) for s in ordered]
    for lower, higher in itertools.pairwise(versions):
        assert lower < higher
        assert lower.compare(higher) == -1
        assert higher.compare(lower) == 1


def test_build_metadata_is_ignored_by_equality() -> None:
    a, b = Semver.parse("1.2.3+a"), Semver.parse("1.2.3+b")
    assert a == b
    assert hash(a) == hash(b)
    assert a.compare(b) == 0
    assert str(a) != str(b)


@given(
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.lists(
        st.one_of(st.integers(0, 99), st.from_regex(r"[a-z][a-z0-9-]{0,4}", fullmatch=True)),
        max_size=3,
    ),
)
def test_round_trip(major: int, minor: int, patch: int, pre: list[int | str]) -> None:
    text = f"{major}.{minor}.{patch}" + ("-" + ".".join(map(str, pre)) if pre else "")
    assert str(Semver.parse(text)) == text


@given(st.text(alphabet="0123456789.-+abv_ ", max_size=14))
def test_parse_never_crashes(text: str) -> None:
    with contextlib.suppress(SemverParseError):
        Semver.parse(text)
