from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import connect
from gpudra_inventory.lease import LEASE_BUCKET, SAFETY, Lease, ensure_lease_bucket
from gpudra_standalone.nats_server import NatsServer

TTL = 1.5  # short, yet renewals keep up on a busy machine


@pytest_asyncio.fixture
async def nc(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(fresh_nats_server.url, name="lease-test", deadline=10)
    yield client
    await client.drain()


@pytest_asyncio.fixture
async def kv(nc: Client) -> KeyValue:
    return await ensure_lease_bucket(nc.jetstream(), TTL)


async def test_one_of_racing_replicas_wins_and_renews(kv: KeyValue) -> None:
    leases = [Lease(kv, f"replica-{i}", TTL) for i in range(3)]
    won = await asyncio.gather(*(lease.attempt() for lease in leases))
    assert sorted(won) == [False, False, True]
    (leader,) = (lease for lease in leases if lease.held())
    assert await leader.current_holder() == leader.holder
    for _ in range(4):  # renewing past the TTL keeps the lease, and nobody else gets it
        await asyncio.sleep(TTL / 3)
        assert await leader.attempt()
        assert not any([await lease.attempt() for lease in leases if lease is not leader])
    assert leader.epoch == 1


async def test_a_silent_holder_stops_leading_before_another_takes_over(kv: KeyValue) -> None:
    old, new = Lease(kv, "old", TTL), Lease(kv, "new", TTL)
    assert await old.attempt()
    acquired_after = None
    started = time.monotonic()
    while acquired_after is None:
        # `old` stopped renewing (a dead process, or one cut off from NATS).
        if await new.attempt():
            acquired_after = time.monotonic() - started
            break
        await asyncio.sleep(0.02)
        assert time.monotonic() - started < 10 * TTL, "the lease never lapsed"
    assert not old.held(), "both would lead"
    assert acquired_after >= TTL * SAFETY
    # The old holder comes back: its renewal is refused, the lease is the new holder's.
    assert not await old.attempt()
    assert await new.current_holder() == "new"
    assert new.epoch == 1


async def test_release_hands_over_at_once(kv: KeyValue) -> None:
    first, second = Lease(kv, "first", TTL), Lease(kv, "second", TTL)
    assert await first.attempt()
    assert not await second.attempt()
    await first.release()
    assert not first.held()
    assert await second.attempt()
    await first.release()  # not held: nothing happens, the other keeps it
    assert await second.attempt()


async def test_the_same_holder_restarted_takes_its_lease_back(kv: KeyValue) -> None:
    before = Lease(kv, "pod-a", TTL * 10)
    assert await before.attempt()
    after = Lease(kv, "pod-a", TTL * 10)  # the replica restarted: new process, same name
    assert await after.attempt()
    assert not await Lease(kv, "pod-b", TTL * 10).attempt()
    assert after.epoch == 1
    # The earlier incarnation's revision is stale: were it alive, it would have to acquire anew
    # (a new epoch, so a new takeover) — holder names must be unique among live replicas.
    assert await before.attempt()
    assert before.epoch == 2


@pytest.mark.parametrize(
    ("elapsed", "held"),
    [
        pytest.param(0.0, True, id="just-renewed"),
        pytest.param(TTL * SAFETY - 0.01, True, id="before-deadline"),
        pytest.param(TTL * SAFETY, False, id="deadline"),
        pytest.param(TTL, False, id="ttl"),
    ],
)
async def test_held_until_the_local_deadline(kv: KeyValue, elapsed: float, held: bool) -> None:
    now = [1000.0]
    lease = Lease(kv, "clocked", TTL, clock=lambda: now[0])
    assert await lease.attempt()
    now[0] += elapsed
    assert lease.held() is held


async def test_run_renews_until_stopped(kv: KeyValue) -> None:
    lease, other = Lease(kv, "runner", TTL), Lease(kv, "other", TTL)
    stop = asyncio.Event()
    task = asyncio.create_task(lease.run(stop))
    await asyncio.sleep(TTL * 1.2)  # past the TTL: only renewals keep it
    assert lease.held()
    assert not await other.attempt()
    stop.set()
    await task
    await lease.release()
    assert await other.attempt()


async def test_the_bucket_takes_the_ttl_of_the_last_replica_started(nc: Client) -> None:
    await ensure_lease_bucket(nc.jetstream(), 5.0)
    await ensure_lease_bucket(nc.jetstream(), 5.0)
    assert (await nc.jetstream().stream_info(f"KV_{LEASE_BUCKET}")).config.max_age == 5.0
    await ensure_lease_bucket(nc.jetstream(), 2.0)
    assert (await nc.jetstream().stream_info(f"KV_{LEASE_BUCKET}")).config.max_age == 2.0
