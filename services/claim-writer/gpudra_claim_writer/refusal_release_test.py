"""An allocation the API server refuses for good (422), against the HTTP-level fake API and a
real nats-server: besides writing the reason into the claim (`refused_review_test`), the
claim-writer tells the allocator, as kube-scheduler un-reserves after a failed status write. The
message is the deallocation the allocator already frees devices for, naming the refused
allocation (`refused_allocation`) and carrying the claim as it is after the reason was written,
so the allocator knows which resourceVersion not to decide again. The allocator's confirmation
(`Released`, reason "refused") does not offer the claim again: that would only be refused again."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client

from gpudra_bus import Publisher, subjects
from gpudra_claim_writer.claims import UNSCHEDULABLE_ANNOTATION
from gpudra_claim_writer.conftest import (
    Heard,
    cancel_and_wait,
    decide,
    new_claim,
    until,
)
from gpudra_claim_writer.refused_review_test import REFUSED_WRITES
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2

Event = claims_pb2.ClaimEvent


@REFUSED_WRITES
async def test_a_refused_allocation_is_released_to_the_allocator(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], path: str
) -> None:
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    fake.inject_error(422, reason="Invalid", method="PUT", path_contains=path)
    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    publisher = Publisher(nc)
    writeback = Writeback(nc, store, publisher, consumer="refusal-release-test")
    task = asyncio.create_task(writeback.run())
    try:
        await decide(publisher, claim, allocation_id="alloc-1")
        events = await heard.settle(1)
        await until(lambda: sum(writeback.dead_letters.values()) == 1)
    finally:
        await cancel_and_wait(task)
        await heard.stop()

    stored = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert "refused" in stored["metadata"]["annotations"][UNSCHEDULABLE_ANNOTATION]
    for event in events:  # one, unless a redelivery repeated it (the stream drops the repeat)
        assert event.kind == Event.KIND_DELETED
        assert event.refused_allocation == "alloc-1"
        assert event.claim.uid == claim["metadata"]["uid"]
        assert (
            event.claim.resource_version == stored["metadata"]["resourceVersion"]
        ), "the claim as it is after the reason was written"
        assert event.claim.generation == stored["metadata"]["generation"]
        carried = json.loads(event.claim_json)
        assert carried["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert heard.ids[0] == f"{claim['metadata']['uid']}/refused/alloc-1"
    assert writeback.counts["refused"] == 1


async def test_the_allocators_confirmation_offers_the_claim_nowhere(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    """`Released` ("refused") for a pending claim publishes nothing: the claim waits for a
    change (a deallocation's `Released` would offer it again)."""
    _, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    writeback = Writeback(nc, store, Publisher(nc), consumer="refusal-release-test")
    meta = claim["metadata"]
    ref = claims_pb2.ClaimRef(namespace="default", name="c1", uid=meta["uid"])
    await writeback._released(claims_pb2.Released(claim=ref, reason="refused"))
    assert await heard.stop() == []
    assert writeback.counts["released"] == 1

    heard = await Heard.on(nc, subjects.claims("default", "c1"))
    await writeback._released(claims_pb2.Released(claim=ref, reason="deallocated"))
    (offered,) = await heard.stop()
    assert offered.kind == Event.KIND_PENDING, "a deallocation's release offers it again"
