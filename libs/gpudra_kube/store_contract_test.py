"""The `Store` contract, run against both backends (`store` fixture: the fake API server, NATS KV)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from gpudra_kube.api_backend_test import resource_slice
from gpudra_kube.errors import AlreadyExistsError, ConflictError, InvalidObjectError, NotFoundError
from gpudra_kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra_kube.store import EventType, Store, WatchEvent
from gpudra_testing.claims import ALLOCATION, claim


async def test_create_get_list_delete(store: Store) -> None:
    created = await store.create(RESOURCE_CLAIMS, claim("a"))
    await store.create(RESOURCE_CLAIMS, claim("b", namespace="other"))
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["generation"] == 1
    assert meta["resourceVersion"]
    assert await store.get(RESOURCE_CLAIMS, "a", "default") == created
    assert [
        o["metadata"]["name"] for o in (await store.list(RESOURCE_CLAIMS, "default")).items
    ] == ["a"]
    assert (await store.list(RESOURCE_CLAIMS, "nobody-here")).items == []
    everything = await store.list(RESOURCE_CLAIMS)
    assert sorted(o["metadata"]["name"] for o in everything.items) == ["a", "b"]
    assert all(o["kind"] == "ResourceClaim" for o in everything.items)
    await store.delete(RESOURCE_CLAIMS, "a", "default")
    with pytest.raises(NotFoundError):
        await store.get(RESOURCE_CLAIMS, "a", "default")
    with pytest.raises(NotFoundError):
        await store.delete(RESOURCE_CLAIMS, "a", "default")
    # A deleted name can be used again.
    again = await store.create(RESOURCE_CLAIMS, claim("a"))
    assert again["metadata"]["uid"] != meta["uid"]


async def test_empty_list(store: Store) -> None:
    listed = await store.list(RESOURCE_SLICES)
    assert listed.items == []
    assert listed.resource_version != ""


async def test_create_existing_fails(store: Store) -> None:
    await store.create(RESOURCE_CLAIMS, claim())
    with pytest.raises(AlreadyExistsError):
        await store.create(RESOURCE_CLAIMS, claim())


async def test_create_clears_status_and_server_fields(store: Store) -> None:
    c = claim()
    c["status"] = {"allocation": ALLOCATION}
    c["metadata"]["uid"] = "mine"
    created = await store.create(RESOURCE_CLAIMS, c)
    assert "status" not in created or not created["status"]
    assert created["metadata"]["uid"] != "mine"


async def test_optimistic_concurrency_and_status_subresource(store: Store) -> None:
    created = await store.create(RESOURCE_CLAIMS, claim())
    allocated = copy.deepcopy(created)
    allocated["status"] = {"allocation": ALLOCATION}
    written = await store.replace_status(RESOURCE_CLAIMS, allocated)
    assert written["status"] == {"allocation": ALLOCATION}
    assert int(written["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(ConflictError):
        await store.replace_status(RESOURCE_CLAIMS, created)  # stale: must not clear allocation
    with pytest.raises(ConflictError):
        await store.replace(RESOURCE_CLAIMS, created)
    current = await store.get(RESOURCE_CLAIMS, "c1", "default")
    current["metadata"]["labels"] = {"a": "b"}
    current.pop("status")
    updated = await store.replace(RESOURCE_CLAIMS, current)
    assert updated["status"] == {"allocation": ALLOCATION}  # main resource keeps status
    assert updated["metadata"]["generation"] == 1  # spec unchanged
    spec_changed = copy.deepcopy(updated)
    spec_changed["spec"]["devices"]["requests"][0]["name"] = "gpu2"
    assert (await store.replace(RESOURCE_CLAIMS, spec_changed))["metadata"]["generation"] == 2


async def test_concurrent_writers_one_wins(store: Store) -> None:
    created = await store.create(RESOURCE_CLAIMS, claim())

    async def write(label: str) -> str:
        obj = copy.deepcopy(created)
        obj["metadata"]["labels"] = {"writer": label}
        try:
            await store.replace(RESOURCE_CLAIMS, obj)
            return "ok"
        except ConflictError:
            return "conflict"

    results = await asyncio.gather(*(write(str(i)) for i in range(5)))
    assert sorted(results) == ["conflict"] * 4 + ["ok"]


async def test_finalizer_delays_delete(store: Store) -> None:
    c = claim()
    c["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    await store.create(RESOURCE_CLAIMS, c)
    await store.delete(RESOURCE_CLAIMS, "c1", "default")
    marked = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert marked["metadata"]["deletionTimestamp"]
    marked["metadata"]["finalizers"] = []
    await store.replace(RESOURCE_CLAIMS, marked)
    with pytest.raises(NotFoundError):
        await store.get(RESOURCE_CLAIMS, "c1", "default")


async def test_cluster_scoped_slices(store: Store) -> None:
    created = await store.create(RESOURCE_SLICES, resource_slice("n1.example.com-gpu"))
    created["spec"]["pool"]["generation"] = 2
    await store.replace(RESOURCE_SLICES, created)
    got = await store.get(RESOURCE_SLICES, "n1.example.com-gpu")
    assert got["spec"]["pool"]["generation"] == 2
    assert [o["metadata"]["name"] for o in (await store.list(RESOURCE_SLICES)).items] == [
        "n1.example.com-gpu"
    ]


async def _events_until_deleted(store: Store, version: str, name: str) -> list[WatchEvent]:
    out: list[WatchEvent] = []

    async def run() -> None:
        async for ev in store.watch(
            RESOURCE_CLAIMS, "default", resource_version=version, timeout=10
        ):
            if ev.type is EventType.BOOKMARK:
                continue
            out.append(ev)
            if ev.type is EventType.DELETED and ev.object["metadata"]["name"] == name:
                return

    await asyncio.wait_for(run(), 5)
    return out


async def test_watch_from_version(store: Store) -> None:
    await store.create(RESOURCE_CLAIMS, claim("before"))
    version = (await store.list(RESOURCE_CLAIMS)).resource_version
    a = await store.create(RESOURCE_CLAIMS, claim("a"))
    await store.create(RESOURCE_CLAIMS, claim("elsewhere", namespace="other"))
    a["metadata"]["labels"] = {"x": "y"}
    await store.replace(RESOURCE_CLAIMS, a)
    await store.create(RESOURCE_CLAIMS, claim("b"))
    await store.delete(RESOURCE_CLAIMS, "b", "default")
    events = await _events_until_deleted(store, version, "b")
    seen = [(e.type, e.object["metadata"]["name"]) for e in events]
    # KV compacts a key's intermediate values; the API server sends each. Both end in the same
    # state and neither shows other namespaces or what happened before `version`.
    assert seen[-1] == (EventType.DELETED, "b")
    assert {n for _, n in seen} == {"a", "b"}
    last_a = [e for e in events if e.object["metadata"]["name"] == "a"][-1]
    assert last_a.type is EventType.MODIFIED
    assert last_a.object["metadata"]["labels"] == {"x": "y"}
    assert all(int(e.resource_version) > int(version) for e in events)


@pytest.mark.parametrize(
    ("name", "namespace"),
    [
        pytest.param("", "default", id="empty-name"),
        pytest.param("c1", "", id="empty-namespace"),
    ],
)
async def test_bad_names_are_invalid_not_crashes(store: Store, name: str, namespace: str) -> None:
    with pytest.raises((InvalidObjectError, NotFoundError)):
        await store.get(RESOURCE_CLAIMS, name, namespace)
