"""The claims a worker holds for retry, against a real nats-server: one held claim whose retry
fails must not stop the pass (`Worker._retry_waiting`), nor the replica's loop; what a waiting
unit was told is kept only while a member of it is held; a retry whose commit failed leaves no
devices held twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import nats.errors
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_allocator.conftest import gpu_slice
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.fence_test import Delivered, deleted, gang_event
from gpudra_allocator.gang_steps_test import Slices
from gpudra_allocator.gangs import members_key
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.worker import Worker
from gpudra_bus import ensure_streams


@pytest_asyncio.fixture
async def worker(nc: Client, kv: KeyValue) -> AsyncIterator[Worker]:
    await ensure_streams(nc.jetstream())
    res = Reservations(kv)
    await res.start()
    settings = Settings(retry_interval=0.01)
    try:
        yield Worker(nc, settings, Engine(load_classes(), "first-fit"), cast(Any, Slices({})), res)
    finally:
        await res.stop()


async def test_a_retry_that_fails_leaves_the_other_held_claims_retried(
    worker: Worker, kv: KeyValue
) -> None:
    """x waits for its gang, whose members key another version of gpudra wrote in a form this
    one cannot read; z waits for a node. When the node comes, z is decided in the same pass,
    and x stays held for the next one."""
    await worker._pending(cast(Msg, Delivered(10, subject="x")), gang_event("x"))
    z = gang_event("z")
    z.gang_id, z.gang_size = "", 0  # alone
    await worker._pending(cast(Msg, Delivered(11, subject="z")), z)
    assert list(worker.waiting) == ["uid-x", "uid-z"]
    await kv.put(members_key("default/g"), b"written by another version")
    worker._index = cast(Any, Slices({"node-a": gpu_slice("node-a")}, version=2))
    for held in worker.waiting.values():
        held.last_try = 0.0  # due

    await worker._retry_waiting()
    assert list(worker.waiting) == ["uid-x"], "z decided, x held"
    record = await worker._res.record("uid-z")
    assert record is not None
    assert record.node == "node-a"


async def test_a_gang_run_again_is_told_why_it_waits(worker: Worker) -> None:
    """Gang default/g (three 2-GPU members, one 4-GPU node) cannot be placed and every member is
    told why; its claims are deleted; the job runs again under the same gang name, with new
    claims that cannot be placed for the same reason: each new member is told too."""
    worker._index = cast(Any, Slices({"node-a": gpu_slice("node-a")}))
    seq = 10
    for run in ("a", "b"):
        names = [f"{m}-{run}" for m in ("x", "y", "z")]
        for name in names[:2]:
            seq += 1
            await worker._pending(cast(Msg, Delivered(seq, subject=name)), member(name))
        told = worker.unschedulable
        seq += 1
        await worker._pending(cast(Msg, Delivered(seq, subject=names[2])), member(names[2]))
        assert worker.unschedulable == told + 3, f"run {run}: every member learns why it waits"
        assert sorted(worker.waiting) == sorted(f"uid-{n}" for n in names)
        for name in names:
            seq += 1
            await worker._deleted(cast(Msg, Delivered(seq, subject=name)), deleted(name))
        assert not worker.waiting
        assert await worker._gangs.members("default/g") is None


def member(name: str) -> Any:
    ev = gang_event(name)
    ev.gang_size = 3
    return ev


class Outage:
    """The reservations bucket, with claim records that cannot be written while `down`."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)

    async def create(self, key: str, value: bytes) -> int:
        if self.down and key.startswith("c."):
            raise nats.errors.TimeoutError
        return await self._kv.create(key, value)


async def test_a_retry_whose_commit_failed_holds_one_decisions_devices(
    nc: Client, kv: KeyValue
) -> None:
    """z waits for a node; the node comes, and its retry reserves devices but cannot record the
    decision (the bucket is away). A later retry decides again: only the devices of the
    decision recorded stay held, not those of the attempt that was never recorded too (once
    that attempt is older than any live one can be, as on a redelivery)."""
    await ensure_streams(nc.jetstream())
    now = [time.time()]
    bucket = Outage(kv)
    res = Reservations(cast(KeyValue, bucket), clock=lambda: now[0])
    await res.start()
    try:
        slices = cast(Any, Slices({}))
        worker = Worker(
            nc, Settings(retry_interval=0.01), Engine(load_classes(), "first-fit"), slices, res
        )
        z = gang_event("z")
        z.gang_id, z.gang_size = "", 0
        await worker._pending(cast(Msg, Delivered(11, subject="z")), z)
        worker._index = cast(Any, Slices({"node-a": gpu_slice("node-a")}, version=2))
        bucket.down = True
        worker.waiting["uid-z"].last_try = 0.0
        await worker._retry_waiting()
        assert "uid-z" in worker.waiting
        assert await res.record("uid-z") is None
        failed = {h.token for _, h in res.holdings_of("uid-z")}
        assert len(failed) == 1, "the unrecorded attempt holds its devices"

        bucket.down = False
        for later in (1.0, Settings().ack_wait + 1):
            now[0] += later
            for held in worker.waiting.values():
                held.last_try = 0.0  # due
            await worker._retry_waiting()
        record = await res.record("uid-z")
        assert record is not None
        assert "uid-z" not in worker.waiting
        for _ in range(500):
            tokens = {h.token for _, h in res.holdings_of("uid-z")}
            if tokens == {record.token}:
                break
            await asyncio.sleep(0.01)
        assert tokens == {record.token}, "only the recorded decision holds devices"
    finally:
        await res.stop()
