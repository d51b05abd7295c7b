"""What the allocator's tests share: a client of the session's nats-server (`nc`), a KV bucket of
its own for each test (`kv`, so tests on the shared server never see each other's keys), and the
plain GPU slice and claim the gang and engine tests build (`gpu_slice`, `gpu_claim`), the
claim event that carries such a claim (`pending_event`), and a whole allocator served until ready
(`serving`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_allocator.main import serve
from gpudra_allocator.settings import Settings
from gpudra_api import parse_resource_claim, parse_resource_slice
from gpudra_bus import BucketSpec, connect, ensure_bucket
from gpudra_testing.statusz import free_port, until_status
from gpudrapb.v1 import claims_pb2

__all__ = [
    "gpu_claim",
    "gpu_claim_doc",
    "gpu_slice",
    "gpu_slice_doc",
    "kv",
    "nc",
    "pending_event",
    "serving",
]


def gpu_slice_doc(node: str, gpus: int = 4) -> dict[str, Any]:
    """The one slice of `node`'s pool as JSON: `gpus` plain `gpu.nvidia.com` devices, gpu-0 up."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-slice"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(gpus)
            ],
        },
    }


def gpu_slice(node: str, gpus: int = 4) -> Any:
    """`gpu_slice_doc`, parsed."""
    return parse_resource_slice(gpu_slice_doc(node, gpus))


def tray(node: str, clique: str) -> Any:
    """A 4-GPU tray `node` whose GPUs are in fabric clique `clique` (`gpu_slice` + `cliqueID`)."""
    doc = gpu_slice_doc(node, 4)
    for device in doc["spec"]["devices"]:
        device["attributes"]["cliqueID"] = {"string": clique}
    return parse_resource_slice(doc)


def gpu_claim_doc(name: str, count: int) -> dict[str, Any]:
    """Claim `default/name` (uid `uid-<name>`) asking for `count` `gpu.nvidia.com` devices, as
    the JSON a ClaimEvent carries."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }


def gpu_claim(name: str, count: int) -> Any:
    """`gpu_claim_doc`, parsed."""
    return parse_resource_claim(gpu_claim_doc(name, count))


def pending_event(doc: dict[str, Any]) -> claims_pb2.ClaimEvent:
    """The pending-claim event the claim-writer sends for `doc`, a claim of `default` named and
    uid'd as `gpu_claim_doc` does (generation 1)."""
    name = doc["metadata"]["name"]
    return claims_pb2.ClaimEvent(
        kind=claims_pb2.ClaimEvent.KIND_PENDING,
        claim=claims_pb2.ClaimRef(namespace="default", name=name, uid=f"uid-{name}", generation=1),
        claim_json=json.dumps(doc).encode(),
    )


@contextlib.asynccontextmanager
async def serving(nats_url: str, retry_interval: float) -> AsyncIterator[int]:
    """The service's own `serve` (replica `alloc-a`, first-fit) on `nats_url`, ready; yields
    its health port and stops it on exit."""
    port = free_port()
    settings = Settings(
        nats_url=nats_url,
        health_host="127.0.0.1",
        health_port=port,
        replica_id="alloc-a",
        policy="first-fit",
        retry_interval=retry_interval,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop))
    try:
        await until_status(port, lambda s: bool(s["ready"]))
        yield port
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="allocator-test", deadline=5)
    yield client
    await client.drain()


@pytest_asyncio.fixture
async def kv(nc: Client) -> KeyValue:
    return await ensure_bucket(nc.jetstream(), BucketSpec(f"t-{uuid.uuid4().hex[:10]}"))
