"""Write-back through a real nats-server into the standalone claim store: what the claim looks
like at every revision the write-back produces."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_api import ALLOCATION_ID_ANNOTATION
from gpudra_bus import (
    ALLOCATION_DECISION,
    Publisher,
    subjects,
)
from gpudra_claim_writer.claims import FINALIZER, UNSCHEDULABLE_ANNOTATION
from gpudra_claim_writer.conftest import (
    ALLOCATION,
    Heard,
    cancel_and_wait,
    decide,
    new_claim,
    until,
)
from gpudra_claim_writer.writeback import Writeback, decision_id
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS
from gpudra_kube.store import WatchEvent
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.kvkeys import BucketReads
from gpudra_testing.nats_queue import queued
from gpudrapb.v1 import claims_pb2


def annotations_of(claim: dict[str, Any]) -> dict[str, str]:
    return dict(claim["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    "reason_first",
    [
        pytest.param(True, id="waited-with-a-reason"),
        pytest.param(False, id="allocated-at-once"),
    ],
)
async def test_no_revision_shows_an_allocation_beside_a_reason(
    nc: Client, reason_first: bool
) -> None:
    store = KvStore(nc)
    publisher = Publisher(nc)
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    seen: list[WatchEvent] = []

    async def follow() -> None:
        version = claim["metadata"]["resourceVersion"]
        async for event in store.watch(RESOURCE_CLAIMS, "default", resource_version=version):
            seen.append(event)

    writeback = Writeback(nc, store, publisher, consumer="writeback-test")
    tasks = [asyncio.create_task(follow()), asyncio.create_task(writeback.run())]
    try:
        if reason_first:
            await decide(publisher, claim, reason="needs 2 GPUs, 1 free")
            await until(
                lambda: any(UNSCHEDULABLE_ANNOTATION in annotations_of(e.object) for e in seen)
            )
        await decide(publisher, claim)
        await until(lambda: writeback.counts["allocated"] == 1)
        await until(lambda: any((e.object.get("status") or {}).get("allocation") for e in seen))
    finally:
        await cancel_and_wait(*tasks)
    allocated = [e.object for e in seen if (e.object.get("status") or {}).get("allocation")]
    assert allocated, "the allocation was written"
    for obj in allocated:
        assert UNSCHEDULABLE_ANNOTATION not in annotations_of(obj), "a stale reason beside it"
        assert FINALIZER in obj["metadata"]["finalizers"], "finalizer first, as kube-scheduler"
    # Two writes for the allocation itself: the metadata (finalizer, reason gone) and the status.
    # Counted by revision, not by events: a watch may skip a value the next one replaced (the
    # bucket keeps one per key), e.g. when it re-creates its consumer on a loaded machine.
    reasons = [e for e in seen if UNSCHEDULABLE_ANNOTATION in annotations_of(e.object)]
    start = reasons[-1].resource_version if reason_first else claim["metadata"]["resourceVersion"]
    assert int(allocated[-1]["metadata"]["resourceVersion"]) - int(start) == 2


def pod_naming(name: str, claim_name: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("consumers_left", "pod_phase", "reoffered", "alone"),
    [
        pytest.param("unmarked", "", 0, 0, id="left-unseen-not-marked-yet-waits"),
        pytest.param("unmarked", "Pending", 1, 0, id="left-unseen-new-pod-takes-it"),
        pytest.param(True, "", 0, 0, id="consumers-left-no-pod-waits"),
        pytest.param(True, "Succeeded", 0, 0, id="consumers-left-finished-pod-waits"),
        pytest.param(True, "Pending", 1, 0, id="consumers-left-new-pod-takes-it"),
        pytest.param(False, "", 0, 1, id="never-consumed-goes-alone"),
        pytest.param(False, "Pending", 1, 0, id="never-consumed-goes-with-its-pod"),
    ],
)
async def test_a_released_claim_goes_out_again_only_as_its_consumers_allow(
    nc: Client, consumers_left: bool | str, pod_phase: str, reoffered: int, alone: int
) -> None:
    store = KvStore(nc)
    manifest = new_claim("named")
    if consumers_left == "unmarked":
        # Cleared while nobody watched: its release may come back before the intake's mark.
        manifest["metadata"]["annotations"] = {"gpudra.io/allocation-id": "0123"}
    elif consumers_left:
        manifest["metadata"]["annotations"] = {"gpudra.io/consumers-left": "true"}
    claim = await store.create(RESOURCE_CLAIMS, manifest)
    if pod_phase:
        user = await store.create(PODS, pod_naming("user", "named", pod_phase))
        user["status"] = {"phase": pod_phase}
        await store.replace_status(PODS, user)
    offers: list[str] = []

    async def reoffer(c: dict[str, Any]) -> bool:
        """As `PodUnits.reoffer`: True once it went out with a pod that uses it (any pod)."""
        if pod_phase:
            offers.append(c["metadata"]["name"])
        return bool(pod_phase)

    sub = await nc.subscribe(subjects.claims("default", "named"))
    writeback = Writeback(nc, store, Publisher(nc), consumer="released-test", reoffer=reoffer)
    meta = claim["metadata"]
    ref = claims_pb2.ClaimRef(namespace="default", name="named", uid=meta["uid"])
    await writeback._released(claims_pb2.Released(claim=ref, reason="deallocated"))
    await nc.flush()
    published = await queued(nc, sub)
    await sub.unsubscribe()
    assert len(offers) == reoffered
    assert len(published) == alone
    assert writeback.counts["waiting"] == (1 if consumers_left and not reoffered else 0)


@pytest.mark.parametrize(
    ("changed_since", "reads_wanted"),
    [
        pytest.param(False, 0, id="as-watched-no-read"),
        # The refused write reads to say why (the store's slow path), the retry reads again.
        pytest.param(True, 2, id="changed-since-refused-then-read"),
    ],
)
async def test_a_decision_starts_from_the_claim_its_event_saw(
    nc: Client, changed_since: bool, reads_wanted: int
) -> None:
    store, other = KvStore(nc), KvStore(nc)
    claim = await other.create(RESOURCE_CLAIMS, new_claim("seen"))
    version = claim["metadata"]["resourceVersion"]
    # The intake's watch delivers the claim at `version` to this store.
    events = store.watch(RESOURCE_CLAIMS, "default", resource_version=str(int(version) - 1))
    first = await anext(events)
    await events.aclose()  # type: ignore[attr-defined]
    assert first.object["metadata"]["resourceVersion"] == version
    if changed_since:
        claim["metadata"]["labels"] = {"changed": "since"}
        await other.replace(RESOURCE_CLAIMS, claim)
    reads = await BucketReads.of(nc, "gpudra-claims")
    publisher = Publisher(nc)
    writeback = Writeback(nc, store, publisher, consumer="seen-test")
    task = asyncio.create_task(writeback.run())
    try:
        ref = claims_pb2.ClaimRef(
            namespace="default", name="seen", uid=claim["metadata"]["uid"], resource_version=version
        )
        decision = claims_pb2.AllocationDecision(
            claim=ref,
            outcome=claims_pb2.AllocationDecision.OUTCOME_ALLOCATED,
            allocation_json=json.dumps(ALLOCATION).encode(),
            node_name="n1",
        )
        await publisher.publish(
            subjects.allocations("default", "seen"), decision, ALLOCATION_DECISION, msg_id="s/1"
        )
        await until(lambda: writeback.counts["allocated"] == 1)
    finally:
        await cancel_and_wait(task)
    await nc.flush()
    read = len(await reads.so_far())
    await reads.close()
    stored = await other.get(RESOURCE_CLAIMS, "seen", "default")
    assert stored["status"]["allocation"] == ALLOCATION
    assert FINALIZER in stored["metadata"]["finalizers"]
    # Nothing written meanwhile is lost: the refused write was decided again on a fresh read.
    assert stored["metadata"].get("labels") == ({"changed": "since"} if changed_since else None)
    assert read == reads_wanted


async def allocated_decision(store: KvStore, name: str) -> claims_pb2.AllocationDecision:
    """Claim `default/name` created pending, and a decision allocating it `ALLOCATION` on n1."""
    claim = await store.create(RESOURCE_CLAIMS, new_claim(name))
    ref = claims_pb2.ClaimRef(namespace="default", name=name, uid=claim["metadata"]["uid"])
    return claims_pb2.AllocationDecision(
        claim=ref,
        outcome=claims_pb2.AllocationDecision.OUTCOME_ALLOCATED,
        allocation_json=json.dumps(ALLOCATION).encode(),
        node_name="n1",
    )


async def test_the_allocation_carries_the_id_of_its_decision(nc: Client) -> None:
    """Written with the finalizer; a redelivery of the same decision writes nothing new, a
    decision written later (after a release) gets its own id."""
    store = KvStore(nc)
    decision = await allocated_decision(store, "c1")
    decision.decided_at.FromSeconds(1_700_000_000)
    writeback = Writeback(nc, store, Publisher(nc), consumer="id-test")
    await writeback._allocated(decision)
    first = await store.get(RESOURCE_CLAIMS, "c1", "default")
    epoch = annotations_of(first)[ALLOCATION_ID_ANNOTATION]
    assert epoch == decision_id(decision)
    assert len(epoch) == 16
    assert int(epoch, 16) >= 0
    await writeback._allocated(decision)  # redelivered
    again = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    # Released (the allocation cleared), then allocated again by a later decision.
    again["status"] = {}
    await store.replace_status(RESOURCE_CLAIMS, again)
    later = claims_pb2.AllocationDecision()
    later.CopyFrom(decision)
    later.decided_at.FromSeconds(1_700_000_060)
    await writeback._allocated(later)
    second = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert annotations_of(second)[ALLOCATION_ID_ANNOTATION] == decision_id(later) != epoch


@pytest.mark.parametrize(
    ("finalizer_kept", "written_again"),
    [
        # kube-controller-manager cleared the allocation and then removed the finalizer: the
        # consumers left; writing the old decision again would hand out freed devices.
        pytest.param(False, False, id="cleared-by-its-consumers-leaving"),
        # The write-back stopped between its two writes (finalizer and id on, no allocation yet):
        # the redelivered decision is what finishes it.
        pytest.param(True, True, id="interrupted-between-the-two-writes"),
    ],
)
async def test_a_decision_delivered_again_after_its_allocation_was_cleared(
    nc: Client, finalizer_kept: bool, written_again: bool
) -> None:
    store = KvStore(nc)
    decision = await allocated_decision(store, "c1")
    writeback = Writeback(nc, store, Publisher(nc), consumer="cleared-test")
    await writeback._allocated(decision)
    written = await store.get(RESOURCE_CLAIMS, "c1", "default")
    written["status"] = {}
    cleared = await store.replace_status(RESOURCE_CLAIMS, written)
    if not finalizer_kept:
        cleared["metadata"]["finalizers"] = []
        cleared = await store.replace(RESOURCE_CLAIMS, cleared)

    await writeback._allocated(decision)  # the same decision, delivered again

    now = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert bool((now.get("status") or {}).get("allocation")) is written_again
    assert annotations_of(now)[ALLOCATION_ID_ANNOTATION] == decision_id(decision)
    if not written_again:
        assert now["metadata"]["resourceVersion"] == cleared["metadata"]["resourceVersion"]
    assert writeback.counts["cleared"] == (0 if written_again else 1)


@pytest.mark.parametrize(
    ("token", "sent"),
    [
        pytest.param("r1-0123abcd", True, id="decision-with-an-id-is-replaced"),
        pytest.param("", False, id="older-allocator-no-id-left-to-the-intake"),
    ],
)
async def test_a_claim_allocated_by_kube_scheduler_first_is_sent_back_for_adoption(
    nc: Client, token: str, sent: bool
) -> None:
    """kube-scheduler allocated an ungated pod's claim before the write-back wrote gpudra's
    decision: the claim is not touched, and the allocator is told which decision to give up."""
    store = KvStore(nc)
    decision = await allocated_decision(store, "raced")
    decision.allocation_id = token
    claim = await store.get(RESOURCE_CLAIMS, "raced", "default")
    theirs = json.loads(json.dumps(ALLOCATION))
    theirs["devices"]["results"][0]["device"] = "gpu-5"
    claim["status"] = {"allocation": theirs}
    before = await store.replace_status(RESOURCE_CLAIMS, claim)
    heard = await Heard.on(nc, subjects.claims("default", "raced"))
    writeback = Writeback(nc, store, Publisher(nc), consumer="raced-test")
    await writeback._allocated(decision)  # publishes (acknowledged) before it returns
    events = await heard.stop()

    now = await store.get(RESOURCE_CLAIMS, "raced", "default")
    assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert writeback.counts["foreign"] == 1
    assert len(events) == int(sent)
    if sent:
        (event,) = events
        assert event.kind == claims_pb2.ClaimEvent.KIND_ALLOCATED_EXTERNALLY
        assert event.replaces_allocation == token
        assert json.loads(event.claim_json)["status"]["allocation"] == theirs


async def test_the_allocation_carries_the_id_the_allocator_gave_its_decision(nc: Client) -> None:
    """Every announcement of one decision has the allocator's id for it: the claim carries that
    id, which the allocator matches to its record (an allocation made in its place)."""
    store = KvStore(nc)
    decision = await allocated_decision(store, "c1")
    decision.allocation_id = "allocator-0-0123456789ab"
    assert decision_id(decision) == "allocator-0-0123456789ab"
    await Writeback(nc, store, Publisher(nc), consumer="given-id-test")._allocated(decision)
    written = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert annotations_of(written)[ALLOCATION_ID_ANNOTATION] == "allocator-0-0123456789ab"
    again = claims_pb2.AllocationDecision()
    again.CopyFrom(decision)
    again.decided_at.FromSeconds(1_700_000_060)  # announced again: another message, the same id
    assert decision_id(again) == decision_id(decision)


@pytest.mark.parametrize(
    ("outcome", "path"),
    [
        pytest.param("allocated", "resourceclaims/c1", id="allocation-metadata-write"),
        pytest.param("allocated", "resourceclaims/c1/status", id="allocation-status-write"),
        pytest.param("unschedulable", "resourceclaims/c1", id="reason-write"),
    ],
)
async def test_a_claim_deleted_between_read_and_write_is_stale_not_a_dead_letter(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], outcome: str, path: str
) -> None:
    """The claim goes (404) after the write-back read it: the decision is done with (its devices
    released, as for a claim gone before the read), not raised as a permanent error, which
    parks a valid decision among the malformed ones (`deadLetters`, what on-call is paged for)."""
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    ref = claims_pb2.ClaimRef(namespace="default", name="c1", uid=claim["metadata"]["uid"])
    decision = claims_pb2.AllocationDecision(claim=ref, node_name="n1")
    if outcome == "allocated":
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_ALLOCATED
        decision.allocation_json = json.dumps(ALLOCATION).encode()
    else:
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE
        decision.reason = "needs 2 GPUs, 1 free"
    # The first PUT matching: the metadata write comes first, then the status write.
    fake.inject_error(404, reason="NotFound", method="PUT", path_contains=path)
    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    writeback = Writeback(nc, store, Publisher(nc), consumer="gone-test")
    try:
        if outcome == "allocated":
            await writeback._allocated(decision)
        else:
            await writeback._unschedulable(decision)
    finally:
        events = await heard.stop()
    if outcome == "allocated":
        assert writeback.counts["stale"] == 1
        assert [e.kind for e in events] == [claims_pb2.ClaimEvent.KIND_DELETED]
        assert events[0].claim.uid == claim["metadata"]["uid"]
    assert writeback.counts["allocated"] == writeback.counts["unschedulable"] == 0


@pytest.mark.parametrize("status", [401, 403])
async def test_a_write_refused_to_the_claim_writer_itself_is_tried_again(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], status: int
) -> None:
    """An RBAC change or a credential that lapsed refuses every write for a while: the decision
    is not malformed, so it is redelivered (after a delay) rather than dead-lettered, which left
    its devices held by the allocator for a claim that never got them."""
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    fake.inject_error(status, reason="Forbidden", method="PUT", path_contains="resourceclaims")
    publisher = Publisher(nc)
    writeback = Writeback(nc, store, publisher, consumer="forbidden-test")
    task = asyncio.create_task(writeback.run())
    try:
        await decide(publisher, claim)
        await until(lambda: writeback.counts["allocated"] == 1, timeout=30.0)
    finally:
        await cancel_and_wait(task)
    assert writeback.counts["forbidden"] == 1
    assert sum(writeback.dead_letters.values()) == 0
    stored = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert stored["status"]["allocation"] == ALLOCATION
