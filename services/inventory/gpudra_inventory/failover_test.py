"""Two inventory processes against a real nats-server: kill -9 the leader, the standby takes over.

The processes run `python -m gpudra_inventory` with this interpreter's import path, each with its
own health port (its `/readyz` and `/statusz` read over HTTP); the lease TTL is short so the test
is quick.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import nats.js.errors
import pytest
from nats.aio.client import Client

from gpudra_bus import SLICES_BUCKET, Publisher, subjects
from gpudra_inventory.lease import LEASE_BUCKET, LEASE_KEY
from gpudra_inventory.pools_test import inventory
from gpudra_inventory.service import NODE_INVENTORY
from gpudra_inventory.writer_test import stored_revisions
from gpudra_standalone.nats_server import NatsServer

TTL = 1.5
# What the takeover may take: the TTL, the server's expiry sweep, a standby retry (TTL/4) and a
# loop turn (1 s), plus room for a machine shared by many test runs.
TAKEOVER_BOUND = TTL + TTL / 4 + 1.0 + 6.0


class Replica:
    def __init__(self, name: str, nats_url: str, tmp: Path) -> None:
        self.name = name
        self.log = tmp / f"{name}.log"
        env = dict(os.environ)
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
                "GPUDRA_NATS_URL": nats_url,
                "GPUDRA_INVENTORY_LEASE_TTL": str(TTL),
                "GPUDRA_INVENTORY_LEASE_HOLDER": name,
                "GPUDRA_HEALTH_PORT": "0",
                "PYTHONWARNINGS": "ignore",
            }
        )
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpudra_inventory"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def port(self) -> int | None:
        found = re.search(r"health server on port (\d+)", self.log.read_text(errors="replace"))
        return int(found.group(1)) if found else None

    def ready(self) -> bool:
        port = self.port()
        if port is None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def role(self) -> str | None:
        """The role `/statusz` reports (None while the server is not up)."""
        port = self.port()
        if port is None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/statusz", timeout=2) as reply:
                status = json.loads(reply.read())
        except (urllib.error.URLError, OSError):
            return None
        assert status["holder"] == self.name
        role = status["role"]
        return role if isinstance(role, str) else None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)


@pytest.fixture
def replicas(fresh_nats_server: NatsServer, tmp_path: Path) -> Iterator[dict[str, Replica]]:
    started: dict[str, Replica] = {}
    try:
        yield started
    finally:
        for replica in started.values():
            if replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait(timeout=20)


@pytest.fixture
def nc(fresh_bus: Client) -> Client:
    """gpudra's streams and buckets on a private server (`gpudra_testing`'s `fresh_bus`)."""
    return fresh_bus


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def holder(nc: Client) -> str | None:
    try:
        entry = await (await nc.jetstream().key_value(LEASE_BUCKET)).get(LEASE_KEY)
    except (nats.js.errors.NotFoundError, nats.js.errors.KeyNotFoundError):
        return None
    name = json.loads(entry.value or b"{}").get("holder")
    return name if isinstance(name, str) else None


async def test_kill_9_of_the_leader_hands_over_with_higher_generations(
    nc: Client, fresh_nats_server: NatsServer, replicas: dict[str, Replica], tmp_path: Path
) -> None:
    kv = await nc.jetstream().key_value(SLICES_BUCKET)
    publisher = Publisher(nc)
    for node in ("node-a", "node-b"):
        await publisher.publish(subjects.inventory(node), inventory(node), NODE_INVENTORY)

    replicas["a"] = Replica("a", fresh_nats_server.url, tmp_path)
    await until(lambda: _is(holder(nc), "a"), 60, "replica a leading")
    await until(lambda: _true(replicas["a"].ready()), 30, "replica a ready")
    replicas["b"] = Replica("b", fresh_nats_server.url, tmp_path)
    await until(lambda: _true(replicas["b"].ready()), 60, "replica b ready (warm standby)")
    assert await holder(nc) == "a"
    assert (replicas["a"].role(), replicas["b"].role()) == ("leader", "standby")

    first = await stored_revisions(kv)
    (old,) = {g for _, g in first.values()}
    assert len(first) == 2
    await asyncio.sleep(TTL)  # the standby, caught up, must not write
    assert await stored_revisions(kv) == first

    replicas["a"].proc.send_signal(signal.SIGKILL)
    replicas["a"].proc.wait(timeout=20)

    async def taken_over() -> bool:
        now = await stored_revisions(kv)
        return await holder(nc) == "b" and len(now) == 2 and all(g > old for _, g in now.values())

    took = await until(taken_over, TAKEOVER_BOUND, "takeover by replica b")
    print(f"takeover after kill -9: {took:.2f} s (lease TTL {TTL} s)")
    after = await stored_revisions(kv)
    assert set(after) == set(first)
    assert {g for _, g in after.values()} == {old + 1}
    assert replicas["b"].ready()
    assert replicas["b"].role() == "leader"
    assert replicas["b"].stop() == 0
    assert "released" in replicas["b"].log.read_text(errors="replace")


async def _true(value: bool) -> bool:
    return value


async def _is(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected
