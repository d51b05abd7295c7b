"""Intake against a real nats-server and the standalone claim store: which claims are offered."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gpudra_bus import Publisher, subjects
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.claims import FINALIZER
from gpudra_claim_writer.conftest import ALLOCATION
from gpudra_claim_writer.consumers import (
    ALLOCATION_ID_ANNOTATION,
    CONSUMERS_LEFT_ANNOTATION,
    consumers_left,
)
from gpudra_claim_writer.events import PodUnits
from gpudra_claim_writer.intake import Intake
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS
from gpudra_kube.store import EventType, WatchEvent
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2


def claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }


@pytest.mark.parametrize(
    ("device_class", "pending", "foreign"),
    [
        pytest.param("gpu.nvidia.com", 1, 0, id="built-in-class"),
        pytest.param("nic.example.com", 0, 1, id="other-drivers-class"),
        pytest.param("later.example.com", 1, 0, id="undefined-class-waits-in-the-allocator"),
    ],
)
async def test_only_gpudras_claims_are_offered_and_gated_pods_hear_of_every_claim(
    nc: Client, device_class: str, pending: int, foreign: int
) -> None:
    store = KvStore(nc)
    await store.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "nic.example.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
        },
    )
    heard: list[tuple[str, str]] = []

    async def on_claim(namespace: str, name: str) -> None:
        heard.append((namespace, name))

    intake = Intake(store, Publisher(nc), on_claim=on_claim, ownership=Ownership(store))
    event = WatchEvent(EventType.ADDED, claim("c", device_class))
    await intake.on_event(event)
    await intake.on_event(event)  # a repeat (relist) decides nothing new
    assert intake.published["pending"] == pending
    assert intake.published["foreign"] == foreign
    assert heard == [("default", "c"), ("default", "c")]


class Heard:
    """ClaimEvents the intake publishes, as a core NATS subscriber sees them."""

    def __init__(self) -> None:
        self.events: list[claims_pb2.ClaimEvent] = []

    async def on_msg(self, msg: Msg) -> None:
        event = claims_pb2.ClaimEvent()
        event.ParseFromString(msg.data)
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [claims_pb2.ClaimEvent.Kind.Name(e.kind) for e in self.events]


async def settle(heard: Heard, count: int) -> None:
    for _ in range(200):
        if len(heard.events) >= count:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # nothing more on its way


@pytest.mark.parametrize(
    ("reserved_for", "marked", "after"),
    [
        pytest.param(
            [{"resource": "pods", "name": "job-0", "uid": "pod-1"}],
            True,
            ["KIND_PENDING", "KIND_DELETED"],
            id="consumers-left-it-waits-for-a-pod",
        ),
        pytest.param(
            [],
            False,
            ["KIND_PENDING", "KIND_DELETED"],
            id="never-consumed-stays-eager",
        ),
    ],
)
async def test_a_claim_whose_consumers_left_is_marked_and_never_offered_alone(
    nc: Client, reserved_for: list[dict[str, str]], marked: bool, after: list[str]
) -> None:
    store = KvStore(nc)
    heard = Heard()
    sub = await nc.subscribe(subjects.all_of(SubjectKind.CLAIMS), cb=heard.on_msg)
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
    intake = Intake(store, Publisher(nc), ownership=ownership, pods=units)
    stored = await store.create(RESOURCE_CLAIMS, claim("named", "gpu.nvidia.com"))
    await intake.on_event(WatchEvent(EventType.ADDED, stored))
    stored["status"] = {"allocation": {"devices": {"results": []}}, "reservedFor": reserved_for}
    stored["status"]["allocation"]["devices"]["results"] = [
        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    ]
    if not reserved_for:
        del stored["status"]["reservedFor"]
    stored = await store.replace_status(RESOURCE_CLAIMS, stored)
    intake.written(stored["metadata"]["uid"])  # the write-back wrote it
    await intake.on_event(WatchEvent(EventType.MODIFIED, stored))
    # The last consumer leaves: reservedFor and the allocation are cleared in one write.
    stored["status"] = {}
    stored = await store.replace_status(RESOURCE_CLAIMS, stored)
    await intake.on_event(WatchEvent(EventType.MODIFIED, stored))
    current = await store.get(RESOURCE_CLAIMS, "named", "default")
    assert consumers_left(current) is marked
    # Later revisions of the pending claim (the marker itself, the finalizer removed) offer it
    # again only when nobody used it.
    await intake.on_event(WatchEvent(EventType.MODIFIED, current))
    await settle(heard, len(after))
    await sub.unsubscribe()
    assert heard.kinds() == after
    assert intake.published["waiting"] == (1 if marked else 0)
    if marked:
        dealloc = heard.events[-1]
        assert consumers_left(json.loads(dealloc.claim_json)), "released as marked"


# -- an allocation cleared while nobody watched (the claim-writer down, a 410 relist) ------------

ID = "0123456789abcdef"


def after_restart(*, allocation_id: str, finalizer: bool, mark: str) -> dict[str, Any]:
    """Claim `data` as a restarted claim-writer lists it: pending; what the write-back left on it
    (the allocation id, the finalizer) and the consumers-left mark, as given."""
    stored = claim("data", "gpu.nvidia.com")
    meta = stored["metadata"]
    del meta["uid"]  # the fake API server gives one
    annotations = {}
    if allocation_id:
        annotations[ALLOCATION_ID_ANNOTATION] = allocation_id
    if mark:
        annotations[CONSUMERS_LEFT_ANNOTATION] = mark
    if annotations:
        meta["annotations"] = annotations
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    return stored


@contextlib.asynccontextmanager
async def running(intake: Intake) -> AsyncIterator[None]:
    """The intake's own loop (informer: list, SYNCED, watch), until it has listed every claim."""
    task = asyncio.create_task(intake.run())
    try:
        await asyncio.wait_for(intake.synced.wait(), 10)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def relist(
    fake: FakeKubeApi, intake: Intake, change: Callable[[], Awaitable[object]]
) -> None:
    """Break the intake's watch, `change` something meanwhile, forget history (410 Gone): the
    informer relists; returns once the relist is through."""
    intake.synced.clear()
    fake.inject_error(503, reason="ServiceUnavailable", path_contains="watch=", times=10**6)
    await fake.close_watches()
    await change()
    fake.compact()
    fake.clear_faults()
    await asyncio.wait_for(intake.synced.wait(), 20)


