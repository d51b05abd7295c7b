"""Review tests of the Kubernetes mirror against what a real API server does with our slices."""

from __future__ import annotations

import copy
from typing import Any

from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.pools import PoolBook
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import RESOURCE_SLICES
from gpudra_slices import SliceOptions
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import inventory_pb2 as pb


def _as_served(value: Any) -> Any:
    """A slice as the API server returns it: Go's `omitempty` drops empty lists and maps."""
    if isinstance(value, dict):
        out = {k: _as_served(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ([], {})}
    if isinstance(value, list):
        return [_as_served(v) for v in value]
    return value


async def test_an_empty_pool_as_the_api_serves_it_is_not_drift(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    fake, store = api
    mirror = SliceMirror(store, "gpu.nvidia.com")
    book = PoolBook(SliceOptions())
    change = book.observe(pb.NodeInventory(node="node-empty", generation=1), seen_at=1.0)
    assert change is not None
    await mirror.apply(change)
    # What a real API server holds after that create: the same slice, empty fields left out.
    for obj in fake.objects(RESOURCE_SLICES):
        await fake.put(RESOURCE_SLICES, _as_served(copy.deepcopy(obj)))
    drift = await mirror.drifted(book)
    assert drift.nodes == [], "the API's copy of the empty pool is the pool"
    writes = mirror.writes
    await mirror.apply(change)
    assert mirror.writes == writes, "nothing to write again"
