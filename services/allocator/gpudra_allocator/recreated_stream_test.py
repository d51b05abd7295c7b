"""The claims stream deleted and created again while the reservations bucket lives on (an
operator's `nats stream rm`, a stream lost from JetStream's storage): its sequences start at 1
again. Against a real nats-server of the test's own (the test deletes gpudra's stream), with the
worker's own loop: an event of the new stream is never taken for older than a record written
from the old one, and the worker goes on consuming without a restart. The consumer on its own:
a subscription of the old stream that reads the new one's consumer (re-created by another
replica) tags each event with its incarnation; a stream nobody re-creates is created again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_allocator.conftest import gpu_claim_doc, gpu_slice
from gpudra_allocator.consumer import ClaimsConsumer
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.events import stream_pos
from gpudra_allocator.gang_steps_test import Slices
from gpudra_allocator.holdings import ClaimRecord
from gpudra_allocator.incarnations import StreamPos, epoch_of, micros
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.worker import Worker
from gpudra_bus import (
    CLAIM_EVENT,
    CLAIMS_STREAM,
    RESERVATIONS_BUCKET,
    Publisher,
    ensure_bucket,
    ensure_streams,
    subjects,
)
from gpudra_bus.streams import BUCKETS
from gpudra_testing.waiting import until
from gpudrapb.v1 import claims_pb2

Event = claims_pb2.ClaimEvent


def event(kind: Event.Kind.ValueType, *, gang: bool = False, allocated: bool = False) -> Event:
    """An event of claim `default/x` (uid `uid-x`, 1 GPU); as a member of the 1-claim gang
    `default/g` when `gang`; a DELETED event that carries the claim is its cleared allocation."""
    doc = gpu_claim_doc("x", 1)
    if allocated:
        doc["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-a",
                            "device": "gpu-3",
                        }
                    ]
                }
            }
        }
    ref = claims_pb2.ClaimRef(namespace="default", name="x", uid="uid-x", generation=1)
    ev = Event(kind=kind, claim=ref, claim_json=json.dumps(doc).encode())
    if gang:
        ev.gang_id, ev.gang_size = "default/g", 1
    return ev


PENDING = Event.KIND_PENDING
CLEARED = Event.KIND_DELETED  # with the claim: its allocation was cleared
ADOPT = Event.KIND_ALLOCATED_EXTERNALLY


@dataclass
class Index(Slices):
    """The slice index as the worker's loop reads it: the slices, and change listeners."""

    listeners: list[Any] = field(default_factory=list)


@pytest_asyncio.fixture
async def bus(fresh_bus: Client) -> AsyncIterator[tuple[Client, KeyValue]]:
    spec = next(b for b in BUCKETS if b.name == RESERVATIONS_BUCKET)
    yield fresh_bus, await ensure_bucket(fresh_bus.jetstream(), spec)


@contextlib.asynccontextmanager
async def running(nc: Client, kv: KeyValue) -> AsyncIterator[Worker]:
    res = Reservations(kv)
    await res.start()
    slices = cast(Any, Index({"node-a": gpu_slice("node-a")}))
    worker = Worker(
        nc,
        Settings(retry_interval=0.2, warmup_delay=0),
        Engine(load_classes(), "first-fit"),
        slices,
        res,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await until(lambda: worker.ready, "the worker consuming")
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await res.stop()


async def send(nc: Client, ev: Event) -> int:
    """Publish `ev` to the claims stream; its sequence there."""
    ack = await Publisher(nc).publish(
        subjects.claims("default", "x"), ev, CLAIM_EVENT, msg_id=uuid.uuid4().hex
    )
    return int(ack.seq)


async def recorded(worker: Worker, state: str, seq: int) -> ClaimRecord:
    """Wait for x's record to be in `state`, written by the event at `seq`."""
    found: list[ClaimRecord | None] = [None]

    async def poll() -> None:
        while True:
            found[0] = await worker._res.stored("uid-x")
            if found[0] is not None and found[0].state == state and found[0].seq == seq:
                return
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), 10)
    except TimeoutError:
        raise AssertionError(f"x's record is {found[0]}, not {state} at {seq}") from None
    assert found[0] is not None
    return found[0]


async def recreate_claims_stream(nc: Client) -> None:
    js = nc.jetstream()
    await js.delete_stream(CLAIMS_STREAM)
    await ensure_streams(js)  # as any gpudra service does at its start


STATE = {PENDING: "allocated", CLEARED: "cleared", ADOPT: "allocated"}


