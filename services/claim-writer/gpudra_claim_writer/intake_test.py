"""Intake against a real nats-server and the standalone claim store: which claims are offered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from gpudra_bus import Publisher, connect, ensure_buckets, ensure_streams
from gpudra_claim_writer.intake import Intake
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import DEVICE_CLASSES
from gpudra_kube.store import EventType, WatchEvent
from gpudra_standalone.nats_server import NatsServer


@pytest_asyncio.fixture
async def nc(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(fresh_nats_server.url, name="intake-test", deadline=10)
    await ensure_streams(client.jetstream())
    await ensure_buckets(client.jetstream())
    yield client
    await client.drain()


def claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }


@pytest.mark.parametrize(
    ("device_class", "pending", "foreign"),
    [
        pytest.param("gpu.nvidia.com", 1, 0, id="built-in-class"),
        pytest.param("nic.example.com", 0, 1, id="other-drivers-class"),
        pytest.param("later.example.com", 1, 0, id="undefined-class-waits-in-the-allocator"),
    ],
)
async def test_only_gpudras_claims_are_offered_and_gated_pods_hear_of_every_claim(
    nc: Client, device_class: str, pending: int, foreign: int
) -> None:
    store = KvStore(nc)
    await store.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "nic.example.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
        },
    )
    heard: list[tuple[str, str]] = []

    async def on_claim(namespace: str, name: str) -> None:
        heard.append((namespace, name))

    intake = Intake(store, Publisher(nc), on_claim=on_claim, ownership=Ownership(store))
    event = WatchEvent(EventType.ADDED, claim("c", device_class))
    await intake.on_event(event)
    await intake.on_event(event)  # a repeat (relist) decides nothing new
    assert intake.published["pending"] == pending
    assert intake.published["foreign"] == foreign
    assert heard == [("default", "c"), ("default", "c")]
