"""Fixtures for gpudra_bus tests: a client of a private NATS server (outage tests kill it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from nats.aio.client import Client

from gpudra_bus.connection import Backoff, connect, disconnect
from gpudra_testing import NatsServer

FAST = Backoff(initial=0.01, maximum=0.2)


@pytest_asyncio.fixture
async def fresh_nc(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await connect(fresh_nats_server.url, name="test", backoff=FAST, deadline=10)
    try:
        yield nc
    finally:
        await disconnect(nc, drain=False)
