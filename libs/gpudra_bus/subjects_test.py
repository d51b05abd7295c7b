from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra_bus import subjects
from gpudra_bus.errors import InvalidSubjectError
from gpudra_bus.subjects import Kind, Subject


@pytest.mark.parametrize(
    ("built", "expected", "parsed"),
    [
        pytest.param(
            subjects.inventory("node-1"),
            "gpudra.inventory.node-1",
            Subject(Kind.INVENTORY, node="node-1"),
            id="inventory",
        ),
        pytest.param(
            subjects.health("ip-10-0-0-1.ec2.internal"),
            "gpudra.health.ip-10-0-0-1_ec2_internal",
            Subject(Kind.HEALTH, node="ip-10-0-0-1.ec2.internal"),
            id="health-dotted-node",
        ),
        pytest.param(
            subjects.utilization("n0"),
            "gpudra.utilization.n0",
            Subject(Kind.UTILIZATION, node="n0"),
            id="utilization",
        ),
        pytest.param(
            subjects.prepared("n0"),
            "gpudra.prepared.n0",
            Subject(Kind.PREPARED, node="n0"),
            id="prepared",
        ),
        pytest.param(
            subjects.claims("default", "train.job-0"),
            "gpudra.claims.default.train_job-0",
            Subject(Kind.CLAIMS, namespace="default", name="train.job-0"),
            id="claims",
        ),
        pytest.param(
            subjects.allocations("ml", "c1"),
            "gpudra.allocations.ml.c1",
            Subject(Kind.ALLOCATIONS, namespace="ml", name="c1"),
            id="allocations",
        ),
        pytest.param(subjects.DRIFT, "gpudra.drift", Subject(Kind.DRIFT), id="drift"),
        pytest.param(
            subjects.deadletter("claims"),
            "gpudra.deadletter.claims",
            Subject(Kind.DEADLETTER, dead_kind=Kind.CLAIMS),
            id="deadletter",
        ),
    ],
)
def test_build_and_parse_round_trip(built: str, expected: str, parsed: Subject) -> None:
    assert built == expected
    assert subjects.parse(built) == parsed
    assert str(parsed) == built


@pytest.mark.parametrize(
    ("build", "args"),
    [
        pytest.param(subjects.inventory, ("",), id="empty-node"),
        pytest.param(subjects.inventory, ("Node1",), id="uppercase-node"),
        pytest.param(subjects.inventory, ("node_1",), id="underscore-node"),
        pytest.param(subjects.inventory, ("node.*",), id="wildcard-node"),
        pytest.param(subjects.inventory, ("node>",), id="gt-node"),
        pytest.param(subjects.health, ("a b",), id="space-node"),
        pytest.param(subjects.health, ("-a",), id="leading-dash"),
        pytest.param(subjects.health, ("a" * 254,), id="too-long-node"),
        pytest.param(subjects.claims, ("a.b", "c"), id="dotted-namespace"),
        pytest.param(subjects.claims, ("a" * 64, "c"), id="too-long-namespace"),
        pytest.param(subjects.claims, ("ns", "a..b"), id="empty-label-in-name"),
        pytest.param(subjects.allocations, ("ns", ""), id="empty-name"),
        pytest.param(subjects.deadletter, ("nope",), id="unknown-dead-kind"),
        pytest.param(subjects.deadletter, ("deadletter",), id="dead-of-dead"),
        pytest.param(subjects.claim_key, ("NS", "x"), id="key-bad-namespace"),
    ],
)
def test_builders_reject_invalid_tokens(build: Callable[..., str], args: tuple[str, ...]) -> None:
    with pytest.raises(InvalidSubjectError):
        build(*args)


@pytest.mark.parametrize(
    "subject",
    [
        pytest.param("", id="empty"),
        pytest.param("nats.inventory.n1", id="wrong-root"),
        pytest.param("gpudra", id="root-only"),
        pytest.param("gpudra.bogus.n1", id="unknown-kind"),
        pytest.param("gpudra.inventory", id="missing-node"),
        pytest.param("gpudra.inventory.a.b", id="extra-token"),
        pytest.param("gpudra.inventory.*", id="wildcard"),
        pytest.param("gpudra.claims.ns", id="claims-missing-name"),
        pytest.param("gpudra.claims.ns.a.b", id="claims-extra-token"),
        pytest.param("gpudra.drift.x", id="drift-extra"),
        pytest.param("gpudra.deadletter.deadletter", id="dead-of-dead"),
        pytest.param("gpudra.deadletter.zzz", id="dead-unknown"),
        pytest.param("gpudra.health.a__b", id="double-underscore"),
        pytest.param("gpudra.health.A", id="uppercase"),
    ],
)
def test_parse_rejects_what_builders_cannot_produce(subject: str) -> None:
    with pytest.raises(InvalidSubjectError):
        subjects.parse(subject)


@pytest.mark.parametrize(
    ("kind", "wildcard"),
    [
        pytest.param(Kind.INVENTORY, "gpudra.inventory.*", id="inventory"),
        pytest.param(Kind.CLAIMS, "gpudra.claims.>", id="claims"),
        pytest.param(Kind.ALLOCATIONS, "gpudra.allocations.>", id="allocations"),
        pytest.param(Kind.DRIFT, "gpudra.drift", id="drift"),
    ],
)
def test_all_of(kind: Kind, wildcard: str) -> None:
    assert subjects.all_of(kind) == wildcard


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        pytest.param("default", "c1", id="plain"),
        pytest.param("ml", "job.v2.claim-0", id="dotted-name"),
    ],
)
def test_claim_key_round_trip(namespace: str, name: str) -> None:
    key = subjects.claim_key(namespace, name)
    assert key == f"{namespace}.{name}"
    assert subjects.parse_claim_key(key) == (namespace, name)


def test_parse_claim_key_rejects_keys_without_namespace() -> None:
    with pytest.raises(InvalidSubjectError):
        subjects.parse_claim_key("nodots")


_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
_SUBDOMAIN = st.lists(_LABEL, min_size=1, max_size=4).map(".".join)


@settings(max_examples=60, deadline=None)
@given(node=_SUBDOMAIN, namespace=_LABEL, name=_SUBDOMAIN)
def test_round_trip_for_any_valid_names(node: str, namespace: str, name: str) -> None:
    assert subjects.parse(subjects.inventory(node)).node == node
    parsed = subjects.parse(subjects.claims(namespace, name))
    assert (parsed.namespace, parsed.name) == (namespace, name)
    assert subjects.parse_claim_key(subjects.claim_key(namespace, name)) == (namespace, name)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=60) | st.from_regex(r"gpudra\.[a-z.*>_-]{0,30}", fullmatch=True))
def test_parse_never_crashes(text: str) -> None:
    try:
        parsed = subjects.parse(text)
    except InvalidSubjectError:
        return
    assert str(parsed) == text  # whatever parses is exactly what a builder would produce
