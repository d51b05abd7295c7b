"""Intake against a real nats-server and the standalone claim store: which claims are offered."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_api import ALLOCATION_ID_ANNOTATION
from gpudra_bus import CLAIMS_BUCKET, Publisher, subjects
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.claims import FINALIZER, UNSCHEDULABLE_ANNOTATION
from gpudra_claim_writer.conftest import ALLOCATION, Heard, cancel_and_wait, until
from gpudra_claim_writer.consumers import (
    ADOPTED_PREFIX,
    CONSUMERS_LEFT_ANNOTATION,
    allocation_id,
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
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
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
    await heard.settle(len(after))
    await heard.stop()
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
        await cancel_and_wait(task)


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
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))

    def intake() -> Intake:
        return Intake(store, Publisher(nc), watch_timeout=1.0, ownership=ownership, pods=units)

    try:
        first = intake()
        async with running(first):  # the first start after the clearing
            await heard.settle(len(kinds))
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
            await heard.settle(len(kinds))
        assert heard.kinds() == kinds
        second = intake()
        async with running(second):  # a second restart: a pending claim goes out again
            again = [*kinds, "KIND_PENDING"] if kinds == ["KIND_PENDING"] else kinds
            await heard.settle(len(again))
    finally:
        await heard.stop()
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
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
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
            await heard.settle(1)
            await relist(fake, intake, lambda: label(fake, store, "data"))
            await heard.settle(1)
    finally:
        await heard.stop()
    assert heard.kinds() == ["KIND_DELETED"]
    assert heard.events[0].claim_json
    final = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert final["metadata"]["annotations"][CONSUMERS_LEFT_ANNOTATION] == ID
    assert intake.published["deallocated"] == 1


# -- allocations kube-scheduler made (no scheduling gate): adopted, and given the witness --------

NIC = {
    "devices": {
        "results": [{"request": "r", "driver": "nic.example.com", "pool": "n1", "device": "nic-0"}]
    }
}
ADOPTED = ADOPTED_PREFIX + "0123456789abcdef"


def scheduled(
    *, allocation_id: str = "", mark: str = "", allocation: dict[str, Any] = ALLOCATION
) -> dict[str, Any]:
    """Claim `data` as kube-scheduler leaves it for pod job-1: the finalizer, the allocation, the
    pod in `reservedFor`; the allocation id and consumers-left mark as given."""
    stored = after_restart(allocation_id=allocation_id, finalizer=True, mark=mark)
    stored["status"] = {
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": "job-1", "uid": "pod-1"}],
    }
    return stored


def annotations_of(claim: dict[str, Any]) -> dict[str, str]:
    return dict(claim["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("carried", "mark", "allocation", "finalizer", "replaced"),
    [
        pytest.param("", "", ALLOCATION, True, True, id="no-id-gets-one"),
        pytest.param(
            ID, ID, ALLOCATION, True, True, id="id-of-an-earlier-cleared-allocation-replaced"
        ),
        pytest.param(ID, "", ALLOCATION, True, False, id="gpudras-own-id-untouched"),
        pytest.param(
            ID, "fedcba9876543210", ALLOCATION, True, False, id="own-id-marked-for-an-earlier-one"
        ),
        pytest.param(ADOPTED, "", ALLOCATION, True, False, id="adopted-before-untouched"),
        pytest.param("", "", NIC, True, False, id="another-drivers-allocation-untouched"),
        pytest.param("", "", ALLOCATION, False, False, id="allocated-without-the-finalizer"),
    ],
)
async def test_an_allocation_gpudra_did_not_write_gets_an_id_once(
    nc: Client,
    api: tuple[FakeKubeApi, ApiStore],
    carried: str,
    mark: str,
    allocation: dict[str, Any],
    finalizer: bool,
    replaced: bool,
) -> None:
    """First sight (a start lists it allocated): adopted, with an allocation id unless the one it
    carries names this allocation; a relist after 410 and a second start write nothing more.
    Without the finalizer "no finalizer" would witness nothing: no id."""
    fake, store = api
    listed = scheduled(allocation_id=carried, mark=mark, allocation=allocation)
    if not finalizer:
        del listed["metadata"]["finalizers"]
    stored = await fake.put(RESOURCE_CLAIMS, listed)
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))

    def intake() -> Intake:
        return Intake(store, Publisher(nc), watch_timeout=1.0)

    try:
        first = intake()
        async with running(first):
            await heard.settle(1)
            witnessed = await store.get(RESOURCE_CLAIMS, "data", "default")
            given = annotations_of(witnessed).get(ALLOCATION_ID_ANNOTATION, "")
            if replaced:
                assert given.startswith(ADOPTED_PREFIX)
                assert given not in (carried, mark)
            else:
                assert given == carried
                assert witnessed["metadata"]["resourceVersion"] == (
                    stored["metadata"]["resourceVersion"]
                ), "nothing written"
            assert annotations_of(witnessed).get(CONSUMERS_LEFT_ANNOTATION, "") == mark
            assert first.published["witnessed"] == (1 if replaced else 0)
            assert heard.kinds() == ["KIND_ALLOCATED_EXTERNALLY"]
            adopted = json.loads(heard.events[0].claim_json)
            assert allocation_id(adopted) == given, "the allocator hears of it with its id"
            assert f"/external/{given or stored['metadata']['resourceVersion']}/" in heard.ids[0]
            # The allocation it may have taken the place of: the one whose id it carried.
            assert heard.events[0].replaces_allocation == carried
            await relist(fake, first, lambda: label(fake, store, "data"))
            await heard.settle(1)
        second = intake()
        async with running(second):  # a restart: adopted again (a no-op), the id stays
            await heard.settle(2)
    finally:
        await heard.stop()
    assert heard.kinds() == ["KIND_ALLOCATED_EXTERNALLY"] * 2
    if given:
        assert heard.ids[1] == heard.ids[0], "the same allocation, the same message id"
    assert first.published["witnessed"] == (1 if replaced else 0)
    assert second.published["witnessed"] == 0
    final = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert annotations_of(final).get(ALLOCATION_ID_ANNOTATION, "") == given
    assert final["metadata"]["labels"] == {"touched": "yes"}, "only the other client's write"


@pytest.mark.parametrize(
    ("first_by", "consumed"),
    [
        pytest.param("kube-scheduler", True, id="adopted-then-consumed-and-cleared"),
        pytest.param("kube-scheduler", False, id="adopted-then-cleared-unused"),
        pytest.param("gpudra", True, id="gpudras-own-then-consumed-and-cleared"),
    ],
)
async def test_a_new_allocation_after_a_clearing_gets_a_new_id_and_its_release_is_seen(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], first_by: str, consumed: bool
) -> None:
    """Allocated (by gpudra or kube-scheduler), cleared (seen live), then allocated by
    kube-scheduler again on the very same devices: adopted again, with a new id (the old one is
    marked, or its release was reported by this process), under a new message id; cleared while
    the claim-writer is down, that allocation is released at the restart."""
    fake, store = api
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    first_claim = scheduled(allocation_id=ID if first_by == "gpudra" else "")
    if not consumed:
        del first_claim["status"]["reservedFor"]

    seen: list[str] = []

    async def on_claim(namespace: str, name: str) -> None:
        seen.append(name)

    def intake() -> Intake:
        return Intake(store, Publisher(nc), watch_timeout=1.0, on_claim=on_claim)

    async def current() -> dict[str, Any]:
        return await store.get(RESOURCE_CLAIMS, "data", "default")

    async def clear(*, finalizer: bool = True) -> None:
        """kube-controller-manager: the allocation cleared, then (`finalizer`) the finalizer
        removed."""
        cleared = await current()
        cleared["status"] = {}
        cleared = await fake.put(RESOURCE_CLAIMS, cleared)
        if finalizer:
            del cleared["metadata"]["finalizers"]
            await fake.put(RESOURCE_CLAIMS, cleared)

    live = intake()
    try:
        async with running(live):
            if first_by == "gpudra":
                first_claim["metadata"]["uid"] = "uid-data"
                live.written("uid-data")  # the write-back wrote it (and says so before the watch)
                stored = await fake.put(RESOURCE_CLAIMS, first_claim)
                await until(lambda: bool(seen))
                assert allocation_id(await current()) == ID
                assert live.published["external"] == 0
            else:
                stored = await fake.put(RESOURCE_CLAIMS, first_claim)
                await until(lambda: live.published["witnessed"] == 1)
                assert allocation_id(await current()).startswith(ADOPTED_PREFIX)
            first_id = allocation_id(await current())
            # Unused, it keeps its finalizer here: no witness marks it, only this process knows
            # that the release of `first_id` went out.
            await clear(finalizer=consumed)
            await until(lambda: live.published["deallocated"] == 1)
            mark = annotations_of(await current()).get(CONSUMERS_LEFT_ANNOTATION)
            assert mark == (first_id if consumed else None)
            # kube-scheduler allocates it again for the next pod, on the same devices.
            again = await current()
            again["metadata"]["finalizers"] = [FINALIZER]
            again["status"] = scheduled()["status"]
            await fake.put(RESOURCE_CLAIMS, again)
            adoptions = 1 if first_by == "gpudra" else 2
            await until(lambda: live.published["witnessed"] == adoptions)
            second_id = allocation_id(await current())
            assert second_id.startswith(ADOPTED_PREFIX)
            assert second_id != first_id
            await until(lambda: live.published["external"] == adoptions)
        await clear()  # while the claim-writer is down
        restarted = intake()
        async with running(restarted):
            await until(lambda: restarted.published["released-unseen"] == 1)
            for _ in range(500):  # published first, then marked
                if annotations_of(await current()).get(CONSUMERS_LEFT_ANNOTATION) == second_id:
                    break
                await asyncio.sleep(0.02)
            await heard.take()  # published before it was counted: all of it is here
    finally:
        await heard.stop()
    external = [
        i for i, k in zip(heard.ids, heard.kinds(), strict=True) if k == "KIND_ALLOCATED_EXTERNALLY"
    ]
    assert len(external) == adoptions
    assert len(set(external)) == adoptions, "a later allocation is news, not a duplicate"
    assert heard.ids[-1] == f"{stored['metadata']['uid']}/deallocated/{second_id}"
    final = await current()
    assert annotations_of(final)[CONSUMERS_LEFT_ANNOTATION] == second_id
    assert allocation_id(final) == second_id


@pytest.mark.parametrize(
    ("meanwhile", "written", "conflicts"),
    [
        pytest.param("labelled", True, 1, id="conflict-re-read-then-written"),
        pytest.param("cleared", False, 1, id="pending-again-gets-nothing"),
        pytest.param("deleting", False, 1, id="being-deleted-gets-nothing"),
        pytest.param("gone", False, 0, id="deleted-gets-nothing"),
        pytest.param("re-created", False, 1, id="re-created-gets-nothing"),
    ],
)
async def test_the_witness_write_re_reads_a_changed_claim(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], meanwhile: str, written: bool, conflicts: int
) -> None:
    """The claim changed after the event the intake handles: its write names the old
    resourceVersion and is refused; the re-read claim gets the id only while it still holds the
    allocation the intake saw, and nothing another client wrote is lost."""
    fake, store = api
    seen = await fake.put(RESOURCE_CLAIMS, scheduled())
    if meanwhile == "labelled":
        await label(fake, store, "data")
    elif meanwhile == "cleared":
        pending = await store.get(RESOURCE_CLAIMS, "data", "default")
        pending["status"] = {}
        await fake.put(RESOURCE_CLAIMS, pending)
    elif meanwhile == "deleting":  # the finalizer holds it
        await store.delete(RESOURCE_CLAIMS, "data", "default")
    else:
        unprotected = await store.get(RESOURCE_CLAIMS, "data", "default")
        del unprotected["metadata"]["finalizers"]
        await fake.put(RESOURCE_CLAIMS, unprotected)
        await store.delete(RESOURCE_CLAIMS, "data", "default")
        if meanwhile == "re-created":
            await fake.put(RESOURCE_CLAIMS, scheduled())
    intake = Intake(store, Publisher(nc))
    await intake.on_event(WatchEvent(EventType.ADDED, seen))
    assert intake.conflicts == conflicts
    assert intake.published["witnessed"] == (1 if written else 0)
    assert intake.published["external"] == 1, "adopted regardless: its devices were handed out"
    now = next(iter(fake.objects(RESOURCE_CLAIMS)), None)
    if meanwhile == "gone":
        assert now is None
        return
    assert now is not None
    given = allocation_id(now)
    assert given.startswith(ADOPTED_PREFIX) if written else given == ""
    if written:
        assert now["metadata"]["labels"] == {"touched": "yes"}, "the other client's write kept"


# -- a claim being deleted: its delete-protection finalizer is removed -------------------------


async def deleting(fake: FakeKubeApi, store: ApiStore) -> dict[str, Any]:
    """Claim `data`, allocated with the finalizer, then deleted: held by the finalizer."""
    await fake.put(RESOURCE_CLAIMS, scheduled())
    await store.delete(RESOURCE_CLAIMS, "data", "default")
    held = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert held["metadata"].get("deletionTimestamp")
    assert FINALIZER in held["metadata"]["finalizers"]
    return held


async def test_removing_a_deleted_claims_finalizer_never_touches_its_successor(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """The event the intake handles is older than the store: meanwhile the claim went (another
    client removed the finalizer) and a new claim took its name. The refused write re-reads a
    claim with another UID: that one keeps its finalizer (without it, it could be deleted while
    in use, and its allocation id without the finalizer reads as a release)."""
    fake, store = api
    old = await deleting(fake, store)
    unprotected = dict(old, metadata={**old["metadata"], "finalizers": []})
    await store.replace(RESOURCE_CLAIMS, unprotected)  # gone now
    assert not fake.objects(RESOURCE_CLAIMS)
    successor = await fake.put(RESOURCE_CLAIMS, scheduled())
    assert successor["metadata"]["uid"] != old["metadata"]["uid"]
    intake = Intake(store, Publisher(nc))
    await intake.on_event(WatchEvent(EventType.MODIFIED, old))
    assert intake.published["deleted"] == 1, "the old claim's deletion is reported"
    now = await store.get(RESOURCE_CLAIMS, "data", "default")
    assert now["metadata"]["uid"] == successor["metadata"]["uid"]
    assert now["metadata"].get("finalizers") == [FINALIZER], "the new claim's finalizer stays"


@pytest.mark.parametrize(
    "wait", [True, False], ids=["kubernetes-waits-for-the-pod", "standalone-releases-at-once"]
)
async def test_a_claim_deleted_while_a_pod_holds_it_is_released_once_the_pod_is_off(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], wait: bool
) -> None:
    """`kubectl delete` of a claim whose pod still runs: in a cluster the pod may be using the
    devices, so their release (and the finalizer) waits until kube-controller-manager has taken
    the pod off `reservedFor`; released earlier, the allocator could hand them to another claim."""
    fake, store = api
    held = await deleting(fake, store)
    assert held["status"]["reservedFor"], "job-1 still holds it"
    intake = Intake(store, Publisher(nc), wait_for_consumers=wait)
    await intake.on_event(WatchEvent(EventType.MODIFIED, held))
    if wait:
        assert intake.published["deleted"] == 0
        assert intake.published["deleting-in-use"] == 1
        still = await store.get(RESOURCE_CLAIMS, "data", "default")
        assert FINALIZER in still["metadata"]["finalizers"]
        # job-1 is gone: kube-controller-manager takes it off (and clears the allocation).
        still["status"] = {}
        left = await store.replace_status(RESOURCE_CLAIMS, still)
        await intake.on_event(WatchEvent(EventType.MODIFIED, left))
    assert intake.published["deleted"] == 1
    assert not fake.objects(RESOURCE_CLAIMS), "the finalizer is off: the claim is gone"


async def deleted_through(
    nc: Client, fake: FakeKubeApi, store: ApiStore, faults: list[tuple[int, str, str]]
) -> tuple[dict[str, Any], Intake]:
    """A claim marked for deletion, handled by a new intake while the API answers its claim
    requests with `faults` (status, reason, method; each once); the faults are cleared after."""
    held = await deleting(fake, store)
    for status, reason, method in faults:
        fake.inject_error(status, reason=reason, method=method, path_contains="resourceclaims")
    intake = Intake(store, Publisher(nc))
    await intake.on_event(WatchEvent(EventType.MODIFIED, held))
    fake.clear_faults()
    return held, intake


@pytest.mark.parametrize(
    ("faults", "removed"),
    [
        pytest.param([(409, "Conflict", "PUT")], True, id="conflict-re-read-removed"),
        pytest.param([(422, "Invalid", "PUT")], False, id="refused-logged-not-fatal"),
        pytest.param([(403, "Forbidden", "PUT")], False, id="forbidden-logged-not-fatal"),
        pytest.param(
            [(409, "Conflict", "PUT"), (404, "NotFound", "GET")], False, id="gone-on-re-read"
        ),
        pytest.param(
            [(409, "Conflict", "PUT"), (503, "ServiceUnavailable", "GET")],
            None,
            id="re-read-failing-not-fatal",
        ),
        pytest.param(
            [(409, "Conflict", "PUT"), (429, "TooManyRequests", "GET")],
            None,
            id="re-read-throttled-not-fatal",
        ),
    ],
)
async def test_a_failing_finalizer_removal_never_stops_the_intake(
    nc: Client,
    api: tuple[FakeKubeApi, ApiStore],
    faults: list[tuple[int, str, str]],
    removed: bool | None,
) -> None:
    """Whatever the API server answers the finalizer removal (a refusal, a conflict and then an
    error on the re-read), the claim's deletion is reported and the intake goes on with the next
    event: an exception here would end its loop, and with it the claim-writer (over and over,
    for a refusal that a restart meets again). `removed` None: either outcome is fine."""
    fake, store = api
    held, intake = await deleted_through(nc, fake, store, faults)
    assert intake.published["deleted"] == 1
    if removed is not None:
        assert (not fake.objects(RESOURCE_CLAIMS)) is removed
    # The next claim's event is handled as ever.
    await fake.put(RESOURCE_CLAIMS, claim("next", "gpu.nvidia.com"))
    await intake.on_event(WatchEvent(EventType.ADDED, claim("next", "gpu.nvidia.com")))
    assert intake.published["pending"] == 1


@pytest.mark.parametrize(
    ("faults", "then", "removed"),
    [
        pytest.param(
            [(503, "ServiceUnavailable", "PUT"), (503, "ServiceUnavailable", "GET")],
            None,
            True,
            id="api-away-for-write-and-re-read",
        ),
        pytest.param(
            [(409, "Conflict", "PUT"), (429, "TooManyRequests", "GET")],
            None,
            True,
            id="conflict-then-throttled",
        ),
        pytest.param(
            [(503, "ServiceUnavailable", "PUT"), (503, "ServiceUnavailable", "GET")],
            "re-created",
            False,
            id="successor-untouched",
        ),
    ],
)
async def test_a_finalizer_removal_cut_short_by_the_api_is_tried_again(
    nc: Client,
    api: tuple[FakeKubeApi, ApiStore],
    faults: list[tuple[int, str, str]],
    then: str | None,
    removed: bool,
) -> None:
    """An API-server restart (a control-plane upgrade) answers the finalizer removal and its
    re-read with 503: no further watch event comes for the claim, so without a retry it stays
    Terminating until the claim-writer restarts. A claim re-created under the name meanwhile is
    never touched."""
    fake, store = api
    held, intake = await deleted_through(nc, fake, store, faults)
    assert fake.objects(RESOURCE_CLAIMS), "the first try was cut short"
    assert intake.retrying == 1
    if then == "re-created":
        gone = dict(held, metadata={**held["metadata"], "finalizers": []})
        await store.replace(RESOURCE_CLAIMS, gone)
        await fake.put(RESOURCE_CLAIMS, scheduled())
    await intake.retry()
    assert intake.retrying == 0
    left = fake.objects(RESOURCE_CLAIMS)
    if removed:
        assert not left, "the finalizer is off: the claim is gone"
    else:
        (successor,) = left
        assert successor["metadata"]["uid"] != held["metadata"]["uid"]
        assert successor["metadata"].get("finalizers") == [FINALIZER]


async def test_the_intake_loop_retries_finalizer_removals(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """`run` tries again on its own; here its cluster-wide list and watch keep failing, so only
    the retry can remove the finalizer."""
    fake, store = api
    held = await deleting(fake, store)
    fake.inject_error(503, reason="ServiceUnavailable", path_contains="resourceclaims", times=2)
    intake = Intake(store, Publisher(nc), retry_interval=0.05)
    await intake.on_event(WatchEvent(EventType.MODIFIED, held))
    assert intake.retrying == 1
    fake.inject_error(
        503, reason="ServiceUnavailable", path_contains="v1/resourceclaims", times=10**6
    )
    task = asyncio.create_task(intake.run())
    try:
        await until(lambda: not fake.objects(RESOURCE_CLAIMS))
    finally:
        await cancel_and_wait(task)


def remembered(intake: Intake) -> int:
    """How many claims the intake keeps something about (by UID)."""
    uids = set(intake._pending_sent)
    kept_by_uid = (
        intake._allocated,
        intake._gone,
        intake._ours,
        intake._consumed,
        intake._reported,
        intake._finalizers,
    )
    for kept in kept_by_uid:
        uids |= set(kept)
    return len(uids)


@pytest.mark.parametrize("finalizer", [True, False], ids=["held-then-gone", "gone-at-once"])
async def test_the_intake_forgets_claims_that_are_gone(nc: Client, finalizer: bool) -> None:
    """A long-running claim-writer sees millions of claims come and go: what it keeps about one
    must go with it, or its memory grows with every claim ever seen."""
    intake = Intake(KvStore(nc), Publisher(nc))
    for i in range(20):
        c = claim(f"c{i}", "gpu.nvidia.com")
        await intake.on_event(WatchEvent(EventType.ADDED, c))
        if i % 2:
            allocated = dict(c, status={"allocation": ALLOCATION})
            intake.written(c["metadata"]["uid"])
            await intake.on_event(WatchEvent(EventType.MODIFIED, allocated))
            c = allocated
        if finalizer:
            meta = {**c["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
            await intake.on_event(WatchEvent(EventType.MODIFIED, dict(c, metadata=meta)))
        await intake.on_event(WatchEvent(EventType.DELETED, c))
    assert intake.published["deleted"] == 20, "each deletion reported once"
    assert remembered(intake) == 0


def sized(name: str, size: int) -> dict[str, Any]:
    """A gpudra claim of at least `size` bytes of JSON, as generated specs may be: requests of up
    to 32 CEL selectors of 10,000 characters each (the API's limits)."""
    big = claim(name, "gpu.nvidia.com")
    del big["metadata"]["uid"]  # the fake API server gives one
    selector = {"cel": {"expression": ("device.driver == 'gpu.nvidia.com' || true" * 250)[:10_000]}}
    requests: list[dict[str, Any]] = []
    while len(json.dumps(big)) < size:
        if not requests or len(requests[-1]["exactly"]["selectors"]) == 32:
            requests.append(
                {"name": f"r{len(requests)}", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
            )
            requests[-1]["exactly"]["selectors"] = []
            big["spec"]["devices"]["requests"] = requests
        requests[-1]["exactly"]["selectors"].append(selector)
    return big


def using(*claims: str) -> dict[str, Any]:
    """Pod `p`, naming `claims`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "pod-p"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
        },
    }


async def test_a_claim_too_large_for_the_bus_is_refused_never_fatal(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """A claim over the ClaimEvent limit (1 MiB; the API server stores claims up to 1.5 MiB)
    cannot reach the allocator. That error, raised, ended the intake (and the pod watch, for a
    pod naming it): one such claim stopped the claim-writer for every claim, after every restart
    too. Now it is counted and left out, and the next claims go on as ever."""
    fake, store = api
    stored = await fake.put(RESOURCE_CLAIMS, sized("huge", 1_300_000))
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    intake = Intake(store, Publisher(nc), ownership=ownership, pods=units)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))  # no pod uses it
    try:
        await intake.on_event(WatchEvent(EventType.ADDED, stored))
        await intake.on_event(WatchEvent(EventType.MODIFIED, stored))
        assert intake.published["oversized"] == 1
        # A pod naming it, beside a claim that fits: nothing raised out of the pod watch.
        await fake.put(RESOURCE_CLAIMS, after_restart(allocation_id="", finalizer=False, mark=""))
        await units.pod_changed(WatchEvent(EventType.ADDED, using("huge", "data")))
        await heard.settle(1)
        await intake.on_event(WatchEvent(EventType.ADDED, claim("next", "gpu.nvidia.com")))
        await heard.settle(2)
    finally:
        await heard.stop()
    assert [e.claim.name for e in heard.events] == ["data", "next"], "what fits goes out"


async def test_a_claim_too_large_for_the_bus_says_so(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """Its reason is written where users look (`gpudra.io/unschedulable`), once; with a pod it
    is not published either, also when it is just under the codec's limit: the server counts
    the headers too, and closes the connection of a client that goes over."""
    fake, store = api
    stored = await fake.put(RESOURCE_CLAIMS, sized("huge", 1_040_000))
    assert len(json.dumps(stored)) < 1024 * 1024
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    intake = Intake(store, Publisher(nc), ownership=ownership, pods=units)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
    try:
        await intake.on_event(WatchEvent(EventType.ADDED, stored))
        refused = await store.get(RESOURCE_CLAIMS, "huge", "default")
        assert "too large" in annotations_of(refused).get(UNSCHEDULABLE_ANNOTATION, "")
        await intake.on_event(WatchEvent(EventType.MODIFIED, refused))  # its own write: no news
        assert await store.get(RESOURCE_CLAIMS, "huge", "default") == refused
        await units.pod_changed(WatchEvent(EventType.ADDED, using("huge")))
        await heard.take()  # what it published, it published before it returned
    finally:
        await heard.stop()
    assert intake.published["oversized"] == 1
    assert heard.events == []


async def test_a_claim_deleted_by_plain_kv_tools_is_reported_deleted(nc: Client) -> None:
    """`nats kv del` on the claims bucket leaves a tombstone with the key only: the deletion
    still reaches the allocator under the claim's UID, or its devices would be held forever."""
    store = KvStore(nc)
    created = await store.create(RESOURCE_CLAIMS, claim("doomed", "gpu.nvidia.com"))
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    intake = Intake(store, Publisher(nc), watch_timeout=5.0)
    try:
        async with running(intake):
            await heard.settle(1)
            kv = await nc.jetstream().key_value(CLAIMS_BUCKET)
            await kv.delete("default.doomed")
            await heard.settle(2)
    finally:
        await heard.stop()
    assert heard.kinds() == ["KIND_PENDING", "KIND_DELETED"]
    assert heard.events[1].claim.uid == created["metadata"]["uid"]
    assert intake.published["deleted"] == 1
