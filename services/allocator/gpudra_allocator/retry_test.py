"""The worker's retry pass over the claims it holds (`Worker._retry_waiting`), against a real
nats-server: one held claim whose retry fails must not stop the pass, nor the replica's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_allocator.conftest import gpu_slice
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.fence_test import Delivered, gang_event
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
