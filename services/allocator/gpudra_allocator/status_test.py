"""`/statusz` of a running allocator, read over real HTTP from the service's own `serve` wiring,
against a real nats-server: the shape, and counters that follow what the replica did."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import nats
import pytest

from gpudra_allocator.conftest import gpu_claim_doc, gpu_slice_doc, pending_event, serving
from gpudra_allocator.refused_test import claim_event as claim_event_at
from gpudra_allocator.status import rfc3339
from gpudra_bus import ALLOCATION_DECISION, CLAIM_EVENT, SLICES_BUCKET, Publisher, subjects
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.statusz import until_status
from gpudrapb.v1 import claims_pb2

Event = claims_pb2.ClaimEvent

TOP = {"replica", "policy", "ready", "index", "reservations", "claims", "waiting"}
TOP |= {"deadLetters", "engine", "reserve", "lastDecisionAt"}


@pytest.fixture
async def allocator(fresh_nats_server: NatsServer) -> AsyncIterator[int]:
    async with serving(fresh_nats_server.url, retry_interval=0.5) as port:
        yield port


def slice_doc(node: str, gpus: int) -> bytes:
    return json.dumps(gpu_slice_doc(node, gpus)).encode()


def claim_event(name: str, count: int) -> claims_pb2.ClaimEvent:
    return pending_event(gpu_claim_doc(name, count))


async def test_a_fresh_replica_says_who_it_is(allocator: int) -> None:
    status = await until_status(allocator, lambda s: True)
    assert set(status) == TOP
    assert status["replica"] == "alloc-a"
    assert status["policy"] == "first-fit"
    assert status["index"] == {
        "version": 0,
        "slices": 0,
        "pools": 0,
        "devices": 0,
        "rejected": 0,
        "rewatches": 0,
        "classesVersion": 0,
    }
    assert status["claims"] == {
        "decided": 0,
        "unschedulable": 0,
        "released": 0,
        "replaced": 0,
        "stale": 0,
        "refused": 0,
        "refusedUnchanged": 0,
        "inFlight": 0,
    }
    assert status["waiting"] == {
        "claims": 0,
        "lone": 0,
        "gangs": 0,
        "pods": 0,
        "reasons": 0,
        "topReasons": [],
    }
    assert status["deadLetters"] == {"total": 0, "byKind": {}}
    assert status["engine"] == {"builds": 0, "nodesRebuilt": 0, "warmUps": 0}
    assert status["reserve"] == {
        "reserve": 0,
        "reserveFloor": 0,
        "migHomes": 1,
        "waitingLarge": None,
        "heldBack": 0,
    }
    assert status["lastDecisionAt"] is None


async def test_counters_follow_slices_decisions_and_dead_letters(
    allocator: int, fresh_nats_server: NatsServer
) -> None:
    nc = await nats.connect(fresh_nats_server.url)
    try:
        kv = await nc.jetstream().key_value(SLICES_BUCKET)
        await kv.put("node-a-slice", slice_doc("node-a", 2))
        await kv.put("node-b-slice", slice_doc("node-b", 2))
        await kv.put("broken", b"{not json")
        status = await until_status(allocator, lambda s: s["index"]["slices"] == 2)
        assert status["index"]["pools"] == 2
        assert status["index"]["devices"] == 4
        assert status["index"]["rejected"] == 1
        assert status["index"]["version"] >= 2
        # the slice changes are warmed up for, off the claim path
        status = await until_status(
            allocator, lambda s: s["engine"]["warmUps"] >= 1 and s["index"]["slices"] == 2
        )
        assert status["engine"]["builds"] >= 1
        assert status["engine"]["nodesRebuilt"] >= 2  # node-a and node-b, at least once each

        publisher = Publisher(nc)
        await publisher.publish(
            subjects.claims("default", "fits"), claim_event("fits", 1), CLAIM_EVENT
        )
        await publisher.publish(
            subjects.claims("default", "too-big"), claim_event("too-big", 8), CLAIM_EVENT
        )
        await nc.jetstream().publish(subjects.claims("default", "junk"), b"\x00not a claim event")
        status = await until_status(
            allocator,
            lambda s: s["claims"]["decided"] >= 1
            and s["waiting"]["claims"] == 1
            and s["deadLetters"]["total"] == 1,
        )
    finally:
        await nc.close()
    assert status["claims"]["unschedulable"] == 1
    assert status["waiting"]["lone"] == 1
    assert status["waiting"]["reasons"] == 1
    [top] = status["waiting"]["topReasons"]
    assert top["claims"] == 1
    assert "node(s) tried" in top["reason"]
    assert status["deadLetters"]["byKind"] == {"claims": 1}
    assert isinstance(status["lastDecisionAt"], str)
    assert status["lastDecisionAt"].endswith("Z")


async def test_a_refused_allocation_is_counted(
    allocator: int, fresh_nats_server: NatsServer
) -> None:
    """The claim-writer reports that the API server refused x's allocation (422): the replica
    counts it, and the unchanged claim offered again is counted as not decided."""
    nc = await nats.connect(fresh_nats_server.url)
    try:
        kv = await nc.jetstream().key_value(SLICES_BUCKET)
        await kv.put("node-a-slice", slice_doc("node-a", 2))
        await until_status(allocator, lambda s: s["index"]["slices"] == 1)
        decisions = await nc.subscribe(subjects.allocations("default", "x"))
        publisher = Publisher(nc)
        await publisher.publish(
            subjects.claims("default", "x"), claim_event_at(Event.KIND_PENDING, "10"), CLAIM_EVENT
        )
        msg = await decisions.next_msg(timeout=30)
        decision = ALLOCATION_DECISION.decode(msg.data, msg.headers)
        await decisions.unsubscribe()
        await publisher.publish(
            subjects.claims("default", "x"),
            claim_event_at(Event.KIND_DELETED, "11", refused=decision.allocation_id),
            CLAIM_EVENT,
        )
        status = await until_status(allocator, lambda s: s["claims"]["refused"] == 1)
        assert status["claims"]["refusedUnchanged"] == 0
        await publisher.publish(
            subjects.claims("default", "x"), claim_event_at(Event.KIND_PENDING, "11"), CLAIM_EVENT
        )
        status = await until_status(allocator, lambda s: s["claims"]["refusedUnchanged"] == 1)
    finally:
        await nc.close()
    assert status["claims"]["decided"] == 1


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        pytest.param(None, None, id="never"),
        pytest.param(0.0, "1970-01-01T00:00:00.000Z", id="epoch"),
        pytest.param(1_700_000_000.25, "2023-11-14T22:13:20.250Z", id="milliseconds"),
    ],
)
def test_rfc3339(epoch: float | None, text: str | None) -> None:
    assert rfc3339(epoch) == text
