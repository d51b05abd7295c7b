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
    then a short top-up, keeps both latency and per-message round trips low. The top-up is asked
    for only when the first message says more are pending (its `num_pending`): with nothing
    queued, nats-py's top-up would linger for its whole timeout before the first message could
    be handled. Raises nats' `TimeoutError` when nothing arrived within `idle`.
    """
    msgs = await sub.fetch(1, timeout=idle)
    if batch > 1 and msgs and _pending(msgs[-1]) > 0:
        with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
            # The whole rest of the batch: with fewer queued, the server's "no more messages"
            # ends this fetch (and is read by it), so no status is left for the next one.
            msgs += await sub.fetch(batch - 1, timeout=0.005)
    return msgs


def _pending(msg: Msg) -> int:
    """Messages the consumer had not delivered yet when `msg` was (unknown: assume some)."""
    try:
        return int(msg.metadata.num_pending or 0)
    except (nats.errors.Error, ValueError, TypeError, AttributeError):
        return 1
