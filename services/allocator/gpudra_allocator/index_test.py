"""The slice index against a real nats-server KV bucket: a watch that ends or fails is opened
again, and the index catches up with what changed meanwhile."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import nats.errors
import pytest
from nats.js.kv import KeyValue

from gpudra_allocator import index as index_module
from gpudra_allocator.conftest import gpu_slice_doc
from gpudra_allocator.index import KvIndex, slice_index
from gpudra_testing.waiting import until


class Broken:
    """A watcher whose first read fails as a lost connection does."""

    def __aiter__(self) -> Broken:
        return self

    async def __anext__(self) -> Any:
        raise nats.errors.ConnectionClosedError

    async def stop(self) -> None:
        return None


class Watches:
    """The bucket, with every watch it opens kept and new watches held while `gate` is clear;
    `broken` watches fail first."""

    def __init__(self, kv: KeyValue, broken: int = 0) -> None:
        self.kv = kv
        self.opened: list[Any] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.broken = broken

    async def watchall(self) -> Any:
        await self.gate.wait()
        if self.broken:
            self.broken -= 1
            watcher: Any = Broken()
        else:
            watcher = await self.kv.watchall()
        self.opened.append(watcher)
        return watcher


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "RETRY_FIRST", 0.01)


async def put(kv: KeyValue, node: str, gpus: int) -> None:
    await kv.put(node, json.dumps(gpu_slice_doc(node, gpus)).encode())


@pytest.fixture
async def started(kv: KeyValue) -> AsyncIterator[tuple[KvIndex[Any], Watches]]:
    for node, gpus in (("node-a", 1), ("node-b", 2), ("node-c", 4)):
        await put(kv, node, gpus)
    watches = Watches(kv)
    index = slice_index(watches)  # type: ignore[arg-type]
    await index.start()
    try:
        yield index, watches
    finally:
        await index.stop()


async def test_an_ended_watch_is_opened_again_and_catches_up(
    kv: KeyValue, started: tuple[KvIndex[Any], Watches]
) -> None:
    index, watches = started
    kept = index.slices["node-c"]
    version = index.version
    watches.gate.clear()  # the next watch waits until the bucket has changed
    await watches.opened[0].stop()  # the watcher ends under the index
    await kv.delete("node-a")
    await put(kv, "node-b", 8)
    await put(kv, "node-d", 2)
    watches.gate.set()

    await until(lambda: index.rewatches == 1 and "node-d" in index.slices, "the new watch")
    await until(lambda: "node-a" not in index.slices, "the deleted key dropped")
    assert sorted(index.slices) == ["node-b", "node-c", "node-d"]
    assert len(index.slices["node-b"].devices) == 8
    # an unchanged value keeps its object: the engine's rebuild compares slices by identity
    assert index.slices["node-c"] is kept
    assert index.version == version + 3  # a dropped, b changed, d added: c replayed, no change
    await put(kv, "node-c", 1)  # and it goes on following the bucket
    await until(lambda: len(index.slices["node-c"].devices) == 1, "a later change")


async def test_a_failed_watch_is_retried_before_the_index_is_ready(kv: KeyValue) -> None:
    await put(kv, "node-a", 2)
    watches = Watches(kv, broken=2)
    index = slice_index(watches)  # type: ignore[arg-type]
    await asyncio.wait_for(index.start(), 10.0)
    try:
        assert index.rewatches == 2
        assert list(index.slices) == ["node-a"]
        assert isinstance(watches.opened[0], Broken)
        assert not isinstance(watches.opened[2], Broken)
    finally:
        await index.stop()


async def test_stop_ends_a_watch_waiting_to_be_opened_again(
    started: tuple[KvIndex[Any], Watches],
) -> None:
    index, watches = started
    watches.gate.clear()
    await watches.opened[0].stop()
    await until(lambda: len(watches.opened) == 1, "the retry")
    await asyncio.sleep(0.05)  # the supervisor now waits for the gate
    await asyncio.wait_for(index.stop(), 10.0)
