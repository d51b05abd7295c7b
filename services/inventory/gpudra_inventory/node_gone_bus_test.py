"""Kubernetes mode: a deleted Node's pool also leaves the NATS side once its node-agent is silent.

The allocator allocates from the `gpudra-slices` bucket, and a restarted (or new leader)
inventory rebuilds pools from the inventory stream: both must lose the pool, or it is carried
(tainted) for ever and re-created at every restart. Against the HTTP-level fake API and a real
nats-server; heartbeat timeout 1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import nats.js.errors
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import (
    INVENTORY_STREAM,
    current_entries,
    subjects,
)
from gpudra_inventory.conftest import Api, running_inventory
from gpudra_inventory.lease import Lease, ensure_lease_bucket
from gpudra_inventory.node_owner_test import X, add_node, publish, slices
from gpudra_inventory.service import InventoryService
from gpudra_inventory.settings import Settings
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import NODES
from gpudra_standalone.nats_server import NatsServer

TIMEOUT = 1.0  # the heartbeat timeout (seconds)
LEASE_TTL = 2.0  # short, yet renewals (every ttl/4) keep up on a busy machine
Y = "node-y-gpu.nvidia.com-0"


@contextlib.asynccontextmanager
async def inventory_service(
    server: NatsServer, store: ApiStore, holder: str | None = None
) -> AsyncIterator[tuple[Client, KeyValue, InventoryService, asyncio.Task[None], asyncio.Event]]:
    """A kubernetes-mode inventory following the API's Nodes, running (and the event that stops
    it); with `holder`, a replica with a lease of that holder name, else it leads alone."""

    async def lease(nc: Client) -> Lease:
        assert holder is not None
        return Lease(await ensure_lease_bucket(nc.jetstream(), LEASE_TTL), holder, LEASE_TTL)

    settings = Settings(mode="kubernetes", heartbeat_timeout=TIMEOUT, api_resync=60.0)
    async with running_inventory(
        server, store, "node-gone-test", settings, lease=None if holder is None else lease
    ) as running:
        yield running


async def bucket(kv: KeyValue) -> dict[str, bytes]:
    """The bucket's live slices by name."""
    return {e.key: e.value for e in await current_entries(kv) if e.value}


async def in_stream(nc: Client, node: str) -> bool:
    """Whether the inventory stream holds a message of `node`."""
    try:
        await nc.jetstream().get_last_msg(INVENTORY_STREAM, subjects.inventory(node))
    except nats.js.errors.NotFoundError:
        return False
    return True


async def until(
    task: asyncio.Task[None], ok: Callable[[], Awaitable[bool]], what: str, wait: float = 10.0
) -> None:
    """Wait (up to `wait` s) until `ok()`; the service must still run."""
    for _ in range(int(wait / 0.05)):
        if await ok() or task.done():
            break
        await asyncio.sleep(0.05)
    assert not task.done(), task.exception()
    assert await ok(), what


async def gone(nc: Client, kv: KeyValue, service: InventoryService, node: str, name: str) -> bool:
    """Whether the pool left the bucket, the stream and the (leader's) book."""
    return (
        name not in await bucket(kv)
        and not await in_stream(nc, node)
        and node not in service.book.pools
    )


