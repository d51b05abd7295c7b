"""Fixtures of the cross-service tests: a NATS client with gpudra's streams and buckets, and a
`Cluster` of service processes, both on the test's private nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from control_plane.cluster import Cluster
from gpudra_bus import connect, ensure_buckets, ensure_streams
from gpudra_standalone.nats_server import NatsServer


@pytest_asyncio.fixture
async def nc(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(fresh_nats_server.url, name="control-plane-test", deadline=10)
    js = client.jetstream()
    await ensure_streams(js)
    await ensure_buckets(js)
    yield client
    await client.drain()


@pytest.fixture
def cluster(fresh_nats_server: NatsServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(fresh_nats_server.url, tmp_path)
    yield c
    c.stop_all()