@pytest.mark.parametrize("restarted", [False, True], ids=["same-replica", "replica-started-after"])
@pytest.mark.parametrize(
    ("before", "after", "gang", "held"),
    [
        # Allocated and cleared (the mark at sequence 2), then offered again.
        pytest.param([PENDING, CLEARED], PENDING, False, ["gpu-0"], id="offered-again"),
        pytest.param([PENDING, CLEARED], PENDING, True, ["gpu-0"], id="member-offered-again"),
        # Allocated at sequence 3, then its allocation cleared.
        pytest.param([PENDING, CLEARED, PENDING], CLEARED, False, [], id="deallocated"),
        # Allocated and cleared, then allocated by kube-scheduler on gpu-3.
        pytest.param([PENDING, CLEARED], ADOPT, False, ["gpu-3"], id="adopted"),
    ],
)
async def test_an_event_of_a_new_stream_is_newer_than_the_old_streams_record(
    bus: tuple[Client, KeyValue],
    before: list[Event.Kind.ValueType],
    after: Event.Kind.ValueType,
    gang: bool,
    held: list[str],
    restarted: bool,
) -> None:
    """x's events `before` on the old stream, which is then deleted and created again; x's
    event `after` is sequence 1 of the new stream, lower than its record's: it takes effect,
    whether the replica lived through the re-creation or started after it."""
    nc, kv = bus
    async with contextlib.AsyncExitStack() as stack:
        worker = await stack.enter_async_context(running(nc, kv))
        for seq, kind in enumerate(before, start=1):
            assert await send(nc, event(kind, gang=gang, allocated=kind != PENDING)) == seq
        await recorded(worker, STATE[before[-1]], len(before))
        if restarted:
            await stack.aclose()
        await recreate_claims_stream(nc)
        if restarted:
            worker = await stack.enter_async_context(running(nc, kv))

        assert await send(nc, event(after, gang=gang, allocated=after != PENDING)) == 1
        record = await recorded(worker, STATE[after], 1)
        assert record.epoch > 0, "the record names the stream's incarnation"
        await until(
            lambda: sorted(h.device for _, h in worker._res.holdings_of("uid-x")) == held,
            f"x holding {held}",
        )
        assert worker.stale == 0


async def fetched(consumer: ClaimsConsumer) -> list[Msg]:
    for _ in range(40):
        msgs = await consumer.fetch(idle=0.25)
        if msgs:
            return msgs
    raise AssertionError("no claim event fetched in 10 s")


async def test_an_old_subscription_reading_the_new_streams_consumer_tags_by_incarnation(
    fresh_bus: Client,
) -> None:
    """This replica's subscription was opened on the old stream; the stream and the durable
    consumer were created again (by another replica) before its next fetch, so it reads the new
    stream's events without any error: each is tagged with the incarnation it was stored in."""
    nc, js = fresh_bus, fresh_bus.jetstream()
    consumer = ClaimsConsumer(js, Settings())
    await consumer.open()
    try:
        await send(nc, event(PENDING))
        (first,) = await fetched(consumer)
        old = epoch_of(first)
        assert old == micros(cast(Any, (await js.stream_info(CLAIMS_STREAM)).created))
        await first.ack()

        await recreate_claims_stream(nc)
        other = ClaimsConsumer(js, Settings())  # another replica opens the consumer again
        await other.open()
        await other.close()
        await send(nc, event(PENDING))
        (second,) = await fetched(consumer)
        assert consumer.reopened == 0, "nothing told this replica"
        new = micros(cast(Any, (await js.stream_info(CLAIMS_STREAM)).created))
        assert new > old
        assert stream_pos(second) == StreamPos(new, 1)
        assert stream_pos(second).after(StreamPos(old, 5))
        assert list(consumer.incarnations.known) == [old, new]
    finally:
        await consumer.close()


async def test_a_deleted_stream_is_created_again_and_consumed(fresh_bus: Client) -> None:
    """The claims stream is deleted and nobody creates it again: the consumer finds itself
    gone, creates the stream and itself again, and reads what is published from then on."""
    nc, js = fresh_bus, fresh_bus.jetstream()
    consumer = ClaimsConsumer(js, Settings())
    await consumer.open()
    try:
        await js.delete_stream(CLAIMS_STREAM)
        for _ in range(40):
            assert await consumer.fetch(idle=0.25) == []
            if consumer.reopened:
                break
        assert consumer.reopened == 1
        await send(nc, event(PENDING))
        (msg,) = await fetched(consumer)
        assert stream_pos(msg).seq == 1
        assert stream_pos(msg).epoch == consumer.incarnations.known[-1]
    finally:
        await consumer.close()
