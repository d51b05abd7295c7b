from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpudra_kube.api_backend import ApiStore, retry_after_of
from gpudra_kube.errors import (
    AlreadyExistsError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidObjectError,
    KubeError,
    NotFoundError,
    UnavailableError,
)
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra_kube.store import EventType, WatchEvent
from gpudra_testing.claims import ALLOCATION, claim
from gpudra_testing.kubeapi import FakeKubeApi


def resource_slice(name: str = "n1-gpu.nvidia.com-0", generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }


@pytest.fixture
def store(api_store: ApiStore) -> ApiStore:
    """This module tests the API backend only (conftest's `store` is both backends)."""
    return api_store


async def test_create_get_list(store: ApiStore, kube_api: FakeKubeApi) -> None:
    created = await store.create(RESOURCE_CLAIMS, claim())
    assert created["metadata"]["uid"]
    assert created["metadata"]["generation"] == 1
    got = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert got == created
    listed = await store.list(RESOURCE_CLAIMS, "default")
    assert [o["metadata"]["name"] for o in listed.items] == ["c1"]
    assert listed.items[0]["kind"] == "ResourceClaim"
    assert listed.resource_version == str(kube_api.resource_version)
    assert (await store.list(RESOURCE_CLAIMS, "other")).items == []
    assert len((await store.list(RESOURCE_CLAIMS)).items) == 1


async def test_status_write_and_conflict(store: ApiStore) -> None:
    created = await store.create(RESOURCE_CLAIMS, claim())
    with_status = copy.deepcopy(created)
    with_status["status"] = {"allocation": ALLOCATION}
    written = await store.replace_status(RESOURCE_CLAIMS, with_status)
    assert written["status"]["allocation"] == ALLOCATION
    assert written["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    # The stale copy must not overwrite the allocation: 409, typed as retryable.
    stale = copy.deepcopy(created)
    stale["status"] = {}
    with pytest.raises(ConflictError):
        await store.replace_status(RESOURCE_CLAIMS, stale)
    # The main resource ignores status; finalizers are metadata and stick.
    fresh = await store.get(RESOURCE_CLAIMS, "c1", "default")
    fresh["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    fresh["status"] = {}
    updated = await store.replace(RESOURCE_CLAIMS, fresh)
    assert updated["status"]["allocation"] == ALLOCATION
    assert updated["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        pytest.param(500, "InternalError", UnavailableError, id="500"),
        pytest.param(429, "TooManyRequests", UnavailableError, id="429"),
        pytest.param(403, "Forbidden", ForbiddenError, id="403"),
        pytest.param(409, "Conflict", ConflictError, id="409"),
        pytest.param(410, "Gone", GoneError, id="410"),
    ],
)
async def test_http_errors_are_typed(
    store: ApiStore, kube_api: FakeKubeApi, status: int, reason: str, error: type[KubeError]
) -> None:
    kube_api.inject_error(status, reason=reason, method="GET")
    with pytest.raises(error) as info:
        await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert info.value.status == status


@pytest.mark.parametrize(
    ("op", "retry_after"),
    [
        pytest.param("get", 2, id="get"),
        pytest.param("list", 7, id="list"),
        pytest.param("watch", 3, id="watch"),
        pytest.param("get", None, id="none-asked"),
    ],
)
async def test_a_throttled_request_says_how_long_the_server_asked_to_wait(
    store: ApiStore, kube_api: FakeKubeApi, op: str, retry_after: int | None
) -> None:
    async def call() -> None:
        if op == "get":
            await store.get(RESOURCE_CLAIMS, "c1", "default")
        elif op == "list":
            await store.list(RESOURCE_CLAIMS)
        else:
            async for _ in store.watch(RESOURCE_CLAIMS, resource_version="1", timeout=5):
                pass

    kube_api.inject_error(429, reason="TooManyRequests", method="GET", retry_after=retry_after)
    with pytest.raises(UnavailableError) as info:
        await call()
    assert info.value.retry_after == retry_after


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        pytest.param({"Retry-After": "5"}, {}, 5.0, id="header"),
        pytest.param({}, {"details": {"retryAfterSeconds": 4}}, 4.0, id="status-detail"),
        pytest.param({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, {}, None, id="http-date"),
        pytest.param({"Retry-After": "0"}, {}, None, id="zero"),
        pytest.param({"Retry-After": "inf"}, {}, None, id="infinite"),
        pytest.param(None, "not json", None, id="nothing"),
    ],
)  # fmt: skip
def test_retry_after_of(headers: dict[str, str] | None, body: Any, seconds: float | None) -> None:
    assert retry_after_of(headers, body) == seconds


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        pytest.param(lambda c: c["spec"]["devices"].update(bogus=1), InvalidObjectError, id="unknown-field"),
        pytest.param(lambda c: c["metadata"].pop("namespace"), InvalidObjectError, id="no-namespace"),
        pytest.param(lambda c: c.update(kind="Pod"), InvalidObjectError, id="wrong-kind"),
        pytest.param(lambda c: None, AlreadyExistsError, id="exists"),
    ],
)  # fmt: skip
async def test_bad_writes(
    store: ApiStore, mutate: Callable[[dict[str, Any]], object], error: type[KubeError]
) -> None:
    await store.create(RESOURCE_CLAIMS, claim())
    bad = claim()
    mutate(bad)
    with pytest.raises(error):
        await store.create(RESOURCE_CLAIMS, bad)


