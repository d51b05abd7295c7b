"""Events of one claim handled out of order (a redelivery, or two replicas): what the claim's record
and the devices held end up as, against a real nats-server. Each case runs the worker's handlers in
the order given, each event with its claims-stream sequence. The gang cases do the same for a
member of a gang (its record fenced like a lone claim's; a member deleted while it waits)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_allocator import reservations as reservations_module
from gpudra_allocator.conftest import gpu_claim_doc, gpu_slice
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.events import holdings_from_json
from gpudra_allocator.gang_steps_test import Slices
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.reservations_test import Watches
from gpudra_allocator.settings import Settings
from gpudra_allocator.tombstones import TombstoneCollector
from gpudra_allocator.worker import Worker
from gpudra_bus import ensure_streams, subjects
from gpudra_testing.waiting import until
from gpudrapb.v1 import claims_pb2

UID = "uid-c"
SUBJECT = subjects.claims("default", "c")
Kind = claims_pb2.ClaimEvent


@dataclass
class Delivered:
    """The parts of a JetStream message the worker's handlers use."""

    seq: int
    acks: int = 0
    subject: str = SUBJECT
    headers: dict[str, str] | None = None

    @property
    def metadata(self) -> Any:
        return SimpleNamespace(sequence=SimpleNamespace(stream=self.seq))

    async def ack(self) -> None:
        self.acks += 1

    async def in_progress(self) -> None:
        pass


def claim_event(kind: Kind.Kind.ValueType, devices: tuple[int, ...] = ()) -> Any:
    doc: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": UID},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g"}}]}},
    }
    if devices:
        doc["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "d", "pool": "node-a", "device": f"gpu-{i}"}
                        for i in devices
                    ]
                }
            }
        }
    ref = claims_pb2.ClaimRef(namespace="default", name="c", uid=UID, resource_version="1")
    return claims_pb2.ClaimEvent(kind=kind, claim=ref, claim_json=json.dumps(doc).encode())


ADOPT_0 = ("adopt", (0,))
ADOPT_1 = ("adopt", (1,))
CLEAR = ("clear", ())
PENDING = ("pending", ())


@pytest_asyncio.fixture
async def worker(nc: Client, kv: KeyValue) -> AsyncIterator[Worker]:
    await ensure_streams(nc.jetstream())  # the worker publishes `Released`
    res = Reservations(kv)
    await res.start()
    try:
        yield Worker(nc, Settings(), Engine([], "first-fit"), cast(Any, Slices({})), res)
    finally:
        await res.stop()


@pytest.mark.parametrize(
    ("events", "state", "held", "stale"),
    [
        pytest.param([(10, ADOPT_0), (11, CLEAR)], "cleared", [], 0, id="adopted-then-cleared"),
        # Another replica (or a redelivery) handles the adoption after the deallocation that
        # followed it: without the mark the claim's devices would be held for good.
        pytest.param([(11, CLEAR), (10, ADOPT_0)], "cleared", [], 1, id="late-adoption"),
        pytest.param(
            [(11, CLEAR), (12, ADOPT_1)], "allocated", ["gpu-1"], 0, id="next-allocation-adopted"
        ),
        # The deallocation of the first allocation, delivered again after the second one was
        # adopted: the second must stay held.
        pytest.param(
            [(10, ADOPT_0), (11, CLEAR), (12, ADOPT_1), (11, CLEAR)],
            "allocated",
            ["gpu-1"],
            1,
            id="late-deallocation-keeps-the-next",
        ),
        pytest.param(
            [(10, ADOPT_0), (11, CLEAR), (11, CLEAR)], "cleared", [], 0, id="deallocation-again"
        ),
        # A pending event from before the claim was allocated and cleared: not decided again
        # (the claim-writer offers the claim anew once the release is confirmed).
        pytest.param(
            [(10, ADOPT_0), (11, CLEAR), (9, PENDING)], "cleared", [], 1, id="late-pending"
        ),
    ],
)
async def test_an_event_older_than_the_claims_record_changes_nothing(
    worker: Worker,
    events: list[tuple[int, tuple[str, tuple[int, ...]]]],
    state: str,
    held: list[str],
    stale: int,
) -> None:
    msgs = []
    for seq, (what, devices) in events:
        msg = Delivered(seq)
        msgs.append(msg)
        if what == "adopt":
            await worker._adopt(
                cast(Msg, msg), claim_event(Kind.KIND_ALLOCATED_EXTERNALLY, devices)
            )
        elif what == "clear":
            await worker._deleted(cast(Msg, msg), claim_event(Kind.KIND_DELETED))
        else:
            assert await worker._settled(cast(Msg, msg), claim_event(Kind.KIND_PENDING))
    stored = await worker._res.stored(UID)
    assert stored is not None
    assert stored.state == state
    assert stored.seq == max(seq for seq, _ in events)
    assert sorted(h.device for _, h in worker._res.holdings_of(UID)) == held
    assert worker.stale == stale
    assert all(m.acks == 1 for m in msgs), "every event is acknowledged once"
    assert (await worker._res.record(UID) is None) == (state == "cleared")


