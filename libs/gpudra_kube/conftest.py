"""Fixtures of gpudra_kube tests: the fake Kubernetes API (`kube_api`, `kubeconfig`) and `store`,
parametrized over both backends so that every contract test runs against each."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gpudra_bus.connection import connect, disconnect
from gpudra_bus.streams import BucketSpec, ensure_bucket
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.kv_backend import BUCKETS, KvStore
from gpudra_kube.store import Store
from gpudra_testing.kube_fixtures import kube_api, kubeconfig

__all__ = ["api_store", "kube_api", "kubeconfig", "kv_store", "store"]


@pytest_asyncio.fixture
async def api_store(kubeconfig: Path) -> AsyncIterator[ApiStore]:
    api = await ApiStore.from_kubeconfig(str(kubeconfig))
    try:
        yield api
    finally:
        await api.close()


@pytest_asyncio.fixture
async def kv_store(nats_url: str) -> AsyncIterator[Store]:
    nc = await connect(nats_url, name="contract-test", deadline=5)
    try:
        # Unique buckets: tests share one server.
        prefix = uuid.uuid4().hex[:8]
        buckets = {r: f"t{prefix}-{b}" for r, b in BUCKETS.items()}
        for name in buckets.values():
            await ensure_bucket(nc.jetstream(), BucketSpec(name))
        yield KvStore(nc, buckets=buckets)
    finally:
        await disconnect(nc)


@pytest.fixture(params=["api_store", "kv_store"])
def store(request: pytest.FixtureRequest) -> Store:
    backend: Store = request.getfixturevalue(request.param)
    return backend
