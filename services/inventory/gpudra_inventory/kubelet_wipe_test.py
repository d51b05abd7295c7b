"""Kubernetes mode: slices the kubelet deletes (at its start, or after a plugin left) come back
promptly, and the inventory's own deletions do not.

Against the HTTP-level fake API (which validates every object written against the
`resource.k8s.io/v1` schema) and a real nats-server. "The kubelet" is a second client deleting
each of a node's slices, as the API server's DeleteCollection does for the kubelet's
field-selector delete (the fake has no collection delete). The resync is set to an hour: what
comes back here, the watch brought back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from nats.aio.client import Client

from gpudra_bus import Publisher, subjects
from gpudra_inventory.conftest import api_store, running_inventory
from gpudra_inventory.node_owner_test import add_node, owned_by, slices, until
from gpudra_inventory.pools_test import inventory
from gpudra_inventory.service import NODE_INVENTORY, InventoryService
from gpudra_inventory.settings import Settings
from gpudra_inventory.wipes import SliceWatch
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import NODES, RESOURCE_SLICES, KubeObject
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.waiting import until as wait_until

DELAY = 0.3  # the repair delay these tests run with (seconds)
X0, X1 = "node-x-gpu.nvidia.com-0", "node-x-gpu.nvidia.com-1"  # an A100 with MIG: two slices
Y = "node-y-gpu.nvidia.com-0"
COLLECTION = "/apis/resource.k8s.io/v1/resourceslices"
WIPED = "were deleted by someone else"


class RecordingKubeApi(FakeKubeApi):
    """The fake API, also recording each request's path with its query (a list and a watch of
    the slices share their path)."""

    def __init__(self) -> None:
        super().__init__(validate_version="1.34", bookmark_interval=0.1)
        self.queries: list[tuple[str, str]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.queries.append((request.method, request.path_qs))
        return await super()._handle(request)

    def slice_lists(self) -> int:
        """Lists of the slices so far (a resync's, or the watch's first list or relist)."""
        return sum(
            1
            for m, qs in self.queries
            if m == "GET" and qs.partition("?")[0] == COLLECTION and "watch=" not in qs
        )


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[RecordingKubeApi, ApiStore]]:
    """As conftest's `api` (validating every write against the v1.34 schema), recording queries."""
    fake = RecordingKubeApi()
    async with fake, api_store(fake, tmp_path / "kubeconfig") as store:
        yield fake, store


@contextlib.asynccontextmanager
async def inventory_service(
    server: NatsServer, store: ApiStore, *, retry_permanent: float = 30.0
) -> AsyncIterator[tuple[Client, InventoryService, SliceWatch, asyncio.Task[None]]]:
    """A kubernetes-mode inventory (no lease: it leads) with the slice watch, running; an hour's
    resync, and nodes never silent long enough to be tainted."""
    watch = SliceWatch(store, "gpu.nvidia.com", delay=DELAY, retry_permanent=retry_permanent)
    settings = Settings(mode="kubernetes", heartbeat_timeout=600.0, api_resync=3600.0)
    async with running_inventory(server, store, "kubelet-wipe-test", settings, wipes=watch) as (
        nc,
        _,
        service,
        task,
        _,
    ):
        yield nc, service, watch, task


def kubelet(fake: FakeKubeApi, tmp_path: Path) -> contextlib.AbstractAsyncContextManager[ApiStore]:
    """Another client of the API (the kubelet's)."""
    return api_store(fake, tmp_path / "kubelet.kubeconfig")


async def publish(nc: Client, node: str, profile: str) -> None:
    inv = inventory(node, profile)
    await Publisher(nc).publish(subjects.inventory(node), inv, NODE_INVENTORY)


async def wipe(kubelet_store: ApiStore, fake: FakeKubeApi, node: str) -> list[str]:
    """What the kubelet's start does: delete every slice of the node, of every driver, at once
    (the API server's DeleteCollection deletes them one by one, within milliseconds)."""
    names = sorted(
        o["metadata"]["name"]
        for o in fake.objects(RESOURCE_SLICES)
        if o["spec"]["nodeName"] == node
    )
    await asyncio.gather(*(kubelet_store.delete(RESOURCE_SLICES, name) for name in names))
    return names


def other_drivers_slice(node: str) -> KubeObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-other.example.com"},
        "spec": {
            "driver": "other.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0"}],
        },
    }


def wiped_logs(caplog: pytest.LogCaptureFixture, node: str) -> int:
    return sum(
        1 for r in caplog.records if WIPED in r.getMessage() and f" {node} " in r.getMessage()
    )


@contextlib.asynccontextmanager
async def mirrored(
    fake: RecordingKubeApi, fresh_nats_server: NatsServer, store: ApiStore, **kwargs: float
) -> AsyncIterator[tuple[InventoryService, SliceWatch, asyncio.Task[None]]]:
    """The inventory running, with node-x's two slices and node-y's one in the API."""
    async with inventory_service(fresh_nats_server, store, **kwargs) as (nc, service, watch, task):
        await publish(nc, "node-x", "a100-mig")
        await publish(nc, "node-y", "dgx-h100")
        await until(fake, task, lambda s: {X0, X1, Y} <= s.keys())
        # The first resync runs once the pools are written, none after it for an hour; the
        # watch lists once.
        await wait_until(lambda: fake.slice_lists() >= 2, "the first resync and the watch's list")
        yield service, watch, task


