"""Fixtures shared by the inventory's Kubernetes-mode tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus import SLICES_BUCKET, connect, ensure_buckets, ensure_streams
from gpudra_inventory.lease import Lease
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.service import InventoryService
from gpudra_inventory.settings import Settings
from gpudra_inventory.wipes import SliceWatch
from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi

Api = tuple[FakeKubeApi, ApiStore]
Running = tuple[Client, KeyValue, InventoryService, asyncio.Task[None], asyncio.Event]


@contextlib.asynccontextmanager
async def api_store(fake: FakeKubeApi, kubeconfig: Path) -> AsyncIterator[ApiStore]:
    """A store on `fake`, through a kubeconfig (written to `kubeconfig`) as the service loads
    one."""
    client = await load_api_client(str(fake.write_kubeconfig(kubeconfig)))
    store = ApiStore(client)
    try:
        yield store
    finally:
        await store.close()


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """The HTTP-level fake API (validating every write against the v1.34 schema) and a store
    on it, through a kubeconfig as the service loads one."""
    async with (
        FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake,
        api_store(fake, tmp_path / "kubeconfig") as store,
    ):
        yield fake, store


@contextlib.asynccontextmanager
async def running_inventory(
    server: NatsServer,
    store: ApiStore,
    name: str,
    settings: Settings,
    *,
    lease: Callable[[Client], Awaitable[Lease]] | None = None,
    wipes: SliceWatch | None = None,
) -> AsyncIterator[Running]:
    """An inventory with `settings` mirroring to `store` and following its Nodes, loaded and
    running on a connection named `name`: the connection, the slices bucket, the service, its
    run task and the event that stops it (set, and the task awaited, on the way out). With
    `lease`, the replica holds the lease it builds on the connection; else it leads alone."""
    nc = await connect(server.url, name=name, deadline=10)
    try:
        await ensure_streams(nc.jetstream())
        kv: KeyValue = (await ensure_buckets(nc.jetstream()))[SLICES_BUCKET]
        service = InventoryService(
            nc,
            kv,
            settings,
            SliceMirror(store, "gpu.nvidia.com", nodes=ClusterNodes(store)),
            lease=None if lease is None else await lease(nc),
            wipes=wipes,
        )
        await service.load()
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        try:
            yield nc, kv, service, task, stop
        finally:
            stop.set()
            if not task.done():
                await task
    finally:
        await nc.drain()
