"""Kubernetes mode: each node's slices are owned by its Node, and go away with it.

Against the HTTP-level fake API (which validates every object written against the
`resource.k8s.io/v1` schema, and has no garbage collector: what goes away here, the inventory
removed) and a real nats-server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from nats.aio.client import Client

from gpudra_bus import Publisher, subjects
from gpudra_inventory.conftest import Api, running_inventory
from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.pools_test import inventory
from gpudra_inventory.service import NODE_INVENTORY, InventoryService
from gpudra_inventory.settings import Settings
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import NODES, RESOURCE_SLICES, KubeObject
from gpudra_slices import SliceOptions, build_slices
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi


@contextlib.asynccontextmanager
async def inventory_service(
    server: NatsServer, store: ApiStore, api_resync: float = 60.0
) -> AsyncIterator[tuple[Client, InventoryService, asyncio.Task[None]]]:
    """A kubernetes-mode inventory (no lease: it leads) following the API's Nodes, running; its
    nodes are never silent long enough to be tainted."""
    settings = Settings(mode="kubernetes", heartbeat_timeout=600.0, api_resync=api_resync)
    async with running_inventory(server, store, "node-owner-test", settings) as (
        nc,
        _,
        service,
        task,
        _,
    ):
        yield nc, service, task


async def publish(nc: Client, node: str) -> None:
    await Publisher(nc).publish(subjects.inventory(node), inventory(node), NODE_INVENTORY)


async def add_node(fake: FakeKubeApi, name: str) -> str:
    """Create the Node `name` (as the kubelet registers it); its UID."""
    node = await fake.put(NODES, {"metadata": {"name": name}})
    uid: str = node["metadata"]["uid"]
    return uid


def slices(fake: FakeKubeApi) -> dict[str, KubeObject]:
    return {o["metadata"]["name"]: o for o in fake.objects(RESOURCE_SLICES)}


def owned_by(node: str, uid: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}]


async def until(
    fake: FakeKubeApi, task: asyncio.Task[None], ok: Callable[[dict[str, KubeObject]], bool]
) -> dict[str, KubeObject]:
    """Wait (up to 10 s) until the API's slices satisfy `ok`; the service must still run."""
    for _ in range(200):
        if ok(slices(fake)) or task.done():
            break
        await asyncio.sleep(0.05)
    assert not task.done(), task.exception()
    current = slices(fake)
    assert ok(current), sorted(current)
    return current


def resyncs(fake: FakeKubeApi) -> int:
    """Lists of the API's slices so far (one per resync)."""
    return sum(1 for m, p in fake.requests if m == "GET" and p.endswith("/resourceslices"))


X = "node-x-gpu.nvidia.com-0"
GHOST = "node-ghost-gpu.nvidia.com-0"


async def test_each_slice_is_owned_by_its_node(api: Api, fresh_nats_server: NatsServer) -> None:
    fake, store = api
    uid = await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store) as (nc, _, task):
        await publish(nc, "node-x")
        mirrored = await until(fake, task, lambda s: X in s)
        assert mirrored[X]["metadata"]["ownerReferences"] == owned_by("node-x", uid)


async def test_a_deleted_nodes_slices_go_and_no_resync_brings_them_back(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """Its node-agent may even still publish (heartbeats): a Node the API does not have gets no
    slices."""
    fake, store = api
    await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store, api_resync=0.3) as (nc, _, task):
        await publish(nc, "node-x")
        await until(fake, task, lambda s: X in s)
        await store.delete(NODES, "node-x")
        await until(fake, task, lambda s: s == {})
        before = resyncs(fake)
        for _ in range(200):  # two resyncs at least, heartbeats meanwhile
            await publish(nc, "node-x")
            await asyncio.sleep(0.1)
            if resyncs(fake) >= before + 2:
                break
        assert resyncs(fake) >= before + 2
        await asyncio.sleep(0.3)
        assert slices(fake) == {}
        assert not task.done()


async def test_a_recreated_node_gets_its_slices_back_with_its_new_uid(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    fake, store = api
    old = await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store) as (nc, _, task):
        await publish(nc, "node-x")
        await until(fake, task, lambda s: X in s)
        await store.delete(NODES, "node-x")
        await until(fake, task, lambda s: s == {})
        new = await add_node(fake, "node-x")
        assert new != old
        back = await until(fake, task, lambda s: X in s)
        assert back[X]["metadata"]["ownerReferences"] == owned_by("node-x", new)


