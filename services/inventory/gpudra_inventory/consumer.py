"""This replica's own JetStream consumer of the node-agents' inventories.

Promises of `InventoryConsumer`:
- Every replica reads every inventory through its own consumer (named after `consumer` plus a
  random suffix), which starts at each node's latest message (the stream keeps the last one per
  node), so a (re)started replica rebuilds all pools. Acknowledgement is explicit and redelivery
  unlimited; the server removes a consumer idle for 15 minutes (the replica crashed), and
  `close()` removes it at once.
- `fetch()` returns the next inventories as soon as one arrives (at most `BATCH`; none after
  `interval` seconds of quiet), or None when the fetch failed (after a pause of half a second,
  so that an outage does not spin): the caller knows it was cut off from NATS. After 3 failures
  in a row while connected the consumer is re-created (it is gone: its idle limit passed while
  this process stalled, or the server lost it); the new one replays each node's latest
  inventory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from gpudra_bus import INVENTORY_STREAM, subjects
from gpudra_bus.consume import fetch_ready
from gpudra_bus.subjects import Kind
from gpudra_inventory.nats_errors import NATS_ERRORS

log = logging.getLogger(__name__)

BATCH = 64
# A replica's own consumer outlives a crash of the replica by this long (seconds).
_CONSUMER_IDLE_LIMIT = 900.0
_RESUBSCRIBE_AFTER = 3  # consecutive failed fetches while connected


class InventoryConsumer:
    def __init__(self, nc: Client, consumer: str, *, interval: float) -> None:
        self._nc = nc
        self.name = f"{consumer}-{secrets.token_hex(4)}"
        self._interval = interval
        self._sub: JetStreamContext.PullSubscription | None = None
        self._failures = 0

    async def open(self) -> None:
        self._sub = await self._subscribe()
        self._failures = 0

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        # One consumer per process: replicas must each see every inventory, and a fresh consumer
        # starts at every node's latest one. The server removes it once the process is gone.
        return await self._nc.jetstream().pull_subscribe(
            subjects.all_of(Kind.INVENTORY),
            durable=self.name,
            stream=INVENTORY_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                ack_wait=30.0,
                max_deliver=-1,
                inactive_threshold=_CONSUMER_IDLE_LIMIT,
            ),
        )

    async def _resubscribe(
        self, sub: JetStreamContext.PullSubscription
    ) -> JetStreamContext.PullSubscription:
        with contextlib.suppress(*NATS_ERRORS):
            await sub.unsubscribe()
        try:
            fresh = await self._subscribe()
        except NATS_ERRORS as exc:
            log.warning("cannot re-create the inventory consumer (%s); retrying", exc)
            return sub
        log.info("inventory consumer %s re-created", self.name)
        return fresh

    async def fetch(self) -> list[Msg] | None:
        """The next inventories (none: quiet), or None: the fetch failed."""
        assert self._sub is not None, "open() first"
        try:
            msgs = await fetch_ready(self._sub, BATCH, self._interval)
            self._failures = 0
            return msgs
        except (nats.errors.TimeoutError, TimeoutError):
            self._failures = 0
            return []
        except (nats.errors.Error, OSError) as exc:
            log.warning("fetching inventories failed (%s); retrying", exc)
            self._failures += 1
            await asyncio.sleep(0.5)
            if self._failures >= _RESUBSCRIBE_AFTER and self._nc.is_connected:
                # Connected but failing: the consumer is gone (idle limit passed while this
                # process stalled, or the server lost it); a new one replays each node's latest
                # inventory, which the book takes as heartbeats.
                self._sub = await self._resubscribe(self._sub)
                self._failures = 0
            return None

    async def close(self) -> None:
        """Unsubscribe and remove the consumer from the server (failures are ignored: the
        server removes it after its idle limit anyway)."""
        if self._sub is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await self._sub.unsubscribe()
            self._sub = None
        with contextlib.suppress(*NATS_ERRORS):
            await self._nc.jetstream().delete_consumer(INVENTORY_STREAM, self.name)
