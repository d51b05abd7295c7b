"""Fixtures shared by the inventory's Kubernetes-mode tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_testing.kubeapi import FakeKubeApi

Api = tuple[FakeKubeApi, ApiStore]


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