async def test_a_pool_of_an_unknown_node_is_not_written(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """Also one left in the API by an earlier inventory (the Node went while it was down)."""
    fake, store = api
    await fake.put(RESOURCE_SLICES, build_slices(inventory("node-ghost"), SliceOptions())[0])
    await add_node(fake, "node-x")
    async with inventory_service(fresh_nats_server, store, api_resync=0.3) as (nc, _, task):
        await publish(nc, "node-ghost")
        await publish(nc, "node-x")
        await until(fake, task, lambda s: sorted(s) == [X])
        before = resyncs(fake)
        for _ in range(200):
            await asyncio.sleep(0.05)
            if resyncs(fake) >= before + 2:
                break
        assert sorted(slices(fake)) == [X]
        created = [p for m, p in fake.requests if m in ("POST", "PUT") and "node-ghost" in p]
        assert created == []


async def test_slices_an_older_inventory_wrote_are_given_their_owner(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """Slices written without an ownerReference (before this version) are updated to carry it,
    at start as at a resync."""
    fake, store = api
    uid = await add_node(fake, "node-x")
    old = build_slices(inventory("node-x"), SliceOptions())[0]
    await fake.put(RESOURCE_SLICES, old)
    async with inventory_service(fresh_nats_server, store, api_resync=0.3) as (nc, _, task):
        await publish(nc, "node-x")
        owner = owned_by("node-x", uid)
        await until(fake, task, lambda s: s[X]["metadata"].get("ownerReferences") == owner)
        # As if an older replica had written it again meanwhile.
        stripped = slices(fake)[X]
        del stripped["metadata"]["ownerReferences"]
        await fake.put(RESOURCE_SLICES, stripped)
        await until(fake, task, lambda s: s[X]["metadata"].get("ownerReferences") == owner)


async def test_nothing_is_deleted_while_the_nodes_cannot_be_listed(
    api: Api, fresh_nats_server: NatsServer
) -> None:
    """Until the first list of Nodes, every Node is unknown, not absent: no slice is deleted."""
    fake, store = api
    uid = await add_node(fake, "node-x")
    await fake.put(RESOURCE_SLICES, build_slices(inventory("node-x"), SliceOptions())[0])
    fake.inject_error(503, method="GET", path_contains="/api/v1/nodes", times=5)
    async with inventory_service(fresh_nats_server, store) as (nc, _, task):
        await publish(nc, "node-x")
        owner = owned_by("node-x", uid)
        await until(fake, task, lambda s: s[X]["metadata"].get("ownerReferences") == owner)
    assert [p for m, p in fake.requests if m == "DELETE"] == []


async def test_nodes_deleted_while_the_watch_was_refused_are_seen_gone(api: Api) -> None:
    """A permanent error (403: RBAC) ends the informer; the next one lists afresh, and a Node
    that list lacks was deleted meanwhile, though no watch said so."""
    fake, store = api
    await add_node(fake, "node-a")
    await add_node(fake, "node-b")
    nodes = ClusterNodes(store, watch_timeout=5.0, retry_permanent=0.5)
    following = asyncio.create_task(nodes.run())
    try:
        for _ in range(200):
            if nodes.synced:
                break
            await asyncio.sleep(0.05)
        assert nodes.take_changed() == {"node-a", "node-b"}
        fake.inject_error(403, reason="Forbidden", method="GET", path_contains="watch=")
        watches = sum(1 for _, p in fake.requests if p == "/api/v1/nodes")
        await fake.close_watches()
        for _ in range(200):  # the refused watch
            if sum(1 for _, p in fake.requests if p == "/api/v1/nodes") >= watches + 1:
                break
            await asyncio.sleep(0.02)
        await store.delete(NODES, "node-b")
        for _ in range(200):
            if nodes.uid("node-b") is None:
                break
            await asyncio.sleep(0.05)
        assert (nodes.uid("node-a") is not None, nodes.uid("node-b")) == (True, None)
        assert nodes.take_changed() == {"node-b"}
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following


class _BrokenOnce:
    """A store whose first list of Nodes raises what no API error is (a bug, a library change)."""

    def __init__(self, store: ApiStore) -> None:
        self._store = store
        self.broken = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list(self, resource: Any, namespace: str | None = None, **options: Any) -> Any:
        if not self.broken:
            self.broken = True
            raise RuntimeError("unexpected")
        return await self._store.list(resource, namespace, **options)


async def test_the_node_watch_outlives_an_unexpected_error(api: Api) -> None:
    """An error that is no API error must not end the Node watch for good: the inventory would
    go on with a frozen view of the Nodes (and `/healthz` would not notice)."""
    fake, store = api
    await add_node(fake, "node-a")
    broken = _BrokenOnce(store)
    nodes = ClusterNodes(broken, watch_timeout=5.0, retry_permanent=0.05)
    following = asyncio.create_task(nodes.run())
    try:
        for _ in range(200):
            if nodes.synced or following.done():
                break
            await asyncio.sleep(0.05)
        assert broken.broken
        assert not following.done(), following
        assert nodes.uid("node-a") is not None
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
