from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import SLICES_BUCKET, Publisher, connect, ensure_buckets, ensure_streams, subjects
from gpudra_inventory.errors import NotLeaderError
from gpudra_inventory.lease import Lease, ensure_lease_bucket
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.pools import Change, PoolBook
from gpudra_inventory.pools_test import inventory
from gpudra_inventory.service import NODE_INVENTORY, InventoryService
from gpudra_inventory.settings import Settings
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_SLICES
from gpudra_slices import SliceOptions, build_slices
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi


def names(fake: FakeKubeApi) -> list[str]:
    return sorted(o["metadata"]["name"] for o in fake.objects(RESOURCE_SLICES))


async def test_mirror_creates_updates_and_removes(api: tuple[FakeKubeApi, ApiStore]) -> None:
    fake, store = api
    mirror = SliceMirror(store, "gpu.nvidia.com")
    book = PoolBook(SliceOptions(max_devices=2))
    inv = inventory()
    first = book.observe(inv, seen_at=1.0)
    assert first is not None
    await mirror.apply(first)
    assert len(names(fake)) == 4
    smaller = copy.deepcopy(inv)
    del smaller.devices[2:]
    second = book.observe(smaller, seen_at=2.0)
    assert second is not None
    await mirror.apply(second)
    (only,) = fake.objects(RESOURCE_SLICES)
    assert only["spec"]["pool"] == {"name": "node-a", "generation": 2, "resourceSliceCount": 1}


