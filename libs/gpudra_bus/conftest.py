"""Fixtures for gpudra_bus tests: a client of the shared NATS server (`nc`), a bucket of its own
on it (`new_bucket`), and a client of a private server (`fresh_nc`; outage tests kill it)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from gpudra_bus.connection import Backoff, connect, disconnect
from gpudra_testing import NatsServer

FAST = Backoff(initial=0.01, maximum=0.2)


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    """A client of the server the session's tests share; drained after the test."""
    client = await nats.connect(nats_url)
    try:
        yield client
    finally:
        await client.drain()


async def new_bucket(nc: Client, **config: Any) -> KeyValue:
    """A KV bucket under a name no other test uses (they share the server); `config` as
    `KeyValueConfig` takes it."""
    return await nc.jetstream().create_key_value(
        KeyValueConfig(bucket=f"t{uuid.uuid4().hex[:8]}", **config)
    )


@pytest_asyncio.fixture
async def fresh_nc(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await connect(fresh_nats_server.url, name="test", backoff=FAST, deadline=10)
    try:
        yield nc
    finally:
        await disconnect(nc, drain=False)
