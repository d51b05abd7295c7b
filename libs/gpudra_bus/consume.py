"""Pulling from a durable JetStream consumer without adding latency to a trickle of messages."""

from __future__ import annotations

import contextlib

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext


async def fetch_ready(sub: JetStreamContext.PullSubscription, batch: int, idle: float) -> list[Msg]:
    """The next message as soon as it arrives (waiting up to `idle` s), plus any already queued.

    nats-py's `fetch(n)` keeps a lingering pull open until all `n` arrived or the timeout passed,
    which would add up to `idle` seconds of latency to a trickle of messages; one message first,
    then a short no-wait top-up, keeps both latency and per-message round trips low. Raises
    nats' `TimeoutError` when nothing arrived within `idle`.
    """
    msgs = await sub.fetch(1, timeout=idle)
    if batch > 1:
        with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
            msgs += await sub.fetch(batch - 1, timeout=0.005)
    return msgs