def gang_event(name: str, kind: Kind.Kind.ValueType = Kind.KIND_PENDING) -> Any:
    """Member `name` (uid `uid-<name>`, 2 GPUs) of the 2-claim gang `default/g`; a DELETED event
    that carries the claim is its cleared allocation."""
    doc = gpu_claim_doc(name, 2)
    ref = claims_pb2.ClaimRef(namespace="default", name=name, uid=f"uid-{name}")
    return claims_pb2.ClaimEvent(
        kind=kind,
        claim=ref,
        claim_json=json.dumps(doc).encode(),
        gang_id="default/g",
        gang_size=2,
    )


@pytest_asyncio.fixture
async def gang_worker(nc: Client, kv: KeyValue) -> AsyncIterator[Worker]:
    await ensure_streams(nc.jetstream())
    res = Reservations(kv)
    await res.start()
    slices = Slices({n: gpu_slice(n) for n in ("node-a", "node-b")})
    try:
        yield Worker(nc, Settings(), Engine(load_classes(), "first-fit"), cast(Any, slices), res)
    finally:
        await res.stop()


async def test_a_late_deallocation_keeps_a_gang_members_next_decision(gang_worker: Worker) -> None:
    """x is decided with its gang, deallocated, and decided again as a late member; the
    deallocation delivered once more must not forget that newer decision (a gang member's record
    carries the sequence of its own event, as a lone claim's does)."""
    worker = gang_worker
    await worker._pending(cast(Msg, Delivered(10, subject="x")), gang_event("x"))
    await worker._pending(cast(Msg, Delivered(11, subject="y")), gang_event("y"))
    first = await worker._res.record("uid-x")
    assert first is not None
    assert first.seq == 10, first
    deallocation = gang_event("x", Kind.KIND_DELETED)
    await worker._deleted(cast(Msg, Delivered(12, subject="x")), deallocation)
    await worker._pending(cast(Msg, Delivered(13, subject="x")), gang_event("x"))
    second = await worker._res.record("uid-x")
    assert second is not None
    assert second.seq == 13, second
    await until(lambda: bool(worker._res.holdings_of("uid-x")))

    await worker._deleted(cast(Msg, Delivered(12, subject="x")), deallocation)
    assert worker.stale == 1
    assert await worker._res.record("uid-x") == second
    assert {h.token for _, h in worker._res.holdings_of("uid-x")} == {second.token}


async def test_a_settler_after_a_members_deallocation_holds_nothing_of_it(
    gang_worker: Worker,
) -> None:
    """Two replicas settle the same gang decision; one of them is slow, and the member x is
    deallocated in between: the slow settler must not bring x's record and devices back."""
    worker = gang_worker
    await worker._pending(cast(Msg, Delivered(10, subject="x")), gang_event("x"))
    await worker._pending(cast(Msg, Delivered(11, subject="y")), gang_event("y"))
    members = await worker._gangs.members("default/g")
    record = await worker._gangs.decision("default/g")
    assert members is not None
    assert record is not None
    await worker._deleted(cast(Msg, Delivered(12, subject="x")), gang_event("x", Kind.KIND_DELETED))
    announced = worker.decided
    assert await worker._settle_gang(record, members)
    stored = await worker._res.stored("uid-x")
    assert stored is not None
    assert stored.cleared, stored
    assert worker.decided == announced + 1, "only y is announced again"
    await until(lambda: not worker._res.holdings_of("uid-x"))
    assert worker._res.holdings_of("uid-y")


def deleted(name: str) -> Any:
    """The claim `name` is gone: a DELETED event without the claim (none of its gang either)."""
    ref = claims_pb2.ClaimRef(namespace="default", name=name, uid=f"uid-{name}")
    return claims_pb2.ClaimEvent(kind=Kind.KIND_DELETED, claim=ref)


