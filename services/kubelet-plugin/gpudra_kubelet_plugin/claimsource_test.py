from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from nats.js.kv import KeyValue

from gpudra_kube import RESOURCE_CLAIMS, ApiStore
from gpudra_kubelet_plugin.claimsource import MemoryClaimSource, NatsKvClaimSource, StoreClaimSource
from gpudra_kubelet_plugin.conftest import make_claim
from gpudra_kubelet_plugin.errors import (
    ClaimNotFoundError,
    ClaimReadError,
    ClaimSourceUnavailableError,
    InvalidClaimError,
)
from gpudra_testing.kubeapi import FakeKubeApi


async def test_memory_source() -> None:
    source = MemoryClaimSource()
    claim = make_claim("c", "u", [("r", "gpu-0")])
    source.put(claim)
    assert await source.get("default", "c") == claim
    source.delete("default", "c")
    with pytest.raises(ClaimNotFoundError, match="default/c not found"):
        await source.get("default", "c")


@pytest_asyncio.fixture
async def kv(nats_url: str) -> AsyncIterator[KeyValue]:
    nc = await nats.connect(nats_url)
    try:
        yield await nc.jetstream().create_key_value(bucket=f"claims-{uuid.uuid4().hex[:10]}")
    finally:
        await nc.drain()


async def test_nats_kv_source(kv: KeyValue) -> None:
    claim = make_claim("my.claim", "u", [("r", "gpu-0")], namespace="team-a")
    await kv.put("team-a.my.claim", json.dumps(claim).encode())
    await kv.put("team-a.text", b"not json")
    await kv.put("team-a.list", b"[1]")
    await kv.put("team-a.gone", b"{}")
    await kv.delete("team-a.gone")
    source = NatsKvClaimSource(kv)
    assert await source.get("team-a", "my.claim") == claim


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        pytest.param("missing", ClaimNotFoundError, "team-a/missing not found", id="missing"),
        pytest.param("gone", ClaimNotFoundError, "team-a/gone not found", id="deleted"),
        pytest.param("text", InvalidClaimError, "does not hold JSON", id="not-json"),
        pytest.param("list", InvalidClaimError, "does not hold a JSON object", id="not-object"),
        pytest.param("Bad_Name", InvalidClaimError, "team-a/Bad_Name", id="invalid-name"),
    ],
)
async def test_nats_kv_source_errors(
    kv: KeyValue, name: str, error: type[Exception], message: str
) -> None:
    await kv.put("team-a.text", b"not json")
    await kv.put("team-a.list", b"[1]")
    await kv.put("team-a.gone", b"{}")
    await kv.delete("team-a.gone")
    with pytest.raises(error, match=message):
        await NatsKvClaimSource(kv).get("team-a", name)


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        pytest.param(None, None, "", id="found"),
        pytest.param(404, ClaimNotFoundError, "team-a/c not found", id="missing"),
        pytest.param(
            503, ClaimSourceUnavailableError, "cannot read claim team-a/c", id="unavailable"
        ),
        pytest.param(403, ClaimReadError, "cannot read claim team-a/c", id="forbidden"),
    ],
)
async def test_store_source_over_the_kubernetes_api(
    tmp_path: Path, fault: int | None, error: type[Exception] | None, message: str
) -> None:
    claim = make_claim("c", "ignored", [("r", "gpu-0")], namespace="team-a")
    del claim["status"]  # a client creates the claim; the scheduler allocates it later
    async with FakeKubeApi(validate_version=None) as api:
        stored = await api.put(RESOURCE_CLAIMS, claim)
        store = await ApiStore.from_kubeconfig(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            source = StoreClaimSource(store)
            if fault is not None:
                api.inject_error(fault, path_contains="/resourceclaims/c", times=10)
            if error is None:
                got = await source.get("team-a", "c")
                assert got["metadata"]["uid"] == stored["metadata"]["uid"]
            else:
                with pytest.raises(error, match=message):
                    await source.get("team-a", "c")
        finally:
            await store.close()
