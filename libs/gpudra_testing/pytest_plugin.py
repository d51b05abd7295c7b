"""Pytest fixtures every gpudra test can use (loaded by the root conftest.py).

- `nats_server` (session): one real JetStream server for the whole run; tests isolate themselves
  with unique stream/bucket names. `fresh_nats_server` (function): a private server a test may kill
  and restart. `nats_url`: the session server's URL. `fresh_bus`: a client of a fresh server on
  which gpudra's streams and buckets exist, as the services create them at start.
- `_no_leaked_tasks` (autouse): fails a test that leaves asyncio tasks running, as kopf does; a
  leaked task is a bug (work silently lost at shutdown), not noise.
- `_hung_test_fails` (autouse): a test whose event loop is still running it `HANG_AFTER` seconds
  after it started (`GPUDRA_TEST_HANG_AFTER` overrides) is cancelled, after every task's stack is
  written to stderr: a wait with no time bound fails that test and says where it waited, instead
  of hanging the whole file until Pants' 600 s timeout with nothing to show. A test blocked
  outside the event loop (a synchronous wait) is not caught.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from gpudra_bus import connect, ensure_buckets, ensure_streams
from gpudra_standalone.nats_server import NatsServer

HANG_AFTER = 240.0  # seconds: well over any test's own waits, well under Pants' 600 s per file
HANG_AFTER_ENV = "GPUDRA_TEST_HANG_AFTER"


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer.from_env().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_nats_server() -> Iterator[NatsServer]:
    server = NatsServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest_asyncio.fixture
async def fresh_bus(fresh_nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await connect(fresh_nats_server.url, name="gpudra-test", deadline=10)
    await ensure_streams(client.jetstream())
    await ensure_buckets(client.jetstream())
    yield client
    await client.drain()


NATS_PY_REQUEST_GRACE = 10.0  # seconds: nats-py's JetStream request timeout (5 s), twice


def _coro_name(task: asyncio.Task[Any]) -> str:
    return str(getattr(task.get_coro(), "__name__", ""))


@pytest_asyncio.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    # Give tasks that were cancelled during the test a chance to finish unwinding.
    for _ in range(3):
        leaked = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
        if not any(not t.done() for t in leaked):
            return
        await asyncio.sleep(0)
    # nats-py re-creates an ordered consumer (a watch that lost it: a NATS restart) in a task it
    # keeps no handle to; the request is bounded by the JetStream timeout, so wait that out.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NATS_PY_REQUEST_GRACE
    while loop.time() < deadline and any(
        _coro_name(t) == "recreate_consumer" for t in leaked if not t.done()
    ):
        await asyncio.sleep(0.05)
    names = sorted(t.get_name() + ": " + repr(t.get_coro()) for t in leaked if not t.done())
    if not names:
        return
    pytest.fail(f"test left {len(names)} asyncio task(s) running: {names}")


@pytest_asyncio.fixture(autouse=True)
async def _hung_test_fails() -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    after = float(os.environ.get(HANG_AFTER_ENV) or HANG_AFTER)

    def expire() -> None:
        running = [t for t in asyncio.all_tasks(loop) if not t.done()]
        stacks = io.StringIO()
        for task in running:
            task.print_stack(file=stacks)
        sys.stderr.write(
            f"test still running after {after:g} s ({HANG_AFTER_ENV}); cancelling its "
            f"{len(running)} task(s), which wait here:\n{stacks.getvalue()}"
        )
        for task in running:
            task.cancel()

    timer = loop.call_later(after, expire)
    try:
        yield
    finally:
        timer.cancel()
