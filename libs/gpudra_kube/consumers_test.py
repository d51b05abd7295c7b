"""Consumers (`reservedFor`) on both backends: the fake API validates every write against the
v1.34 schema, the KV backend keeps the same rules."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_kube.claims import DELETE_PROTECTION_FINALIZER, ClaimStore
from gpudra_kube.consumers import (
    MAX_CONSUMERS,
    Outcome,
    pod_consumer_uids,
    pod_reference,
    reserve,
    unreserve,
    with_consumer,
    without_consumer,
)
from gpudra_kube.errors import NotFoundError
from gpudra_kube.store import Store
from gpudra_testing.claims import ALLOCATION, claim


def pod(name: str, uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"}}


async def allocated(claims: ClaimStore, name: str = "c1") -> str:
    created = await claims.create_claim(claim(name))
    uid = str(created["metadata"]["uid"])
    await claims.write_allocation("default", name, uid=uid, allocation=ALLOCATION)
    return uid


async def test_reserve_is_idempotent_and_needs_an_allocation(store: Store) -> None:
    claims = ClaimStore(store)
    await claims.create_claim(claim("pending"))
    assert await reserve(claims, "default", "pending", pod("p1")) is Outcome.NOT_ALLOCATED
    assert await reserve(claims, "default", "missing", pod("p1")) is Outcome.GONE
    await allocated(claims)
    assert await reserve(claims, "default", "c1", pod("p1")) is Outcome.RESERVED
    assert await reserve(claims, "default", "c1", pod("p1")) is Outcome.ALREADY
    assert await reserve(claims, "default", "c1", pod("p2")) is Outcome.RESERVED
    current = await claims.get_claim("default", "c1")
    assert current["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p1", "uid": "uid-p1"},
        {"resource": "pods", "name": "p2", "uid": "uid-p2"},
    ]
    assert pod_consumer_uids(current) == {"uid-p1", "uid-p2"}


async def test_last_consumer_leaving_releases_the_claim(store: Store) -> None:
    claims = ClaimStore(store)
    await allocated(claims)
    for name in ("p1", "p2"):
        await reserve(claims, "default", "c1", pod(name))
    assert await unreserve(claims, "default", "c1", "uid-nobody") is Outcome.ABSENT
    assert await unreserve(claims, "default", "c1", "uid-p1") is Outcome.REMOVED
    current = await claims.get_claim("default", "c1")
    assert current["status"]["allocation"] == ALLOCATION
    assert await unreserve(claims, "default", "c1", "uid-p2") is Outcome.RELEASED
    current = await claims.get_claim("default", "c1")
    assert "allocation" not in (current.get("status") or {})
    assert "reservedFor" not in (current.get("status") or {})
    assert DELETE_PROTECTION_FINALIZER not in (current["metadata"].get("finalizers") or [])
    assert await unreserve(claims, "default", "c1", "uid-p2") is Outcome.ABSENT


async def test_release_of_a_claim_being_deleted_lets_it_go(store: Store) -> None:
    claims = ClaimStore(store)
    await allocated(claims)
    await reserve(claims, "default", "c1", pod("p1"))
    await claims.delete_claim("default", "c1")  # finalizer: only marked
    assert await reserve(claims, "default", "c1", pod("p2")) is Outcome.NOT_ALLOCATED
    assert await unreserve(claims, "default", "c1", "uid-p1") is Outcome.RELEASED
    with pytest.raises(NotFoundError):
        await claims.get_claim("default", "c1")
    assert await unreserve(claims, "default", "c1", "uid-p1") is Outcome.GONE


def test_never_more_than_the_api_limit() -> None:
    full = claim()
    full["metadata"]["uid"] = "u"
    full["status"] = {
        "allocation": ALLOCATION,
        "reservedFor": [pod_reference(pod(f"p{i}")) for i in range(MAX_CONSUMERS)],
    }
    assert with_consumer(full, pod_reference(pod("one-more"))) == (Outcome.FULL, None)
    assert with_consumer(full, pod_reference(pod("p7")))[0] is Outcome.ALREADY


@pytest.mark.parametrize(
    ("reserved", "uid", "outcome", "left"),
    [
        pytest.param([], "a", Outcome.ABSENT, None, id="no-consumers"),
        pytest.param(["a", "b"], "a", Outcome.REMOVED, ["b"], id="one-of-two"),
        pytest.param(["a"], "a", Outcome.RELEASED, [], id="last-one"),
    ],
)
def test_without_consumer(
    reserved: list[str], uid: str, outcome: Outcome, left: list[str] | None
) -> None:
    c: dict[str, Any] = {
        "metadata": {"name": "c"},
        "status": {
            "allocation": ALLOCATION,
            "reservedFor": [{"resource": "pods", "name": u, "uid": u} for u in reserved],
        },
    }
    got, new = without_consumer(c, uid)
    assert got is outcome
    if left is None:
        assert new is None
    else:
        assert new is not None
        assert [r["uid"] for r in new["status"].get("reservedFor", [])] == left
        assert ("allocation" in new["status"]) == bool(left)


@pytest.mark.parametrize(
    "status",
    [
        pytest.param([], id="status-a-list"),
        pytest.param("allocated", id="status-a-string"),
        pytest.param({"allocation": ALLOCATION, "reservedFor": 7}, id="reserved-for-a-number"),
        pytest.param({"allocation": ALLOCATION, "reservedFor": {"a": 1}}, id="reserved-for-a-map"),
    ],
)
def test_a_status_of_the_wrong_shape_reads_as_no_consumers(status: Any) -> None:
    """The standalone store checks no schema: a claim whose status (or reservedFor) is not what
    the API allows reads as having no consumers, never as an error that ends the loop reading
    every claim."""
    c: dict[str, Any] = {"metadata": {"name": "c", "uid": "u"}, "status": status}
    assert pod_consumer_uids(c) == set()
    assert without_consumer(c, "a") == (Outcome.ABSENT, None)
    outcome, new = with_consumer(c, pod_reference(pod("p")))
    if isinstance(status, dict):
        assert outcome is Outcome.RESERVED
        assert new is not None
        assert new["status"]["reservedFor"] == [pod_reference(pod("p"))]
    else:
        assert (outcome, new) == (Outcome.NOT_ALLOCATED, None)
