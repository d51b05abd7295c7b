from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.pools import Change, PoolBook
from gpudra_inventory.pools_test import inventory
from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.resources import RESOURCE_SLICES
from gpudra_slices import SliceOptions
from gpudra_testing.kubeapi import FakeKubeApi


@pytest_asyncio.fixture
async def api(tmp_path: Any) -> AsyncIterator[tuple[FakeKubeApi, ApiStore]]:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        client = await load_api_client(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        store = ApiStore(client)
        try:
            yield fake, store
        finally:
            await store.close()


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