async def test_slices_the_kubelet_deletes_come_back_without_a_resync(
    api: tuple[RecordingKubeApi, ApiStore],
    fresh_nats_server: NatsServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only ours come back (the kubelet's start deletes every driver's), owned by the Node, once
    logged; the other node's are left alone."""
    caplog.set_level(logging.INFO)
    fake, store = api
    uid = await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    await fake.put(RESOURCE_SLICES, other_drivers_slice("node-x"))
    async with mirrored(fake, fresh_nats_server, store) as (service, watch, task):
        lists = fake.slice_lists()
        untouched = slices(fake)[Y]
        async with kubelet(fake, tmp_path) as kubelet_store:
            wiped = await wipe(kubelet_store, fake, "node-x")
        assert wiped == sorted([X0, X1, "node-x-other.example.com"])
        back = await until(fake, task, lambda s: {X0, X1} <= s.keys())
        # Neither a resync nor a relist: the watch's DELETED events brought them back.
        assert fake.slice_lists() == lists
        assert "node-x-other.example.com" not in back
        assert back[X0]["metadata"]["ownerReferences"] == owned_by("node-x", uid)
        assert back[X1]["metadata"]["ownerReferences"] == owned_by("node-x", uid)
        assert back[Y] == untouched
        assert (wiped_logs(caplog, "node-x"), wiped_logs(caplog, "node-y")) == (1, 0)
        assert service.status()["apiRepairs"] == 1


async def test_a_pool_the_inventory_removed_does_not_come_back(
    api: tuple[RecordingKubeApi, ApiStore],
    fresh_nats_server: NatsServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A deleted Node's slices, which the inventory removed itself, stay gone; a wipe of another
    node after it (so its window closes after theirs) is repaired."""
    caplog.set_level(logging.INFO)
    fake, store = api
    await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    async with mirrored(fake, fresh_nats_server, store) as (_, watch, task):
        await store.delete(NODES, "node-x")
        await until(fake, task, lambda s: sorted(s) == [Y])
        await wait_until(lambda: watch.deletions >= 2, "the watch to see both go")
        since = len(fake.requests)
        async with kubelet(fake, tmp_path) as kubelet_store:
            assert await wipe(kubelet_store, fake, "node-y") == [Y]
        await until(fake, task, lambda s: sorted(s) == [Y])
        writes = [(m, p) for m, p in fake.requests[since:] if m in ("POST", "PUT")]
        assert writes == [("POST", COLLECTION)]  # node-y's slice, nothing of node-x
        assert (wiped_logs(caplog, "node-x"), wiped_logs(caplog, "node-y")) == (0, 1)


async def test_someone_who_keeps_deleting_is_not_fought_in_a_loop(
    api: tuple[RecordingKubeApi, ApiStore], fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    """Each repair after a deletion that follows the last repair closely waits twice as long:
    0.3, 0.6, 1.2 s before the fourth deletion (a lower bound: a slow machine only adds; the
    loop's turns add up to a second each, so `wipes_test` checks the doubling itself)."""
    fake, store = api
    await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    async with mirrored(fake, fresh_nats_server, store) as (_, _, task):
        deleted = 0
        loop = asyncio.get_running_loop()
        async with kubelet(fake, tmp_path) as kubelet_store:

            async def keep_deleting() -> None:
                nonlocal deleted
                while True:
                    if Y in slices(fake):
                        await kubelet_store.delete(RESOURCE_SLICES, Y)
                        deleted += 1
                    await asyncio.sleep(0.01)

            deleter = asyncio.create_task(keep_deleting())
            started = loop.time()
            try:
                await wait_until(lambda: deleted >= 4 or task.done(), "4 deletions")
                elapsed = loop.time() - started
            finally:
                deleter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await deleter
        assert not task.done()
        assert elapsed >= DELAY * (1 + 2 + 4)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(503, "ServiceUnavailable", id="api-away"),
        pytest.param(403, "Forbidden", id="watch-forbidden"),
    ],
)
async def test_an_api_outage_backs_off_and_what_went_meanwhile_comes_back(
    api: tuple[RecordingKubeApi, ApiStore],
    fresh_nats_server: NatsServer,
    tmp_path: Path,
    status: int,
    reason: str,
) -> None:
    """While the API refuses to list or watch slices (away: 503; an old ClusterRole without
    `watch`: 403) the watch is tried again with growing delays (503: the informer's backoff,
    0.05 s doubling, ±20 %) or every `retry_permanent` (403: 0.5 s here): six tries take at least
    a second, however loaded the machine. Once it is back (after compaction: a 410, a relist), a
    slice deleted meanwhile comes back."""
    fake, store = api
    await add_node(fake, "node-x")
    await add_node(fake, "node-y")
    async with mirrored(fake, fresh_nats_server, store, retry_permanent=0.5) as (_, _, task):
        loop = asyncio.get_running_loop()
        fake.inject_error(
            status, reason=reason, method="GET", path_contains="resourceslices", times=10**6
        )
        since = len(fake.requests)

        def tries() -> int:
            return sum(1 for m, p in fake.requests[since:] if (m, p) == ("GET", COLLECTION))

        started = loop.time()
        await fake.close_watches()
        async with kubelet(fake, tmp_path) as kubelet_store:
            assert await wipe(kubelet_store, fake, "node-y") == [Y]
        await wait_until(lambda: tries() >= 6, "six tries of the slice watch")
        assert loop.time() - started >= 1.0
        fake.compact()
        fake.clear_faults()
        await until(fake, task, lambda s: Y in s)