async def test_mirror_retries_conflicts_and_prunes_strangers(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    fake, store = api
    mirror = SliceMirror(store, "gpu.nvidia.com")
    book = PoolBook(SliceOptions())
    first = book.observe(inventory(), seen_at=1.0)
    assert first is not None
    await mirror.apply(first)
    stranger = copy.deepcopy(first.write[0])
    stranger["metadata"] = {"name": "gone-node-gpu.nvidia.com-0"}
    stranger["spec"]["nodeName"] = "gone-node"
    stranger["spec"]["pool"]["name"] = "gone-node"
    await fake.put(RESOURCE_SLICES, stranger)
    # Someone else's write makes our next update's resourceVersion stale exactly once.
    fake.inject_error(409, reason="Conflict", method="PUT", path_contains="resourceslices")
    changed = Change("node-a", 2, [_bumped(first.write[0])], [])
    await mirror.apply(changed)
    puts = [path for method, path in fake.requests if method == "PUT"]
    assert len(puts) == 2, "the 409 was answered by re-reading and writing again"
    assert await mirror.prune(book) == 1
    assert names(fake) == [first.write[0]["metadata"]["name"]]
    (mine,) = fake.objects(RESOURCE_SLICES)
    assert mine["spec"]["pool"]["generation"] == 2


def _bumped(slice_: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(slice_)
    out["spec"]["pool"]["generation"] = 2
    return out


async def test_a_deposed_leader_writes_nothing_more(api: tuple[FakeKubeApi, ApiStore]) -> None:
    fake, store = api
    leading = [True]
    mirror = SliceMirror(store, "gpu.nvidia.com", lambda: leading[0])
    book = PoolBook(SliceOptions(max_devices=2))
    first = book.observe(inventory(), seen_at=1.0)
    assert first is not None
    await mirror.apply(first)
    before = sorted((m, p) for m, p in fake.requests if m != "GET")
    leading[0] = False
    with pytest.raises(NotLeaderError):
        await mirror.apply(Change("node-a", 2, [_bumped(s) for s in first.write], []))
    with pytest.raises(NotLeaderError):
        await mirror.prune(PoolBook(SliceOptions()))
    assert sorted((m, p) for m, p in fake.requests if m != "GET") == before
    assert {o["spec"]["pool"]["generation"] for o in fake.objects(RESOURCE_SLICES)} == {1}


@contextlib.asynccontextmanager
async def bus(server: NatsServer) -> AsyncIterator[tuple[Client, KeyValue]]:
    """A client of `server` with gpudra's streams, and the slices bucket."""
    nc = await connect(server.url, name="mirror-test", deadline=10)
    try:
        await ensure_streams(nc.jetstream())
        yield nc, (await ensure_buckets(nc.jetstream()))[SLICES_BUCKET]
    finally:
        await nc.drain()


@contextlib.asynccontextmanager
async def running(service: InventoryService) -> AsyncIterator[asyncio.Task[None]]:
    """`service` loaded and running, stopped at the end; its task."""
    await service.load()
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        yield task
    finally:
        stop.set()
        if not task.done():
            await task


async def until_names(fake: FakeKubeApi, expected: list[str], task: asyncio.Task[None]) -> None:
    """Wait (up to 10 s) until the API holds exactly the slices `expected`; the service must
    still be running then."""
    for _ in range(200):
        if names(fake) == expected or task.done():
            break
        await asyncio.sleep(0.05)
    assert not task.done(), task.exception()
    assert names(fake) == expected


async def leader(nc: Client, kv: KeyValue, store: ApiStore) -> InventoryService:
    """A kubernetes-mode inventory that takes a lease of its own (2 s) to lead."""
    return InventoryService(
        nc,
        kv,
        Settings(mode="kubernetes"),
        SliceMirror(store, "gpu.nvidia.com"),
        lease=Lease(await ensure_lease_bucket(nc.jetstream(), 2.0), "leader", 2.0),
    )


def mirroring(
    nc: Client, kv: KeyValue, store: ApiStore, api_resync: float = 60.0
) -> InventoryService:
    """A kubernetes-mode inventory without a lease (it leads), mirroring to `store`; its nodes
    are never silent long enough to be tainted."""
    return InventoryService(
        nc,
        kv,
        Settings(mode="kubernetes", heartbeat_timeout=600.0, api_resync=api_resync),
        SliceMirror(store, "gpu.nvidia.com"),
    )


async def publish_node_x(nc: Client) -> None:
    await Publisher(nc).publish(subjects.inventory("node-x"), inventory("node-x"), NODE_INVENTORY)


async def test_a_new_leader_mirrors_its_pools_then_prunes_strangers(
    api: tuple[FakeKubeApi, ApiStore], fresh_nats_server: NatsServer
) -> None:
    fake, store = api
    async with bus(fresh_nats_server) as (nc, kv):
        template = build_slices(inventory("gone-node"), SliceOptions())[0]
        await fake.put(RESOURCE_SLICES, template)  # a node that vanished while nobody led
        await publish_node_x(nc)
        service = await leader(nc, kv, store)
        async with running(service) as task:
            await until_names(fake, ["node-x-gpu.nvidia.com-0"], task)
            assert service.role == "leader"


async def test_an_api_outage_delays_the_mirror_and_loses_nothing(
    api: tuple[FakeKubeApi, ApiStore], fresh_nats_server: NatsServer
) -> None:
    fake, store = api
    async with bus(fresh_nats_server) as (nc, kv):
        service = mirroring(nc, kv, store)
        service.book = PoolBook(SliceOptions(max_devices=4))  # node-x: two slices of 4 GPUs
        async with running(service) as task:
            await publish_node_x(nc)
            two = ["node-x-gpu.nvidia.com-0", "node-x-gpu.nvidia.com-1"]
            await until_names(fake, two, task)
            # The API server is away while the node shrinks to one slice; the bucket is written.
            fake.inject_error(503, path_contains="resourceslices", times=4)
            smaller = inventory("node-x")
            del smaller.devices[4:]
            await Publisher(nc).publish(subjects.inventory("node-x"), smaller, NODE_INVENTORY)
            await until_names(fake, two[:1], task)
            (only,) = fake.objects(RESOURCE_SLICES)
            assert only["spec"]["pool"] == {
                "name": "node-x",
                "generation": 2,
                "resourceSliceCount": 1,
            }


async def test_a_prune_the_api_refused_is_tried_again(
    api: tuple[FakeKubeApi, ApiStore], fresh_nats_server: NatsServer
) -> None:
    fake, store = api
    async with bus(fresh_nats_server) as (nc, kv):
        await fake.put(RESOURCE_SLICES, build_slices(inventory("gone-node"), SliceOptions())[0])
        await publish_node_x(nc)
        fake.inject_error(503, method="DELETE", path_contains="resourceslices", times=3)
        service = await leader(nc, kv, store)
        async with running(service) as task:
            await until_names(fake, ["node-x-gpu.nvidia.com-0"], task)


async def test_slices_the_kubelet_deleted_are_mirrored_again_at_the_next_resync(
    api: tuple[FakeKubeApi, ApiStore], fresh_nats_server: NatsServer
) -> None:
    """The kubelet deletes a driver's slices of its node when the driver's kubelet plugin
    unregisters (a plugin restart that took long); the pool has not changed, so only the leader's
    periodic comparison with the API brings them back. A slice of ours no pool owns goes too."""
    fake, store = api
    async with bus(fresh_nats_server) as (nc, kv):
        service = mirroring(nc, kv, store, api_resync=0.5)
        async with running(service) as task:
            await publish_node_x(nc)
            mirrored = ["node-x-gpu.nvidia.com-0"]
            await until_names(fake, mirrored, task)
            first = fake.objects(RESOURCE_SLICES)[0]
            await store.delete(RESOURCE_SLICES, mirrored[0])  # what the kubelet does
            stranger = build_slices(inventory("gone-node"), SliceOptions())[0]
            await fake.put(RESOURCE_SLICES, stranger)
            await until_names(fake, mirrored, task)
            assert fake.objects(RESOURCE_SLICES)[0]["spec"] == first["spec"]
            assert service.status()["apiRepairs"] == 1


async def test_a_pool_the_api_refuses_holds_back_no_other_pool(
    api: tuple[FakeKubeApi, ApiStore], fresh_nats_server: NatsServer
) -> None:
    """The API refuses one node's slices for good (422: say an attribute its validation rejects):
    that pool waits, with a growing delay, and every other node is mirrored; once the API takes
    it, it is mirrored too."""
    fake, store = api
    async with bus(fresh_nats_server) as (nc, kv):
        service = mirroring(nc, kv, store)
        # node-a sorts first: before, its refusal ended every turn before node-b's turn came.
        fake.inject_error(422, reason="Invalid", path_contains="node-a-gpu", times=10**6)
        async with running(service) as task:
            for node in ("node-a", "node-b"):
                await Publisher(nc).publish(
                    subjects.inventory(node), inventory(node), NODE_INVENTORY
                )
            await until_names(fake, ["node-b-gpu.nvidia.com-0"], task)
            assert service.status()["apiRefused"] == 1
            refused = [p for m, p in fake.requests if "node-a-gpu" in p]
            await asyncio.sleep(2.0)
            retried = [p for m, p in fake.requests if "node-a-gpu" in p]
            assert len(retried) - len(refused) <= 2, "tried again with a delay, not every turn"
            fake.clear_faults()
            both = ["node-a-gpu.nvidia.com-0", "node-b-gpu.nvidia.com-0"]
            for _ in range(600):  # the next try is at most 2 delays (8 s here) away
                if names(fake) == both:
                    break
                await asyncio.sleep(0.05)
            assert names(fake) == both
            assert service.status()["apiRefused"] == 0
