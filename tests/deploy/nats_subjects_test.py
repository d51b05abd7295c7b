"""NATS subject matching used by the permission checks."""

from __future__ import annotations

import pytest

from deploy.nats_subjects import allows, matches


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        pytest.param("gpudra.inventory.*", "gpudra.inventory.node-1", True, id="star-one-token"),
        pytest.param("gpudra.inventory.*", "gpudra.inventory.a.b", False, id="star-not-two"),
        pytest.param("gpudra.inventory.*", "gpudra.inventory", False, id="star-not-zero"),
        pytest.param("gpudra.claims.>", "gpudra.claims.ns.name", True, id="gt-many"),
        pytest.param("gpudra.claims.>", "gpudra.claims", False, id="gt-needs-one"),
        pytest.param("gpudra.drift", "gpudra.drift", True, id="literal"),
        pytest.param("gpudra.drift", "gpudra.drifts", False, id="literal-differs"),
        pytest.param("$KV.gpudra-slices.>", "$KV.gpudra-slices.node-1", True, id="kv"),
        pytest.param("$JS.API.STREAM.INFO.X", "$JS.API.STREAM.INFO.Y", False, id="other-stream"),
        pytest.param(">", "anything.at.all", True, id="full-wildcard"),
    ],
)
def test_matches(pattern: str, subject: str, expected: bool) -> None:
    assert matches(pattern, subject) is expected


@pytest.mark.parametrize(
    ("pattern", "subject"),
    [
        pytest.param("a.>.b", "a.x.b", id="gt-not-last"),
        pytest.param("a..b", "a.x.b", id="empty-pattern-token"),
        pytest.param("a.b", "a.*", id="wildcard-subject"),
        pytest.param("a.b", "", id="empty-subject"),
    ],
)
def test_invalid_input_is_an_error(pattern: str, subject: str) -> None:
    with pytest.raises(ValueError, match="invalid|last|wildcards"):
        matches(pattern, subject)


def test_allows_any_pattern() -> None:
    assert allows(["a.b", "c.*"], "c.d")
    assert not allows(["a.b", "c.*"], "d.c")
    assert not allows([], "a")
