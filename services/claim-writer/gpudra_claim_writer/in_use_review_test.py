"""A decision delivered again for a claim that is being deleted while a pod still holds it
(kubernetes mode, against the HTTP-level fake API): its devices stay held until the last consumer
is off (the intake's "deleting-in-use"), so the write-back must not release them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_bus import Publisher, subjects
from gpudra_claim_writer.conftest import ALLOCATION, Heard, new_claim
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2

POD = {"resource": "pods", "name": "user", "uid": "0f6f3c2e-0000-4000-8000-000000000001"}


def decision_for(
    claim: dict[str, Any], allocation: dict[str, Any]
) -> claims_pb2.AllocationDecision:
    meta = claim["metadata"]
    return claims_pb2.AllocationDecision(
        claim=claims_pb2.ClaimRef(namespace="default", name=meta["name"], uid=meta["uid"]),
        outcome=claims_pb2.AllocationDecision.OUTCOME_ALLOCATED,
        allocation_json=json.dumps(allocation).encode(),
        node_name="n1",
        allocation_id="allocator-0-000000000001",
    )


@pytest.mark.parametrize(
    ("in_use", "kinds"),
    [
        # The pod still runs on the devices: nothing is released (the intake does it once the
        # pod is off the claim), and the claim is left as it is.
        pytest.param(True, [], id="reserved-nothing-released"),
        # Nobody uses it any more: the devices may go, as for a claim that is gone.
        pytest.param(False, ["KIND_DELETED"], id="unreserved-released"),
    ],
)
async def test_a_decision_delivered_again_for_a_claim_deleted_while_in_use(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], in_use: bool, kinds: list[str]
) -> None:
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    decision = decision_for(claim, ALLOCATION)
    writeback = Writeback(nc, store, Publisher(nc), consumer="in-use-test")
    await writeback._allocated(decision)
    written = await store.get(RESOURCE_CLAIMS, "c1", "default")
    if in_use:  # kube-scheduler reserved it for the pod it bound
        written["status"]["reservedFor"] = [POD]
        await store.replace_status(RESOURCE_CLAIMS, written)
    await store.delete(RESOURCE_CLAIMS, "c1", "default")  # the finalizer keeps it: Terminating
    before = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert before["metadata"].get("deletionTimestamp")

    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    try:
        await writeback._allocated(decision)  # its ack was lost: delivered again
    finally:
        await heard.stop()  # what it published is all here: it waited for the acks
    assert heard.kinds() == kinds
    after = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_claim_deleted_while_in_use_on_other_devices_is_adopted_not_released(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """kube-scheduler allocated the claim (other devices) before the decision was written, the
    pod runs, and the claim is being deleted: the allocator must hold the devices in use and give
    up the decision's, as for a claim that is not being deleted."""
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    theirs = json.loads(json.dumps(ALLOCATION))
    theirs["devices"]["results"][0]["device"] = "gpu-5"
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim = await store.replace(RESOURCE_CLAIMS, claim)
    claim["status"] = {"allocation": theirs, "reservedFor": [POD]}
    await store.replace_status(RESOURCE_CLAIMS, claim)
    await store.delete(RESOURCE_CLAIMS, "c1", "default")

    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    writeback = Writeback(nc, store, Publisher(nc), consumer="in-use-foreign-test")
    try:
        await writeback._allocated(decision_for(claim, ALLOCATION))
    finally:
        await heard.stop()
    assert heard.kinds() == ["KIND_ALLOCATED_EXTERNALLY"]
    (event,) = heard.events
    assert event.replaces_allocation == "allocator-0-000000000001"
    assert json.loads(event.claim_json)["status"]["allocation"] == theirs
    assert writeback.counts["foreign"] == 1