async def label(fake: FakeKubeApi, store: ApiStore, name: str) -> None:
    """Another client changes the claim's labels (a new resourceVersion, nothing else)."""
    current = await store.get(RESOURCE_CLAIMS, name, "default")
    current["metadata"]["labels"] = {"touched": "yes"}
    await fake.put(RESOURCE_CLAIMS, current)


@pytest.mark.parametrize(
    ("allocation_id", "finalizer", "mark", "kinds", "marked_for"),
    [
        pytest.param(
            ID, False, "", ["KIND_DELETED"], ID, id="cleared-with-consumers-while-down-released"
        ),
        pytest.param(ID, False, "true", ["KIND_DELETED"], ID, id="marked-before-ids-released-once"),
        pytest.param(
            ID,
            False,
            "fedcba9876543210",
            ["KIND_DELETED"],
            ID,
            id="left-again-after-an-earlier-cycle-released",
        ),
        pytest.param("", False, "", ["KIND_PENDING"], None, id="never-consumed-stays-eager"),
        pytest.param(ID, True, "", ["KIND_PENDING"], None, id="write-back-interrupted-stays-eager"),
        pytest.param(ID, False, ID, [], ID, id="already-marked-unchanged"),
    ],
)
async def test_a_restart_reports_an_allocation_cleared_while_it_was_down(
    nc: Client,
    api: tuple[FakeKubeApi, ApiStore],
    allocation_id: str,
    finalizer: bool,
    mark: str,
    kinds: list[str],
    marked_for: str | None,
) -> None:
    fake, store = api
    stored = await fake.put(
        RESOURCE_CLAIMS, after_restart(allocation_id=allocation_id, finalizer=finalizer, mark=mark)
    )
    heard = Heard()
    sub = await nc.subscribe(subjects.all_of(SubjectKind.CLAIMS), cb=heard.on_msg)
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))

    def intake() -> Intake:
        return Intake(store, Publisher(nc), watch_timeout=1.0, ownership=ownership, pods=units)

    try:
        first = intake()
        async with running(first):  # the first start after the clearing
            await settle(heard, len(kinds))
            assert heard.kinds() == kinds
            listed = await store.get(RESOURCE_CLAIMS, "data", "default")
            annotations = listed["metadata"].get("annotations") or {}
            assert annotations.get(CONSUMERS_LEFT_ANNOTATION) == marked_for
            if kinds == ["KIND_DELETED"]:
                released = heard.events[0]
                assert released.claim_json, "a deallocation (the claim lives on), not a deletion"
                assert released.claim.uid == stored["metadata"]["uid"]
                assert first.published["released-unseen"] == 1
            else:
                unchanged = listed["metadata"]["resourceVersion"]
                assert unchanged == stored["metadata"]["resourceVersion"], "nothing written"
            # A relist after 410 Gone, the claim changed meanwhile: nothing new.
            await relist(fake, first, lambda: label(fake, store, "data"))
            await settle(heard, len(kinds))
        assert heard.kinds() == kinds
        second = intake()
        async with running(second):  # a second restart: a pending claim goes out again
            again = [*kinds, "KIND_PENDING"] if kinds == ["KIND_PENDING"] else kinds
            await settle(heard, len(again))
    finally:
        await sub.unsubscribe()
    assert heard.kinds() == again
    assert first.published["released-unseen"] == (1 if kinds == ["KIND_DELETED"] else 0)
    assert second.published["released-unseen"] == 0
    final = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert (final["metadata"].get("annotations") or {}).get(CONSUMERS_LEFT_ANNOTATION) == marked_for
    assert final["metadata"]["labels"] == {"touched": "yes"}, "only the other client's write"


