from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import nats
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus.conftest import new_bucket
from gpudra_bus.connection import Backoff, connect, disconnect
from gpudra_bus.kvlist import current_entries, live_keys
from gpudra_testing import NatsServer


async def test_live_keys_by_prefix_and_after_deletions(nc: Client) -> None:
    kv = await new_bucket(nc)
    assert await live_keys(kv) == []
    for key in ("c.b", "c.a", "p.x", "gone"):
        await kv.put(key, b"1")
    await kv.delete("gone")
    assert await live_keys(kv) == ["c.a", "c.b", "p.x"]
    assert await live_keys(kv, "c.") == ["c.a", "c.b"]
    assert await live_keys(kv, "z.") == []
    for key in ("c.b", "c.a", "p.x"):
        await kv.delete(key)
    # Only deletion markers left: asked `tries` times, then empty.
    assert await live_keys(kv, tries=3, pause=0.0) == []


async def test_live_keys_lists_many_keys_once_each(nc: Client) -> None:
    kv = await new_bucket(nc)
    for i in range(300):
        await kv.put(f"k.{i:03d}", b"1")
        await kv.put(f"k.{i:03d}", b"2")  # a key's history must not repeat it
    assert await live_keys(kv) == [f"k.{i:03d}" for i in range(300)]


async def _bucket(nc: Client, keys: int) -> tuple[KeyValue, str]:
    kv = await new_bucket(nc)
    for i in range(keys):
        await kv.put(f"k.{i}", b"1")
    return kv, f"KV_{kv._name}"


async def _leftovers(nc: Client, stream: str, subs: int) -> tuple[int, int]:
    """(subscriptions beyond `subs`, consumers on `stream`), once the server settled (10 s)."""
    consumers = -1
    for _ in range(100):
        consumers = (await nc.jetstream().stream_info(stream)).state.consumer_count
        if consumers == 0 and len(nc._subs) == subs:
            break
        await asyncio.sleep(0.1)
    return len(nc._subs) - subs, consumers


async def test_timed_out_listing_leaves_no_subscription_or_consumer(
    fresh_nats_server: NatsServer,
) -> None:
    nc = await connect(fresh_nats_server.url, name="t", backoff=Backoff(0.01, 0.2), deadline=10)
    try:
        kv, stream = await _bucket(nc, 3)
        subs = len(nc._subs)
        # The server stops answering: the listing times out while its consumer is being made,
        # and the server makes it once it goes on.
        pid = fresh_nats_server._proc.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        try:
            listing = asyncio.create_task(live_keys(kv, tries=1, timeout=0.2))
            await asyncio.sleep(1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        with pytest.raises(TimeoutError, match="no answer in 1 tries"):
            await listing  # not an empty answer: the bucket has keys
        assert await _leftovers(nc, stream, subs) == (0, 0)
    finally:
        await disconnect(nc, drain=False)


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(0.0, id="before-setup"),
        pytest.param(0.001, id="1ms"),
        pytest.param(0.003, id="3ms"),
        pytest.param(0.01, id="10ms"),
        pytest.param(0.03, id="30ms"),
    ],
)
async def test_cancelled_listing_leaves_no_subscription_or_consumer(
    nc: Client, after: float
) -> None:
    kv, stream = await _bucket(nc, 500)
    subs = len(nc._subs)
    listing = asyncio.create_task(live_keys(kv))
    await asyncio.sleep(after)
    listing.cancel()  # wherever it is by then (a fast machine may have finished it)
    with contextlib.suppress(asyncio.CancelledError):
        await listing
    assert await _leftovers(nc, stream, subs) == (0, 0)


async def test_listing_cut_short_by_its_timeout_leaves_nothing(nc: Client) -> None:
    kv, stream = await _bucket(nc, 2000)
    subs = len(nc._subs)
    for timeout in (0.001, 0.005, 0.02):
        with contextlib.suppress(TimeoutError):  # a fast machine may finish in time
            await live_keys(kv, tries=1, timeout=timeout)
    assert await _leftovers(nc, stream, subs) == (0, 0)


async def test_current_entries_reads_last_entries_and_stops_its_watch(nc: Client) -> None:
    kv, _ = await _bucket(nc, 3)
    await kv.put("k.0", b"2")
    await kv.delete("k.2")
    subs = len(nc._subs)
    entries = await current_entries(kv)
    assert [(e.key, e.value, e.operation) for e in entries] == [
        ("k.1", b"1", None),
        ("k.0", b"2", None),
        ("k.2", b"", "DEL"),
    ]
    assert [e.key for e in await current_entries(kv, "k.1")] == ["k.1"]
    # The watches were stopped (their ephemeral consumers go once nobody listens).
    assert len(nc._subs) == subs


class _StalledWatcher:
    """A watch whose marker for the end of the initial values never comes."""

    def __init__(self) -> None:
        self.stopped = False

    async def updates(self, timeout: float) -> object:
        await asyncio.sleep(timeout)
        raise nats.errors.TimeoutError

    async def stop(self) -> None:
        self.stopped = True


class _StalledBucket:
    _stream = "KV_stalled"

    def __init__(self) -> None:
        self.watcher = _StalledWatcher()

    async def watch(self, keys: str) -> _StalledWatcher:
        return self.watcher


async def test_current_entries_of_a_stalled_watch_times_out_and_stops_it() -> None:
    """nats-py's `async for` over a watcher waits for ever for the end-of-values marker."""
    bucket = _StalledBucket()
    with pytest.raises(TimeoutError, match="nothing for 0.05 s after 0 entries"):
        await current_entries(bucket, idle=0.05)  # type: ignore[arg-type]
    assert bucket.watcher.stopped
