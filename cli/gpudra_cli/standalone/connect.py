"""How the kubectl-like commands reach the running system: the state file, then its NATS."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gpudra_cli.standalone import cliargs, state
from gpudra_cli.standalone.client import Client


@asynccontextmanager
async def connected(args: argparse.Namespace) -> AsyncIterator[tuple[state.State, Client]]:
    running = state.load(cliargs.state_path(args))
    client = await Client.open(running.nats_url)
    try:
        yield running, client
    finally:
        await client.close()
