"""An allocation the API server refused to store (422), as the claim-writer reports it: a
deallocation naming the refused decision (`refused_allocation`). Against a real nats-server with
the worker's own loop: the decision's devices are freed and the release confirmed (`Released`,
reason "refused"), and the claim is not decided again until it has changed, so the refusal does
not repeat in a loop."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from gpudra_allocator.conftest import gpu_claim_doc
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.recreated_stream_test import bus, recorded, running, send
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.tombstones import TombstoneCollector
from gpudra_allocator.worker import Worker
from gpudra_bus import RELEASED, schema_of, subjects
from gpudra_testing.waiting import until
from gpudrapb.v1 import claims_pb2

__all__ = ["bus"]

Event = claims_pb2.ClaimEvent


def claim_event(
    kind: Event.Kind.ValueType, rv: str, generation: int = 1, refused: str = ""
) -> Event:
    """An event of claim `default/x` (uid `uid-x`, 1 GPU) at resourceVersion `rv`; with
    `refused`, the claim-writer's report that the API server refused that allocation."""
    doc = gpu_claim_doc("x", 1)
    doc["metadata"].update(resourceVersion=rv, generation=generation)
    ref = claims_pb2.ClaimRef(
        namespace="default", name="x", uid="uid-x", generation=generation, resource_version=rv
    )
    return Event(
        kind=kind, claim=ref, claim_json=json.dumps(doc).encode(), refused_allocation=refused
    )


def refusal(rv: str, allocation: str) -> Event:
    return claim_event(Event.KIND_DELETED, rv, refused=allocation)


@pytest_asyncio.fixture
async def allocations(bus: tuple[Client, KeyValue]) -> AsyncIterator[Subscription]:
    """What the allocator publishes about x (decisions, releases), queued without a callback."""
    sub = await bus[0].subscribe(subjects.allocations("default", "x"))
    yield sub
    await sub.unsubscribe()


async def released(sub: Subscription) -> claims_pb2.Released:
    """The next `Released` about x (decisions before it are skipped)."""
    for _ in range(20):
        msg = await sub.next_msg(timeout=10)
        if schema_of(msg.headers).name == RELEASED.schema.name:
            return RELEASED.decode(msg.data, msg.headers)
    raise AssertionError("no Released about x")


async def allocated(worker: Worker, seq: int) -> ClaimRecord:
    record = await recorded(worker, "allocated", seq)
    await until(lambda: worker._res.holdings_of("uid-x"), "x's devices held")
    return record


@pytest.mark.parametrize(
    ("edited", "generation"),
    [
        pytest.param("12", 1, id="annotations-edited"),
        pytest.param("12", 2, id="spec-edited"),
    ],
)
async def test_a_refused_allocation_frees_its_devices_until_the_claim_changes(
    bus: tuple[Client, KeyValue], allocations: Subscription, edited: str, generation: int
) -> None:
    """x is decided at resourceVersion 10; the API server refuses the allocation, the
    claim-writer writes the reason (11) and reports the refusal: x's devices are freed. x offered
    again unchanged (a claim-writer's restart, its relist) is not decided; edited, it is."""
    nc, kv = bus
    async with running(nc, kv) as worker:
        await send(nc, claim_event(Event.KIND_PENDING, "10"))
        first = await allocated(worker, 1)

        await send(nc, refusal("11", first.claim_id))
        mark = await recorded(worker, "cleared", 2)
        assert mark.refused == (1, "11"), mark
        await until(lambda: not worker._res.holdings_of("uid-x"), "x's devices freed")
        confirmed = await released(allocations)
        assert confirmed.reason == "refused"
        assert confirmed.claim.uid == "uid-x"

        decided = worker.decided
        await send(nc, claim_event(Event.KIND_PENDING, "11"))
        await until(lambda: worker.refused_unchanged == 1, "the unchanged claim's event handled")
        assert worker.decided == decided, "not decided again"
        assert await worker._res.stored("uid-x") == mark
        assert not worker._res.holdings_of("uid-x")

        await send(nc, claim_event(Event.KIND_PENDING, edited, generation))
        second = await allocated(worker, 4)
        assert second.token != first.token
        assert worker.decided == decided + 1
        assert worker.refused_unchanged == 1


async def test_a_refusal_of_an_earlier_decision_keeps_the_current_one(
    bus: tuple[Client, KeyValue],
) -> None:
    """The refusal names an allocation that is not the one x's record holds (a decision before
    it): x keeps its devices."""
    nc, kv = bus
    async with running(nc, kv) as worker:
        await send(nc, claim_event(Event.KIND_PENDING, "10"))
        record = await allocated(worker, 1)
        await send(nc, refusal("11", "an-earlier-decision"))
        await until(lambda: worker.stale == 1, "the refusal handled")
        assert await worker._res.stored("uid-x") == record
        assert {h.token for _, h in worker._res.holdings_of("uid-x")} == {record.token}


def test_a_refused_mark_keeps_what_it_was_refused_at() -> None:
    mark = ClaimRecord("cleared", claim="default/x", seq=3, epoch=9, refused=(2, "11"))
    assert ClaimRecord.decode(mark.encode()) == mark
    plain = ClaimRecord("cleared", claim="default/x", seq=3)
    assert b"refused" not in plain.encode(), "a plain deallocation's mark reads as before"
    assert ClaimRecord.decode(plain.encode()).refused is None


async def test_a_refused_mark_outlives_the_tombstone_grace_while_the_claim_lives(
    nc: Client, kv: KeyValue
) -> None:
    """A cleared mark is collected after the grace (it only fences off late events), but a
    refused one is what keeps an unchanged claim from being decided and refused again (offered
    anew at any claim-writer restart, hours later): it stays until the claim's deletion
    replaces it with a tombstone, which is collected as usual."""
    res = Reservations(kv)
    await res.forget("uid-x", "default/x", seq=3, refused=(1, "11"))
    later = TombstoneCollector(nc.jetstream(), kv, 600.0, clock=lambda: time.time() + 7200)
    assert await later.collect() == 0
    assert await res.stored("uid-x") == ClaimRecord(
        "cleared", claim="default/x", seq=3, refused=(1, "11")
    )
    await res.release("uid-x", "default/x")
    assert await later.collect() == 1
    assert await res.stored("uid-x") is None
