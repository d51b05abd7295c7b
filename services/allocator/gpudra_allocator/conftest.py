"""What the allocator's tests share: a client of the session's nats-server (`nc`), a KV bucket of
its own for each test (`kv`, so tests on the shared server never see each other's keys), and the
plain GPU slice and claim the gang and engine tests build (`gpu_slice`, `gpu_claim`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_api import parse_resource_claim, parse_resource_slice
from gpudra_bus import BucketSpec, connect, ensure_bucket

__all__ = ["gpu_claim", "gpu_slice", "gpu_slice_doc", "kv", "nc"]


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


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="allocator-test", deadline=5)
    yield client
    await client.drain()


@pytest_asyncio.fixture
async def kv(nc: Client) -> KeyValue:
    return await ensure_bucket(nc.jetstream(), BucketSpec(f"t-{uuid.uuid4().hex[:10]}"))
