"""The allocator's durable pull consumer of the claims stream, kept across the stream's
re-creation, and its messages tagged with the stream's incarnation (`incarnations`).

Promises:
- `fetch` returns the next batch of claim events (none after `idle` seconds without one), each
  tagged with the incarnation of the stream it was stored in; a batch whose incarnation cannot be
  learned (the stream's info unreadable) is handed back (nak, redelivered shortly) instead.
- A consumer that no longer exists (the stream was deleted, and its consumers with it) is opened
  again, under the same durable name and configuration, without a restart; a stream that no
  longer exists is created again first, exactly as every service creates it at start
  (`ensure_stream`). Another replica may have done either already: both are idempotent.
- Other fetch failures (the server away, JetStream electing a leader) are logged and retried
  after half a second, as before; `fetch` never raises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from gpudra_allocator.events import quietly
from gpudra_allocator.incarnations import Incarnations
from gpudra_allocator.settings import Settings
from gpudra_bus import CLAIMS_STREAM, NATS_ERRORS, STREAMS, BusError, ensure_stream, subjects
from gpudra_bus.consume import fetch_ready
from gpudra_bus.subjects import Kind

log = logging.getLogger(__name__)

_RETRY_DELAY = 0.5  # seconds after a failed fetch or a failed re-opening


class ClaimsConsumer:
    def __init__(self, js: JetStreamContext, settings: Settings) -> None:
        self._js = js
        self._settings = settings
        self._sub: JetStreamContext.PullSubscription | None = None
        self.incarnations = Incarnations(js, CLAIMS_STREAM)
        self.reopened = 0  # times the consumer was found gone and opened again

    async def open(self) -> None:
        """Bind to the durable consumer, creating it if needed (errors propagate: at start)."""
        self._sub = await self._js.pull_subscribe(
            subjects.all_of(Kind.CLAIMS),
            durable=self._settings.consumer,
            stream=CLAIMS_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=self._settings.ack_wait,
                max_ack_pending=self._settings.max_waiting + self._settings.batch,
                max_deliver=-1,
            ),
        )

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await sub.unsubscribe()

    async def fetch(self, idle: float = 0.25) -> list[Msg]:
        """The next batch, tagged (see the module docstring); [] when none came or it failed."""
        if self._sub is None:
            await self._reopen()
            return []
        try:
            msgs = await fetch_ready(self._sub, self._settings.batch, idle)
        except (nats.errors.TimeoutError, TimeoutError):
            return []
        except (nats.errors.Error, OSError) as exc:
            if await self._gone(exc):
                log.warning(
                    "the claims consumer is gone (the stream was deleted?); opening it again"
                )
                await self._reopen()
            else:
                log.warning("fetching claim events failed (%s); retrying", exc)
                await asyncio.sleep(_RETRY_DELAY)
            return []
        try:
            await self.incarnations.tag(msgs)
        except BusError as exc:
            log.warning("claim events of an unknown stream incarnation (%s); handed back", exc)
            for msg in msgs:
                await quietly(msg.nak(delay=1.0))
            return []
        return msgs

    async def _gone(self, exc: BaseException) -> bool:
        """Whether a failed fetch failed because the consumer no longer exists (asked of the
        server: "no responders" also answers while JetStream elects a leader)."""
        missing = nats.js.errors.ServiceUnavailableError | nats.js.errors.NotFoundError
        if self._sub is None or not isinstance(exc, missing):
            return False
        try:
            await self._sub.consumer_info()
        except nats.js.errors.NotFoundError:
            return True
        except (*NATS_ERRORS, OSError):
            return False
        return False

    async def _reopen(self) -> None:
        await self.close()
        try:
            try:
                await self.open()
            except nats.js.errors.NotFoundError:
                spec = next(s for s in STREAMS if s.name == CLAIMS_STREAM)
                log.warning("stream %s does not exist; creating it again", CLAIMS_STREAM)
                await ensure_stream(self._js, spec, replicas=self._settings.stream_replicas)
                await self.open()
        except (*NATS_ERRORS, OSError, BusError) as exc:
            log.warning("opening the claims consumer again failed (%s); retrying", exc)
            await asyncio.sleep(_RETRY_DELAY)
            return
        self.reopened += 1
        log.info("claims consumer %s open again", self._settings.consumer)