async def test_not_found(store: ApiStore) -> None:
    with pytest.raises(NotFoundError):
        await store.get(RESOURCE_CLAIMS, "missing", "default")
    with pytest.raises(NotFoundError):
        await store.delete(RESOURCE_SLICES, "missing")


async def test_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    api = await FakeKubeApi().start()
    path = api.write_kubeconfig(tmp_path / "kc")
    await api.stop()
    s = await ApiStore.from_kubeconfig(str(path))
    try:
        with pytest.raises(UnavailableError):
            await s.list(RESOURCE_CLAIMS)
    finally:
        await s.close()


async def test_slices_are_cluster_scoped(store: ApiStore) -> None:
    created = await store.create(RESOURCE_SLICES, resource_slice())
    created["spec"]["pool"]["generation"] = 2
    updated = await store.replace(RESOURCE_SLICES, created)
    assert updated["spec"]["pool"]["generation"] == 2
    assert updated["metadata"]["generation"] == 2
    await store.delete(RESOURCE_SLICES, created["metadata"]["name"])
    assert (await store.list(RESOURCE_SLICES)).items == []
    bad = resource_slice("x")
    bad["metadata"]["namespace"] = "default"
    with pytest.raises(InvalidObjectError):
        await store.create(RESOURCE_SLICES, bad)


async def test_delete_with_finalizer_waits_for_its_removal(store: ApiStore) -> None:
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


async def _collect(store: ApiStore, rv: str, n: int, timeout: float = 5.0) -> list[WatchEvent]:
    out: list[WatchEvent] = []

    async def run() -> None:
        async for ev in store.watch(RESOURCE_CLAIMS, "default", resource_version=rv, timeout=30):
            out.append(ev)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_watch_streams_changes_and_bookmarks(store: ApiStore, kube_api: FakeKubeApi) -> None:
    start = (await store.list(RESOURCE_CLAIMS)).resource_version
    await store.create(RESOURCE_CLAIMS, claim("a"))
    await store.create(RESOURCE_CLAIMS, claim("b", namespace="other"))
    await store.delete(RESOURCE_CLAIMS, "a", "default")
    events = await _collect(store, start, 3)
    assert [(e.type, e.object["metadata"]["name"]) for e in events[:2]] == [
        (EventType.ADDED, "a"),
        (EventType.DELETED, "a"),
    ]
    assert events[2].type is EventType.BOOKMARK
    assert events[2].resource_version == str(kube_api.resource_version)


async def test_watch_from_compacted_version_is_gone(store: ApiStore, kube_api: FakeKubeApi) -> None:
    start = (await store.list(RESOURCE_CLAIMS)).resource_version
    await store.create(RESOURCE_CLAIMS, claim("a"))
    kube_api.compact()
    with pytest.raises(GoneError):
        await _collect(store, start, 1)


async def test_watch_from_a_version_the_server_has_not_reached_is_gone(
    store: ApiStore, kube_api: FakeKubeApi
) -> None:
    """After an etcd restore the server's versions are behind the informer's: the API server
    answers "Too large resource version" (504, cause ResourceVersionTooLarge) and client-go's
    reflector relists. Retrying the same watch would never succeed."""
    ahead = str(int((await store.list(RESOURCE_CLAIMS)).resource_version) + 100)
    with pytest.raises(GoneError, match="Too large resource version"):
        await _collect(store, ahead, 1)


async def test_pod_scheduling_gate_removal(store: ApiStore) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": "gpudra.io/allocation"}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    created = await store.create(PODS, pod)
    created["spec"]["schedulingGates"] = []
    updated = await store.replace(PODS, created)
    assert updated["spec"]["schedulingGates"] == []


def test_errors_share_a_root() -> None:
    assert issubclass(ConflictError, KubeError)
    assert issubclass(GoneError, KubeError)


async def test_list_pages_through_continue_tokens(kubeconfig: Path, kube_api: FakeKubeApi) -> None:
    s = await ApiStore.from_kubeconfig(str(kubeconfig), page_size=2)
    try:
        for i in range(5):
            await s.create(RESOURCE_CLAIMS, claim(f"c{i}"))
        listed = await s.list(RESOURCE_CLAIMS)
        assert [o["metadata"]["name"] for o in listed.items] == [f"c{i}" for i in range(5)]
        assert listed.resource_version == str(kube_api.resource_version)
        pages = [p for m, p in kube_api.requests if m == "GET" and p.endswith("/resourceclaims")]
        assert len(pages) == 3
    finally:
        await s.close()


async def test_expired_continue_token_is_gone(kubeconfig: Path, kube_api: FakeKubeApi) -> None:
    s = await ApiStore.from_kubeconfig(str(kubeconfig), page_size=1)
    try:
        for i in range(3):
            await s.create(RESOURCE_CLAIMS, claim(f"c{i}"))
        kube_api.inject_error(410, reason="Expired", path_contains="continue=")
        with pytest.raises(GoneError):
            await s.list(RESOURCE_CLAIMS)
        assert len((await s.list(RESOURCE_CLAIMS)).items) == 3  # a fresh list works
    finally:
        await s.close()
