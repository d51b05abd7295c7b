"""Standalone consumers against a real nats-server and the KV claim store."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from gpudra_api import ALLOCATION_ID_ANNOTATION
from gpudra_bus.connection import connect, disconnect
from gpudra_bus.streams import BucketSpec, ensure_bucket
from gpudra_claim_writer.conftest import cancel_and_wait, new_claim
from gpudra_claim_writer.consumers import (
    CONSUMERS_LEFT_ANNOTATION,
    Consumers,
    allocation_id,
    cleared_since,
    consumers_left,
    had_consumers,
    is_active,
    left_unreported,
    needs_pod,
    pod_waiting_for,
    with_allocation_id,
    with_consumers_left,
)
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.claims import DELETE_PROTECTION_FINALIZER, ClaimStore
from gpudra_kube.kv_backend import BUCKETS, KvStore
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

ALLOCATION: dict[str, Any] = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
    }
}


@pytest_asyncio.fixture
async def store(nats_url: str) -> AsyncIterator[KvStore]:
    nc: Client = await connect(nats_url, name="consumers-test", deadline=5)
    try:
        prefix = uuid.uuid4().hex[:8]
        buckets = {r: f"t{prefix}-{b}" for r, b in BUCKETS.items()}
        for name in buckets.values():
            await ensure_bucket(nc.jetstream(), BucketSpec(name))
        yield KvStore(nc, buckets=buckets)
    finally:
        await disconnect(nc)


def pod(name: str, *claims: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
        },
    }


@pytest.mark.parametrize(
    ("pod_json", "active"),
    [
        pytest.param({"metadata": {}}, True, id="new"),
        pytest.param({"metadata": {}, "status": {"phase": "Running"}}, True, id="running"),
        pytest.param({"metadata": {}, "status": {"phase": "Succeeded"}}, False, id="succeeded"),
        pytest.param({"metadata": {}, "status": {"phase": "Failed"}}, False, id="failed"),
        pytest.param(
            {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, False, id="deleting"
        ),
    ],
)
def test_is_active(pod_json: dict[str, Any], active: bool) -> None:
    assert is_active(pod_json) is active


@contextlib.asynccontextmanager
async def running(consumers: Consumers) -> AsyncIterator[None]:
    task = asyncio.create_task(consumers.run())
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def reserved(c: dict[str, Any]) -> list[str]:
    return [r["name"] for r in (c.get("status") or {}).get("reservedFor") or []]


async def test_pods_become_consumers_and_the_last_one_leaving_releases(store: KvStore) -> None:
    claims = ClaimStore(store)
    created = await claims.create_claim(new_claim("shared"))
    await store.create(PODS, pod("p1", "shared"))
    await store.create(PODS, pod("p2", "shared"))
    await store.create(PODS, pod("other", "unrelated"))
    consumers = Consumers(store, watch_timeout=1.0)
    async with running(consumers):
        await until(lambda: _count(consumers, "not-allocated", 2))
        await claims.write_allocation(
            "default", "shared", uid=created["metadata"]["uid"], allocation=ALLOCATION
        )
        await consumers.claim_allocated("default", "shared")
        current = await claims.get_claim("default", "shared")
        assert reserved(current) == ["p1", "p2"]

        await store.delete(PODS, "p1", "default")

        async def only_p2() -> bool:
            return reserved(await claims.get_claim("default", "shared")) == ["p2"]

        await until(only_p2)
        p2 = await store.get(PODS, "p2", "default")
        p2["status"] = {"phase": "Succeeded"}
        await store.replace_status(PODS, p2)

        async def released() -> dict[str, Any] | None:
            c = await claims.get_claim("default", "shared")
            return None if (c.get("status") or {}).get("allocation") else c

        current = await until(released)
        assert reserved(current) == []
        assert DELETE_PROTECTION_FINALIZER not in (current["metadata"].get("finalizers") or [])
    assert consumers.counts["released"] == 1


async def test_consumers_gone_while_nobody_watched_are_removed_after_the_list(
    store: KvStore,
) -> None:
    claims = ClaimStore(store)
    created = await claims.create_claim(new_claim("c"))
    await claims.write_allocation(
        "default", "c", uid=created["metadata"]["uid"], allocation=ALLOCATION
    )
    alive = await store.create(PODS, pod("alive", "c"))
    doomed = await store.create(PODS, pod("doomed", "c"))
    await claims.add_consumer("default", "c", alive)
    await claims.add_consumer("default", "c", doomed)
    await store.delete(PODS, "doomed", "default")  # while no claim-writer was running
    consumers = Consumers(store, watch_timeout=1.0)
    async with running(consumers):

        async def cleaned() -> bool:
            return reserved(await claims.get_claim("default", "c")) == ["alive"]

        await until(cleaned)
        current = await claims.get_claim("default", "c")
        assert current["status"]["allocation"] == ALLOCATION


async def _count(consumers: Consumers, outcome: str, n: int) -> bool:
    return consumers.counts[outcome] >= n


@pytest.mark.parametrize(
    ("annotations", "marked", "rewritten"),
    [
        pytest.param(None, True, True, id="no-annotations"),
        pytest.param({"team": "a"}, True, True, id="other-annotations-kept"),
        pytest.param({CONSUMERS_LEFT_ANNOTATION: "true"}, True, False, id="already-marked"),
    ],
)
def test_consumers_left_marker(
    annotations: dict[str, str] | None, marked: bool, rewritten: bool
) -> None:
    c = new_claim("c")
    if annotations is not None:
        c["metadata"]["annotations"] = dict(annotations)
    new = with_consumers_left(c)
    assert (new is not None) is rewritten
    result = new if new is not None else c
    assert consumers_left(result) is marked
    for key, value in (annotations or {}).items():
        assert result["metadata"]["annotations"][key] == value
    assert consumers_left(new_claim("c")) is False, "the input is never changed"


@pytest.mark.parametrize(
    ("annotations", "allocation", "value"),
    [
        pytest.param(None, "a1", "a1", id="marked-for-its-allocation"),
        pytest.param(None, "", "true", id="allocation-without-id"),
        pytest.param({CONSUMERS_LEFT_ANNOTATION: "a1"}, "a1", None, id="already-marked-for-it"),
        pytest.param({CONSUMERS_LEFT_ANNOTATION: "a0"}, "a1", "a1", id="left-again-remarked"),
        pytest.param({CONSUMERS_LEFT_ANNOTATION: "true"}, "a1", "a1", id="unknown-mark-named"),
        pytest.param({CONSUMERS_LEFT_ANNOTATION: "a0"}, "", None, id="no-id-any-mark-will-do"),
    ],
)
def test_the_mark_names_the_allocation_whose_consumers_left(
    annotations: dict[str, str] | None, allocation: str, value: str | None
) -> None:
    c = new_claim("c")
    if annotations is not None:
        c["metadata"]["annotations"] = dict(annotations)
    new = with_consumers_left(c, allocation)
    if value is None:
        assert new is None
    else:
        assert new is not None
        assert new["metadata"]["annotations"][CONSUMERS_LEFT_ANNOTATION] == value


def left_claim(
    *, allocated: bool = False, finalizer: bool = False, mark: str = "", deleting: bool = False
) -> dict[str, Any]:
    """A claim the write-back allocated as `a1`, in the state given."""
    c = new_claim("c")
    c["metadata"]["annotations"] = {ALLOCATION_ID_ANNOTATION: "a1"}
    if mark:
        c["metadata"]["annotations"][CONSUMERS_LEFT_ANNOTATION] = mark
    if finalizer:
        c["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    if deleting:
        c["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if allocated:
        c["status"] = {"allocation": ALLOCATION}
    return c


@pytest.mark.parametrize(
    ("claim", "unreported", "pod_needed"),
    [
        pytest.param(left_claim(), True, True, id="cleared-finalizer-gone-unmarked"),
        pytest.param(left_claim(mark="true"), True, True, id="marked-before-ids"),
        pytest.param(left_claim(mark="a0"), True, True, id="marked-for-an-earlier-allocation"),
        pytest.param(left_claim(mark="a1"), False, True, id="marked-for-it-reported"),
        pytest.param(left_claim(finalizer=True), False, False, id="write-back-between-its-writes"),
        pytest.param(left_claim(allocated=True), False, False, id="allocated"),
        pytest.param(left_claim(deleting=True), False, False, id="being-deleted"),
        pytest.param(new_claim("c"), False, False, id="never-allocated-by-gpudra"),
    ],
)
def test_left_unreported(claim: dict[str, Any], unreported: bool, pod_needed: bool) -> None:
    assert left_unreported(claim) is unreported
    assert needs_pod(claim) is pod_needed


@pytest.mark.parametrize(
    ("claim", "allocation", "cleared"),
    [
        pytest.param(left_claim(), "a1", True, id="cleared-finalizer-gone"),
        pytest.param(left_claim(mark="a1"), "a1", True, id="cleared-and-reported"),
        pytest.param(left_claim(), "a2", False, id="another-decision"),
        pytest.param(left_claim(), "", False, id="no-id"),
        pytest.param(left_claim(finalizer=True), "a1", False, id="write-back-between-its-writes"),
        pytest.param(left_claim(allocated=True), "a1", False, id="allocated"),
        pytest.param(left_claim(deleting=True), "a1", False, id="being-deleted"),
        pytest.param(new_claim("c"), "a1", False, id="never-allocated-by-gpudra"),
    ],
)
def test_cleared_since(claim: dict[str, Any], allocation: str, cleared: bool) -> None:
    assert cleared_since(claim, allocation) is cleared


def test_allocation_id() -> None:
    c = new_claim("c")
    assert allocation_id(c) == ""
    assert with_allocation_id(c, "") is None, "no id, nothing to write"
    marked = with_allocation_id(c, "a1")
    assert marked is not None
    assert allocation_id(marked) == "a1"
    assert with_allocation_id(marked, "a1") is None
    again = with_allocation_id(marked, "a2")
    assert again is not None
    assert allocation_id(again) == "a2"
    assert allocation_id(c) == "", "the input is never changed"


@pytest.mark.parametrize(
    ("status", "had"),
    [
        pytest.param({}, False, id="no-status"),
        pytest.param({"allocation": ALLOCATION}, False, id="allocated-unused"),
        pytest.param(
            {
                "allocation": ALLOCATION,
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
            },
            True,
            id="allocated-and-used",
        ),
    ],
)
def test_had_consumers(status: dict[str, Any], had: bool) -> None:
    assert had_consumers({**new_claim("c"), "status": status}) is had


@pytest.mark.parametrize(
    ("pods", "may_run", "waiting"),
    [
        pytest.param([], True, False, id="no-pod"),
        pytest.param([("p", "c", "Running")], True, True, id="running-pod"),
        pytest.param([("p", "c", "Succeeded")], True, False, id="finished-pod"),
        pytest.param([("p", "c", "Succeeded")], False, True, id="finished-pod-counted"),
        pytest.param([("p", "other", "Pending")], False, False, id="pod-of-another-claim"),
        pytest.param(
            [("p", "c", "Failed"), ("q", "c", "Pending")], True, True, id="a-new-pod-beside"
        ),
    ],
)
async def test_pod_waiting_for(
    store: KvStore, pods: list[tuple[str, str, str]], may_run: bool, waiting: bool
) -> None:
    for name, claim_name, phase in pods:
        created = await store.create(PODS, pod(name, claim_name))
        created["status"] = {"phase": phase}
        await store.replace_status(PODS, created)
    assert await pod_waiting_for(store, new_claim("c"), may_run=may_run) is waiting


@pytest.mark.parametrize(
    ("fault", "path"),
    [
        pytest.param(503, "resourceclaims/c/status", id="removal-fails"),
        pytest.param(429, "resourceclaims/c", id="claim-read-throttled"),
    ],
)
async def test_a_failed_consumer_removal_is_tried_again_until_the_claim_is_released(
    api: tuple[FakeKubeApi, ApiStore], fault: int, path: str
) -> None:
    """The last consumer is deleted while the claim store fails: a deleted pod has no next
    change and the KV store never asks for a relist, so unless the removal is tried again the
    claim stays allocated, for nobody, until a restart."""
    fake, store = api
    user = await fake.put(PODS, pod("p", "c"))
    held = new_claim("c")
    held["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    held["status"] = {
        "allocation": ALLOCATION,
        "reservedFor": [{"resource": "pods", "name": "p", "uid": user["metadata"]["uid"]}],
    }
    await fake.put(RESOURCE_CLAIMS, held)
    consumers = Consumers(store, watch_timeout=1.0, retry_interval=0.1)
    claims = ClaimStore(store)
    async with running(consumers):
        await until(lambda: _count(consumers, "already", 1))
        fake.inject_error(
            fault, method="GET" if fault == 429 else "PUT", path_contains=path, times=10**6
        )
        await store.delete(PODS, "p", "default")
        await until(lambda: _count(consumers, "failed", 3))
        assert consumers.retrying == 1
        fake.clear_faults()

        async def released() -> bool:
            c = await claims.get_claim("default", "c")
            return not (c.get("status") or {}).get("allocation")

        await until(released)
        await until(lambda: _nothing_left(consumers))
    assert consumers.counts["released"] == 1


async def _nothing_left(consumers: Consumers) -> bool:
    return consumers.retrying == 0
