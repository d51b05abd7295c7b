"""`Worker.run`'s own lifecycle: whatever ends it, the tasks it started end with it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from nats.aio.client import Client

from gpudra_allocator.conftest import gpu_slice
from gpudra_allocator.engine import Engine, load_classes
from gpudra_allocator.gang_steps_test import Slices
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.settings import Settings
from gpudra_allocator.worker import Worker
from gpudra_bus import RESERVATIONS_BUCKET, ensure_bucket
from gpudra_bus.streams import BUCKETS


class RefusingListeners(list[Any]):
    def append(self, item: Any) -> None:
        raise RuntimeError("no listener taken")


@dataclass
class Index(Slices):
    listeners: list[Any] = field(default_factory=RefusingListeners)


async def test_a_failing_warm_up_set_up_leaves_no_task_running(fresh_bus: Client) -> None:
    """The warm-up is attached after the tombstone collector starts: a failure there used to
    leave the collector running for ever (the leak check fails the test then)."""
    spec = next(b for b in BUCKETS if b.name == RESERVATIONS_BUCKET)
    res = Reservations(await ensure_bucket(fresh_bus.jetstream(), spec))
    await res.start()
    try:
        worker = Worker(
            fresh_bus,
            Settings(warmup_delay=0.03),
            Engine(load_classes(), "first-fit"),
            cast(Any, Index({"node-a": gpu_slice("node-a")})),
            res,
        )
        with pytest.raises(RuntimeError, match="no listener taken"):
            await asyncio.wait_for(worker.run(asyncio.Event()), 30)
        assert not worker.ready
    finally:
        await res.stop()