async def test_consumers_and_the_clearing_hidden_by_a_relist_are_seen_by_the_witness(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """Seen allocated (no consumer yet); reserved for a pod, released and its finalizer removed
    while the watch was down: the relist shows it pending without the finalizer. Released once and
    marked, as if its consumer had been seen."""
    fake, store = api
    stored = after_restart(allocation_id=ID, finalizer=True, mark="")
    stored["status"] = {"allocation": ALLOCATION}
    stored = await fake.put(RESOURCE_CLAIMS, stored)
    heard = Heard()
    sub = await nc.subscribe(subjects.all_of(SubjectKind.CLAIMS), cb=heard.on_msg)
    intake = Intake(store, Publisher(nc), watch_timeout=1.0)
    intake.written(stored["metadata"]["uid"])  # the write-back wrote it

    async def consumed_and_cleared() -> None:
        current = await store.get(RESOURCE_CLAIMS, "data", "default")
        current["status"]["reservedFor"] = [{"resource": "pods", "name": "job", "uid": "p-1"}]
        current = await fake.put(RESOURCE_CLAIMS, current)
        current["status"] = {}  # kube-controller-manager: the pod is done
        current = await fake.put(RESOURCE_CLAIMS, current)
        del current["metadata"]["finalizers"]
        await fake.put(RESOURCE_CLAIMS, current)

    try:
        async with running(intake):
            await relist(fake, intake, consumed_and_cleared)
            await settle(heard, 1)
            await relist(fake, intake, lambda: label(fake, store, "data"))
            await settle(heard, 1)
    finally:
        await sub.unsubscribe()
    assert heard.kinds() == ["KIND_DELETED"]
    assert heard.events[0].claim_json
    final = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert final["metadata"]["annotations"][CONSUMERS_LEFT_ANNOTATION] == ID
    assert intake.published["deallocated"] == 1
