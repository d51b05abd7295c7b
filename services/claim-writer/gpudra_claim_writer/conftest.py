"""What the claim-writer's tests share: a client of a fresh nats-server with gpudra's streams and
buckets (`nc`), the HTTP-level fake Kubernetes API with an `ApiStore` on it (`api`), the
service's settings in kubernetes mode against that fake (`kube_settings`), the plain claim and
allocation most tests write (`new_claim`, `ALLOCATION`, from `gpudra_testing.claims`), and the
allocator's decision about such a claim (`decide`); `until` (from `gpudra_testing.waiting`)
polls a plain condition, and `cancel_and_wait` stops a test's tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gpudra_bus import (
    ALLOCATION_DECISION,
    Publisher,
    connect,
    subjects,
)
from gpudra_claim_writer.main import serve
from gpudra_claim_writer.settings import Settings
from gpudra_kube.api_backend import ApiStore
from gpudra_testing.claims import ALLOCATION
from gpudra_testing.claims import claim as new_claim
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.nats_queue import queued
from gpudra_testing.waiting import TIMEOUT, until
from gpudrapb.v1 import claims_pb2

__all__ = [
    "ALLOCATION",
    "api",
    "cancel_and_wait",
    "decide",
    "kube_settings",
    "nc",
    "new_claim",
    "serving",
    "until",
]


async def decide(
    publisher: Publisher, claim: dict[str, Any], *, reason: str = "", allocation_id: str = ""
) -> None:
    """Publish the allocator's decision about the stored `claim`: `ALLOCATION` on n1 (with
    `allocation_id`, as the allocator's decision of that id), or unschedulable for `reason`. One
    message id per outcome, so a repeat is deduplicated."""
    meta = claim["metadata"]
    ref = claims_pb2.ClaimRef(namespace="default", name=meta["name"], uid=meta["uid"])
    decision = claims_pb2.AllocationDecision(claim=ref)
    if reason:
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE
        decision.reason = reason
    else:
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_ALLOCATED
        decision.allocation_json = json.dumps(ALLOCATION).encode()
        decision.node_name = "n1"
        decision.allocation_id = allocation_id
    outcome = reason or (f"{allocation_id}/allocated" if allocation_id else "allocated")
    await publisher.publish(
        subjects.allocations("default", meta["name"]),
        decision,
        ALLOCATION_DECISION,
        msg_id=f"{meta['uid']}/{outcome}",
    )


async def cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` (a test's loops, on its way out) and wait for each to end."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def kube_settings(nats_url: str, fake: FakeKubeApi, tmp_path: Path, **more: Any) -> Settings:
    """Settings of a claim-writer in kubernetes mode against `fake` (its kubeconfig written into
    `tmp_path`): health on 127.0.0.1 at any port, watches of 1 s, pods not gated; `more` changes
    any of them or sets others."""
    fields: dict[str, Any] = {
        "nats_url": nats_url,
        "health_host": "127.0.0.1",
        "health_port": 0,
        "mode": "kubernetes",
        "kubeconfig": str(fake.write_kubeconfig(tmp_path / "kubeconfig")),
        "watch_timeout": 1.0,
        "gate_pods": False,
    }
    return Settings(**{**fields, **more})


@pytest.fixture
def nc(fresh_bus: Client) -> Client:
    """gpudra's streams and buckets on a private server (`gpudra_testing`'s `fresh_bus`)."""
    return fresh_bus


@pytest_asyncio.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[FakeKubeApi, ApiStore]]:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        store = await ApiStore.from_kubeconfig(str(fake.write_kubeconfig(tmp_path / "kc")))
        try:
            yield fake, store
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Client]:
    """The claim-writer running in this process with `settings` (its own `serve`), and a client
    of its NATS server; stopped, and waited for, on the way out."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop))
    nc = await connect(settings.nats_url, name="claim-writer-test", deadline=10)
    try:
        yield nc
    finally:
        await nc.drain()
        stop.set()
        await asyncio.wait_for(task, 20)


class Heard:
    """ClaimEvents the claim-writer publishes, as a core NATS subscriber sees them.

    A subscription without a callback (`await Heard.on(nc, subject)`): the client's read loop
    queues each message as it comes, so `arrived()` counts them without waiting for a callback
    task to run, and `take()` flushes the connection first (then everything published before is
    queued: the server delivers to subscribers before it acknowledges a publish) and moves the
    queue into `events` and `ids`, in order (`gpudra_testing.nats_queue.queued`). Read `events`
    after a `take()`: a callback could still be pending then, the queue cannot (the flake CI met
    with callback-filled lists)."""

    def __init__(self, nc: Client, sub: Subscription) -> None:
        self.events: list[claims_pb2.ClaimEvent] = []
        self.ids: list[str] = []  # their message ids (JetStream deduplicates by them)
        self._nc = nc
        self._sub = sub

    @classmethod
    async def on(cls, nc: Client, subject: str) -> Heard:
        return cls(nc, await nc.subscribe(subject))

    def _add(self, msg: Msg) -> None:
        event = claims_pb2.ClaimEvent()
        event.ParseFromString(msg.data)
        self.events.append(event)
        self.ids.append((msg.headers or {}).get("Nats-Msg-Id", ""))

    def arrived(self) -> int:
        """Events taken and events queued: for `until`, which needs no `take()` to see them."""
        return len(self.events) + self._sub.pending_msgs

    async def take(self) -> list[claims_pb2.ClaimEvent]:
        """Flush, then move every queued message into `events` (and `ids`); all events so far."""
        for msg in await queued(self._nc, self._sub):
            self._add(msg)
        return self.events

    async def settle(self, count: int) -> list[claims_pb2.ClaimEvent]:
        """Wait (`until`, bounded) for `count` events in all, then `take()` them."""
        await until(lambda: self.arrived() >= count, f"{count} claim events")
        return await self.take()

    async def take_until(
        self, check: Callable[[], object], what: str = "the claim events"
    ) -> list[claims_pb2.ClaimEvent]:
        """`take()` until `check()` (which reads `events`) holds; `AssertionError` naming `what`
        after `gpudra_testing.waiting.TIMEOUT` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not check():
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {TIMEOUT:g}s waiting for {what}")
            await asyncio.sleep(0.01)
            await self.take()
        return self.events

    async def stop(self) -> list[claims_pb2.ClaimEvent]:
        """`take()` what has come, then unsubscribe; all events."""
        await self.take()
        await self._sub.unsubscribe()
        return self.events

    def kinds(self) -> list[str]:
        return [claims_pb2.ClaimEvent.Kind.Name(e.kind) for e in self.events]
