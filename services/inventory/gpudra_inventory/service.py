"""The inventory loop: NodeInventory snapshots and heartbeats in, ResourceSlices out.

Promises:
- Each node's latest inventory (the stream keeps the last one per node) becomes that node's pool
  in the `gpudra-slices` bucket (key = slice name, value = v1 JSON); a change bumps the pool's
  generation on every slice of it and removes slices that no longer exist. The event is
  acknowledged only after the bucket was written, so a crash repeats the write, never skips it.
- A node silent for `heartbeat_timeout` keeps its devices, tainted NoSchedule; its next inventory
  removes the taint. Silence is measured from the time JetStream stored the node's last message.
- A malformed inventory (bad payload, schema, node name, or one that cannot be sliced) is
  dead-lettered and acknowledged; it never blocks the stream.
- After every change a drift summary (driver / CUDA versions per node, outliers) is published on
  `gpudra.drift`. In Kubernetes mode the same slices are mirrored to the API (`mirror`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.kv import KeyValue

from gpudra_bus import (
    INVENTORY_STREAM,
    BusError,
    BusPermanentError,
    BusRetryableError,
    Codec,
    DeadLetters,
    Publisher,
    receive,
    subjects,
    tracing,
    translate,
)
from gpudra_bus.consume import fetch_ready
from gpudra_bus.subjects import Kind
from gpudra_inventory.drift import DRIFT_SUMMARY, summarize, to_struct
from gpudra_inventory.pools import Change, PoolBook
from gpudra_inventory.settings import Settings
from gpudra_slices import SliceError, SliceOptions
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

NODE_INVENTORY: Codec[pb.NodeInventory] = Codec(pb.NodeInventory)
_NATS = (nats.errors.Error, OSError, TimeoutError)

MirrorFn = Callable[[Change], Awaitable[None]]


class InventoryService:
    def __init__(
        self,
        nc: Client,
        kv: KeyValue,
        settings: Settings,
        mirror: MirrorFn | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nc = nc
        self._kv = kv
        self._settings = settings
        self._mirror = mirror
        self._clock = clock
        self._publisher = Publisher(nc)
        self._dead = DeadLetters(self._publisher, service="inventory")
        self.book = PoolBook(SliceOptions(driver=settings.driver, dynamic_mig=settings.dynamic_mig))
        self.ready = False
        self.changes = 0
        self._last_drift: dict[str, Any] | None = None

    async def load(self) -> None:
        """Read the bucket's slices so generations continue where they were."""
        slices: list[dict[str, Any]] = []
        try:
            watcher = await self._kv.watchall()
            async for entry in watcher:
                if entry is None:
                    break
                if entry.value:
                    try:
                        slices.append(json.loads(entry.value))
                    except ValueError:
                        log.error(
                            "slice %s in the bucket is not JSON; it will be replaced", entry.key
                        )
            await watcher.stop()  # type: ignore[no-untyped-call]
        except _NATS as exc:
            raise translate(exc, "reading slices") from exc
        self.book.load(slices)
        log.info("loaded %d slices of %d pools", len(slices), len(self.book.pools))

    async def run(self, stop: asyncio.Event) -> None:
        js = self._nc.jetstream()
        sub = await js.pull_subscribe(
            subjects.all_of(Kind.INVENTORY),
            durable=self._settings.consumer,
            stream=INVENTORY_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                ack_wait=30.0,
                max_deliver=-1,
            ),
        )
        self.ready = True
        interval = min(1.0, self._settings.heartbeat_timeout / 4)
        try:
            while not stop.is_set():
                try:
                    msgs = await fetch_ready(sub, 64, interval)
                except (nats.errors.TimeoutError, TimeoutError):
                    msgs = []
                except (nats.errors.Error, OSError) as exc:
                    log.warning("fetching inventories failed (%s); retrying", exc)
                    await asyncio.sleep(0.5)
                    continue
                for msg in msgs:
                    await self._guarded(msg)
                for change in self.book.expire(self._clock(), self._settings.heartbeat_timeout):
                    log.warning("node %s missed its heartbeats: devices tainted", change.node)
                    await self._apply(change)
        finally:
            self.ready = False
            await sub.unsubscribe()

    async def _guarded(self, msg: Msg) -> None:
        try:
            await self.handle(msg)
        except BusRetryableError as exc:
            log.warning("inventory on %s deferred: %s", msg.subject, exc)
            with contextlib.suppress(*_NATS):
                await msg.nak(delay=1.0)
        except (BusPermanentError, SliceError) as exc:
            await self._dead.send(msg.subject, msg.data, msg.headers, exc)
            with contextlib.suppress(*_NATS):
                await msg.ack()

    async def handle(self, msg: Msg) -> None:
        inventory = await receive(msg, NODE_INVENTORY, self._dead)
        if inventory is None:
            return
        with tracing.process_span(msg.subject, msg.headers, size=len(msg.data)):
            node = subjects.parse(msg.subject).node
            if inventory.node != node:
                raise BusPermanentError(
                    f"inventory of node {inventory.node!r} published on {msg.subject}"
                )
            seen_at = msg.metadata.timestamp.timestamp() if msg.metadata else self._clock()
            change = self.book.observe(inventory, seen_at)
            if change is not None:
                await self._apply(change)
            await msg.ack()

    async def _apply(self, change: Change) -> None:
        for s in change.write:
            data = json.dumps(s, separators=(",", ":"), sort_keys=True).encode()
            try:
                await self._kv.put(s["metadata"]["name"], data)
            except _NATS as exc:
                raise translate(exc, f"writing slice {s['metadata']['name']}") from exc
        for name in change.delete:
            try:
                await self._kv.delete(name)
            except _NATS as exc:
                raise translate(exc, f"deleting slice {name}") from exc
        self.changes += 1
        log.info(
            "pool %s: generation %d, %d slice(s), %d removed",
            change.node,
            change.generation,
            len(change.write),
            len(change.delete),
        )
        if self._mirror is not None:
            await self._mirror(change)
        await self._publish_drift()

    async def _publish_drift(self) -> None:
        inventories = {n: s.inventory for n, s in self.book.pools.items() if s.inventory}
        summary = summarize(inventories)
        if summary == self._last_drift:
            return
        self._last_drift = summary
        data, headers = DRIFT_SUMMARY.encode(to_struct(summary))
        try:
            with tracing.publish_span(subjects.DRIFT, size=len(data)):
                await self._nc.publish(subjects.DRIFT, data, headers=tracing.inject(headers))
        except _NATS as exc:
            # The summary is recomputed on the next change; losing one is harmless.
            log.warning("drift summary not published: %s", exc)
        except BusError as exc:
            log.warning("drift summary not published: %s", exc)