async def test_a_deleted_silent_nodes_pool_leaves_the_bucket_and_the_stream(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """node-y, silent too but with its Node, keeps its (tainted) pool; node-x's Node is deleted
    and its pool goes from the bucket and its inventory from the stream, so a new inventory on
    the same stream does not bring it back."""
    fake, store = api
    await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    async with inventory_service(fresh_nats_server, store) as (nc, kv, service, task, _):
        await publish(nc, "node-x")
        await publish(nc, "node-y")

        async def both() -> bool:
            return {X, Y} <= set(await bucket(kv))

        await until(task, both, "both pools written")
        await store.delete(NODES, "node-x")
        await until(task, lambda: gone(nc, kv, service, "node-x", X), "node-x's pool left the bus")
        assert service.status()["poolsRemoved"] == 1
        assert Y in await bucket(kv)
        assert await in_stream(nc, "node-y")
    async with inventory_service(fresh_nats_server, store) as (nc, kv, service, task, _):

        async def ready() -> bool:
            return service.ready

        await until(task, ready, "the new inventory is ready")
        await asyncio.sleep(3 * TIMEOUT)
        assert sorted(service.book.pools) == ["node-y"]
        assert sorted(await bucket(kv)) == [Y]
        assert not await in_stream(nc, "node-x")
        assert not task.done()


async def test_a_deleted_node_whose_agent_is_heard_keeps_its_pool_on_the_bus(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """A Node being registered again must not cost its live node-agent the pool: its slices
    leave the API only."""
    fake, store = api
    await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store) as (nc, kv, service, task, _):
        await publish(nc, "node-x")

        async def written() -> bool:
            return X in await bucket(kv) and X in slices(fake)

        await until(task, written, "pool written")
        await store.delete(NODES, "node-x")

        async def api_empty() -> bool:
            return slices(fake) == {}

        await until(task, api_empty, "the API's slices removed")
        for _ in range(int(4 * TIMEOUT / 0.2)):  # heartbeats over four timeouts
            await publish(nc, "node-x")
            await asyncio.sleep(0.2)
        assert X in await bucket(kv)
        assert await in_stream(nc, "node-x")
        assert "node-x" in service.book.pools
        assert not task.done()


async def test_a_node_agent_heard_again_brings_its_pool_back_as_new(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    fake, store = api
    await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store) as (nc, kv, service, task, _):
        await publish(nc, "node-x")

        async def written() -> bool:
            return X in await bucket(kv)

        await until(task, written, "pool written")
        await store.delete(NODES, "node-x")
        await until(task, lambda: gone(nc, kv, service, "node-x", X), "node-x's pool left the bus")
        uid = await add_node(fake, "node-x")  # the node rejoins
        await publish(nc, "node-x")

        async def back() -> bool:
            return X in await bucket(kv) and X in slices(fake)

        await until(task, back, "pool back in the bucket and the API")
        assert await in_stream(nc, "node-x")
        assert service.book.pools["node-x"].generation == 1
        assert slices(fake)[X]["metadata"]["ownerReferences"][0]["uid"] == uid


async def test_a_standby_forgets_the_pool_and_its_takeover_does_not_bring_it_back(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """The standby read node-x's inventory before the leader purged it: it must forget the pool
    too, or its takeover would republish it."""
    fake, store = api
    await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    async with inventory_service(fresh_nats_server, store, "a") as (nc, kv, a, a_task, a_stop):

        async def a_leads() -> bool:
            return a.ready and a.role == "leader"

        await until(a_task, a_leads, "a leads")
        async with inventory_service(fresh_nats_server, store, "b") as (_, _, b, b_task, _):

            async def b_ready() -> bool:
                return b.ready and b.role == "standby"

            await until(b_task, b_ready, "b is a ready standby")
            await publish(nc, "node-x")
            await publish(nc, "node-y")

            async def warm() -> bool:
                return {X, Y} <= set(await bucket(kv)) and {"node-x", "node-y"} <= set(b.book.pools)

            await until(a_task, warm, "both pools written, and warm in the standby")
            await store.delete(NODES, "node-x")
            await until(a_task, lambda: gone(nc, kv, a, "node-x", X), "node-x's pool left the bus")

            async def forgotten() -> bool:
                return "node-x" not in b.book.pools

            await until(b_task, forgotten, "the standby forgot node-x's pool")
            a_stop.set()  # a graceful stop releases the lease: `b` takes over at once
            await a_task

            async def b_leads() -> bool:
                return b.ready and b.role == "leader" and b.takeovers == 1

            await until(b_task, b_leads, "b took over", wait=5 * LEASE_TTL)
            await asyncio.sleep(3 * TIMEOUT)
            assert sorted(await bucket(kv)) == [Y]
            assert sorted(b.book.pools) == ["node-y"]
            assert not await in_stream(nc, "node-x")
