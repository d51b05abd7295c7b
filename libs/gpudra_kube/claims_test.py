from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gpudra_kube.api_backend_test import resource_slice
from gpudra_kube.claims import (
    DELETE_PROTECTION_FINALIZER,
    SCHEDULING_GATE,
    ClaimStore,
    without_delete_protection,
)
from gpudra_kube.errors import AlreadyAllocatedError, ConflictError, NotFoundError
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS, KubeObject
from gpudra_kube.store import Store
from gpudra_testing.claims import ALLOCATION, claim
from gpudra_testing.kubeapi import FakeKubeApi


def pod(name: str = "p1", gates: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": g} for g in (gates or [])],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


async def test_write_allocation_adds_finalizer_and_is_idempotent(store: Store) -> None:
    claims = ClaimStore(store)
    created = await claims.create_claim(claim())
    uid = created["metadata"]["uid"]
    written = await claims.write_allocation("default", "c1", uid=uid, allocation=ALLOCATION)
    assert written["status"]["allocation"] == ALLOCATION
    assert DELETE_PROTECTION_FINALIZER in written["metadata"]["finalizers"]
    again = await claims.write_allocation("default", "c1", uid=uid, allocation=ALLOCATION)
    assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param("other-allocation", AlreadyAllocatedError, id="allocated-by-someone-else"),
        pytest.param("recreated", NotFoundError, id="uid-changed"),
    ],
)
async def test_write_allocation_never_overwrites(
    store: Store, change: str, error: type[Exception]
) -> None:
    claims = ClaimStore(store)
    created = await claims.create_claim(claim())
    uid = created["metadata"]["uid"]
    if change == "other-allocation":
        other = copy.deepcopy(ALLOCATION)
        other["devices"]["results"][0]["device"] = "gpu-7"
        await claims.write_allocation("default", "c1", uid=uid, allocation=other)
    else:
        await claims.delete_claim("default", "c1")
        await claims.create_claim(claim())
    with pytest.raises(error):
        await claims.write_allocation("default", "c1", uid=uid, allocation=ALLOCATION)


async def test_racing_allocations_one_wins(store: Store) -> None:
    claims = ClaimStore(store, conflict_attempts=10)
    uid = (await claims.create_claim(claim()))["metadata"]["uid"]

    async def allocate(device: str) -> str:
        alloc = copy.deepcopy(ALLOCATION)
        alloc["devices"]["results"][0]["device"] = device
        try:
            await claims.write_allocation("default", "c1", uid=uid, allocation=alloc)
            return device
        except AlreadyAllocatedError:
            return "lost"

    results = await asyncio.gather(*(allocate(f"gpu-{i}") for i in range(4)))
    winners = [r for r in results if r != "lost"]
    assert len(winners) == 1
    final = await claims.get_claim("default", "c1")
    assert final["status"]["allocation"]["devices"]["results"][0]["device"] == winners[0]


async def test_release_then_delete(store: Store) -> None:
    claims = ClaimStore(store)
    uid = (await claims.create_claim(claim()))["metadata"]["uid"]
    await claims.write_allocation("default", "c1", uid=uid, allocation=ALLOCATION)
    p = await store.create(PODS, pod())
    reserved = await claims.add_consumer("default", "c1", p)
    assert reserved["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p1", "uid": p["metadata"]["uid"]}
    ]
    await claims.add_consumer("default", "c1", p)  # idempotent
    assert await claims.delete_claim("default", "c1")
    marked = await claims.get_claim("default", "c1")
    assert marked["metadata"]["deletionTimestamp"]  # protected while allocated
    await claims.release_allocation("default", "c1", uid=uid)
    with pytest.raises(NotFoundError):
        await claims.get_claim("default", "c1")
    assert not await claims.delete_claim("default", "c1")


async def test_remove_scheduling_gate(store: Store) -> None:
    claims = ClaimStore(store)
    await store.create(PODS, pod(gates=[SCHEDULING_GATE, "other.io/gate"]))
    assert await claims.remove_scheduling_gate("default", "p1")
    got = await claims.get_pod("default", "p1")
    assert got["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]
    assert not await claims.remove_scheduling_gate("default", "p1")


async def test_mutate_rereads_after_a_conflict(api_store: Store, kube_api: FakeKubeApi) -> None:
    claims = ClaimStore(api_store, conflict_attempts=3)
    await claims.create_claim(claim())
    calls = 0

    def label(obj: KubeObject) -> KubeObject:
        nonlocal calls
        calls += 1
        obj["metadata"].setdefault("labels", {})["n"] = str(calls)
        return obj

    kube_api.inject_error(409, reason="Conflict", method="PUT")
    result = await claims.mutate(RESOURCE_CLAIMS, "c1", "default", label)
    assert calls == 2  # the first write conflicted; the second was based on a fresh read
    assert result["metadata"]["labels"] == {"n": "2"}
    gets = [p for m, p in kube_api.requests if m == "GET" and p.endswith("/resourceclaims/c1")]
    assert len(gets) == 2


async def test_mutate_gives_up_after_attempts(api_store: Store, kube_api: FakeKubeApi) -> None:
    claims = ClaimStore(api_store, conflict_attempts=2)
    await claims.create_claim(claim())
    kube_api.inject_error(409, reason="Conflict", method="PUT", times=2)
    with pytest.raises(ConflictError):
        await claims.mutate(RESOURCE_CLAIMS, "c1", "default", lambda o: o)


async def test_apply_slice_create_then_update(store: Store) -> None:
    claims = ClaimStore(store)
    first = await claims.apply_slice(resource_slice(generation=1))
    unchanged = await claims.apply_slice(resource_slice(generation=1))
    assert unchanged["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    second = await claims.apply_slice(resource_slice(generation=2))
    assert second["spec"]["pool"]["generation"] == 2
    assert [s["metadata"]["name"] for s in await claims.list_slices("gpu.nvidia.com")] == [
        first["metadata"]["name"]
    ]
    assert await claims.list_slices("other.driver") == []
    assert await claims.delete_slice(first["metadata"]["name"])
    assert not await claims.delete_slice(first["metadata"]["name"])


@pytest.mark.parametrize(
    ("finalizers", "left"),
    [
        pytest.param(None, None, id="no-finalizers"),
        pytest.param(["other.io/f"], None, id="only-others"),
        pytest.param([DELETE_PROTECTION_FINALIZER], [], id="only-protection"),
        pytest.param(
            ["a.io/f", DELETE_PROTECTION_FINALIZER, "b.io/f"],
            ["a.io/f", "b.io/f"],
            id="others-kept",
        ),
    ],
)
def test_without_delete_protection(finalizers: list[str] | None, left: list[str] | None) -> None:
    obj = claim("c")
    if finalizers is not None:
        obj["metadata"]["finalizers"] = finalizers
    changed = without_delete_protection(obj)
    if left is None:
        assert changed is None, "nothing to change: no write"
    else:
        assert changed is not None
        assert changed["metadata"]["finalizers"] == left