@pytest.mark.parametrize("where", ["here", "at-another-replica"])
async def test_a_member_deleted_before_its_gang_is_decided_is_never_allocated(
    nc: Client, kv: KeyValue, gang_worker: Worker, where: str
) -> None:
    """x waits for its gang and is deleted; once its tombstone is collected, y arrives: the gang
    is not complete (x is gone), and nothing is held or recorded for x."""
    worker = gang_worker
    held = Delivered(10, subject="x")
    await worker._pending(cast(Msg, held), gang_event("x"))
    assert "uid-x" in worker.waiting
    if where == "here":
        await worker._deleted(cast(Msg, Delivered(11, subject="x")), deleted("x"))
    else:
        other_res = Reservations(kv)
        await other_res.start()
        try:
            slices = cast(Any, Slices({}))
            other = Worker(nc, Settings(), Engine(load_classes(), "first-fit"), slices, other_res)
            await other._deleted(cast(Msg, Delivered(11, subject="x")), deleted("x"))
        finally:
            await other_res.stop()
        # The holder's next retry reads the claim's record first, as `_retry_waiting` does.
        assert await worker._settled(cast(Msg, held), gang_event("x"))
    assert held.acks == 1
    collector = TombstoneCollector(nc.jetstream(), kv, grace=600, clock=lambda: time.time() + 601)
    assert await collector.collect() == 1

    await worker._pending(cast(Msg, Delivered(12, subject="y")), gang_event("y"))
    assert await worker._res.stored("uid-x") is None, "nothing decided for the deleted claim"
    assert await worker._res.record("uid-y") is None
    assert "uid-y" in worker.waiting, "y waits for a second member"
    await asyncio.sleep(0.2)  # the mirror would show holdings written meanwhile
    assert not worker._res.holdings_of("uid-x")


async def test_holdings_written_after_the_release_go_with_the_next_event(worker: Worker) -> None:
    """An attempt reserved the claim's devices after the claim's release had freed them, then its
    replica died before recording anything (the record it would have met is the tombstone):
    the claim's pending event, delivered again, frees them."""
    await worker._deleted(cast(Msg, Delivered(11)), deleted("c"))
    allocation = json.loads(claim_event(Kind.KIND_ALLOCATED_EXTERNALLY, (0,)).claim_json)
    dead = holdings_from_json(allocation["status"]["allocation"], UID, "default/c", "dead")
    await worker._res.reserve(dead)
    assert worker._res.holdings_of(UID)
    msg = Delivered(10)
    assert await worker._settled(cast(Msg, msg), claim_event(Kind.KIND_PENDING))
    assert msg.acks == 1
    await until(lambda: not worker._res.holdings_of(UID))
    stored = await worker._res.stored(UID)
    assert stored is not None
    assert stored.released


@pytest.mark.parametrize("kind", ["deleted", "deallocated"])
async def test_a_release_frees_the_records_devices_its_mirror_has_not_seen(
    nc: Client, kv: KeyValue, worker: Worker, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Replica B's reservation mirror is behind (its watch is being opened again) when it
    handles the deletion of a claim replica A just decided: the devices the claim's record
    names are freed all the same, not left held for good."""
    monkeypatch.setattr(reservations_module, "RETRY_FIRST", 60.0)
    watches = Watches(kv)
    behind = Reservations(cast(KeyValue, watches))
    await behind.start()
    try:
        await watches.opened[0].stop()  # from here on B's mirror learns nothing
        await worker._adopt(
            cast(Msg, Delivered(10)), claim_event(Kind.KIND_ALLOCATED_EXTERNALLY, (0,))
        )
        assert worker._res.holdings_of(UID)
        assert not behind.holdings_of(UID)
        other = Worker(nc, Settings(), Engine([], "first-fit"), cast(Any, Slices({})), behind)
        event = deleted("c") if kind == "deleted" else claim_event(Kind.KIND_DELETED)
        await other._deleted(cast(Msg, Delivered(11)), event)
        await until(lambda: not worker._res.holdings_of(UID))
    finally:
        await behind.stop()


async def test_a_late_deallocation_leaves_a_deleted_claim_deleted(worker: Worker) -> None:
    """The claim's allocation was cleared (11), the claim offered again (12) and deleted (13);
    the deletion is handled first, the other two late: the claim stays released, and the
    pending event allocates nothing for a claim that no longer exists."""
    await worker._deleted(cast(Msg, Delivered(13)), deleted("c"))
    await worker._deleted(cast(Msg, Delivered(11)), claim_event(Kind.KIND_DELETED))
    assert await worker._settled(cast(Msg, Delivered(12)), claim_event(Kind.KIND_PENDING))
    stored = await worker._res.stored(UID)
    assert stored is not None
    assert stored.released, stored
