"""An allocation the API server refuses for good (422 Invalid: its validation, or a
ValidatingAdmissionPolicy, whose default reason is Invalid), against the HTTP-level fake API: the
claim must say why it is not allocated (the design's "every claim ends allocated or with a
readable reason"), once, and the decision is not tried again in a loop."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from gpudra_bus import Publisher
from gpudra_claim_writer.claims import UNSCHEDULABLE_ANNOTATION
from gpudra_claim_writer.conftest import cancel_and_wait, decide, new_claim, until
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

# The two writes of an allocation the API may refuse: the status (the allocation itself) and the
# metadata (finalizer and annotations) before it.
REFUSED_WRITES = pytest.mark.parametrize(
    "path",
    [
        pytest.param("resourceclaims/c1/status", id="allocation-status-write"),
        pytest.param("resourceclaims/c1", id="allocation-metadata-write"),
    ],
)


@REFUSED_WRITES
async def test_an_allocation_the_api_refuses_leaves_a_readable_reason(
    nc: Client, api: tuple[FakeKubeApi, ApiStore], path: str
) -> None:
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("c1"))
    # Only the first matching PUT is refused: the reason's own write must get through.
    fake.inject_error(422, reason="Invalid", method="PUT", path_contains=path)
    publisher = Publisher(nc)
    writeback = Writeback(nc, store, publisher, consumer="refused-test")
    task = asyncio.create_task(writeback.run())
    try:
        await decide(publisher, claim)
        await until(lambda: sum(writeback.dead_letters.values()) == 1)
        await asyncio.sleep(0.5)  # a retry loop would write or fail again meanwhile
    finally:
        await cancel_and_wait(task)
    stored = await store.get(RESOURCE_CLAIMS, "c1", "default")
    assert not (stored.get("status") or {}).get("allocation")
    reason = (stored["metadata"].get("annotations") or {}).get(UNSCHEDULABLE_ANNOTATION, "")
    assert "refused" in reason, reason
    assert "422" in reason, reason
    assert writeback.counts["refused"] == 1
    assert writeback.counts["allocated"] == 0
    assert sum(writeback.dead_letters.values()) == 1
