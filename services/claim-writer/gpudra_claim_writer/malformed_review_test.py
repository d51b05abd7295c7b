"""Claims of the wrong shape in the standalone claim store (written past `gpudra apply`'s checks,
e.g. with a plain KV put: the store validates no schema, unlike an API server): each is one
claim's problem, never the end of the intake for every claim (a loop that raised would end the
service, and every restart would meet the same claim)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_bus import Publisher
from gpudra_claim_writer.claims import (
    ClaimState,
    allocation_of,
    class_names,
    state_of,
    with_allocation,
)
from gpudra_claim_writer.conftest import ALLOCATION, cancel_and_wait, new_claim, until
from gpudra_claim_writer.intake import Intake
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS

# (the claim's shape, pending claims offered: the good one, and a bad one that names gpudra's class)
SHAPES = [
    pytest.param({"spec": "gpu"}, 1, id="spec-not-an-object"),
    pytest.param({"spec": {"devices": "gpu"}}, 1, id="devices-not-an-object"),
    pytest.param({"spec": {"devices": {"requests": "gpu"}}}, 1, id="requests-not-a-list"),
    pytest.param(
        {"spec": {"devices": {"requests": [{"name": "r", "firstAvailable": 3}]}}},
        1,
        id="first-available-not-a-list",
    ),
    # Read as not allocated: offered as pending (an allocation is written in its place).
    pytest.param({"status": "allocated"}, 2, id="status-not-an-object"),
    pytest.param({"status": {"allocation": "n1/gpu-0"}}, 2, id="allocation-not-an-object"),
]


@pytest.mark.parametrize(("shape", "pending"), SHAPES)
async def test_a_malformed_claim_does_not_stop_the_intake(
    nc: Client, shape: dict[str, Any], pending: int
) -> None:
    store = KvStore(nc)
    bad = await store.create(RESOURCE_CLAIMS, {**new_claim("bad"), **shape})
    if "status" in shape:  # a create drops the status: written through its subresource
        await store.replace_status(RESOURCE_CLAIMS, {**bad, "status": shape["status"]})
    await store.create(RESOURCE_CLAIMS, new_claim("good"))
    intake = Intake(store, Publisher(nc), ownership=Ownership(store))
    task = asyncio.create_task(intake.run())
    try:
        await until(lambda: task.done() or intake.published["pending"] == pending)
        await asyncio.sleep(0.1)
        assert not task.done(), task.exception()
    finally:
        await cancel_and_wait(task)
    assert intake.published["pending"] == pending


@pytest.mark.parametrize(
    "status",
    [
        pytest.param("allocated", id="status-not-an-object"),
        pytest.param({"allocation": "n1/gpu-0"}, id="allocation-not-an-object"),
    ],
)
def test_a_claim_whose_status_has_the_wrong_shape_is_not_allocated(status: object) -> None:
    claim = {**new_claim("bad"), "status": status}
    assert state_of(claim) is ClaimState.PENDING
    assert class_names(claim) == {"gpu.nvidia.com"}
    written = with_allocation(claim, ALLOCATION)
    assert written is not None
    assert allocation_of(written) == ALLOCATION
