"""Connecting to NATS: reconnect forever with exponential backoff, nats errors translated.

Promises:
- `connect()` returns a connected client or raises `NotConnectedError` once its optional
  `deadline` passes (never a raw nats/OSError). Without a deadline it waits for a server forever,
  so a service may start before NATS does.
- Once connected, the client never gives up reconnecting (`max_reconnect_attempts=-1`); the delay
  before each attempt grows exponentially with jitter (`Backoff`), resetting after a success.
  Subscriptions are replayed by nats-py; publishers that need an ack retry (see `publisher`).
- A connection that went dead without closing (the server's node lost, a NAT or conntrack entry
  dropped: no FIN, no RST) is noticed within `PING_INTERVAL` * (`MAX_OUTSTANDING_PINGS` + 1)
  seconds (20 s), then reconnected like any other: within the inventory's 30 s node heartbeat
  timeout, so a node-agent on such a connection reconnects before its node is tainted. nats-py's
  defaults (120 s, 2) took 4 to 6 minutes. Options given to `connect` win.
- `translate()` maps nats-py exceptions onto `BusError`s: outages and timeouts become
  `BusRetryableError`s, everything else `BusPermanentError`.
- `wrong_revision()` says whether a nats-py exception is a revision-checked write that lost to
  another writer (the one definition every service's compare-and-set uses).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.client import Server as _NatsServer

from gpudra_bus.errors import (
    BusError,
    BusPermanentError,
    BusRetryableError,
    BusTimeoutError,
    NotConnectedError,
    StreamConfigError,
)

log = logging.getLogger(__name__)

PING_INTERVAL = 5.0  # seconds between the client's PINGs
MAX_OUTSTANDING_PINGS = 3  # unanswered PINGs before the connection is taken for dead

Callback = Callable[[], Awaitable[None]]
ErrorCallback = Callable[[Exception], Awaitable[None]]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: `initial * multiplier**attempt`, capped at `maximum`, ± `jitter`."""

    initial: float = 0.05
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, min(attempt, 64)))
        spread = base * self.jitter
        return max(0.0, base + random.uniform(-spread, spread))  # - not crypto


_RETRYABLE: tuple[type[BaseException], ...] = (
    nats.errors.NoRespondersError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.NoServersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    ConnectionError,
    OSError,
)


def translate(exc: BaseException, what: str) -> BusError:
    """The `BusError` for a foreign exception raised while doing `what` (raise it `from exc`)."""
    if isinstance(exc, BusError):
        return exc
    detail = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, nats.errors.TimeoutError | asyncio.TimeoutError | TimeoutError):
        return BusTimeoutError(detail)
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return NotConnectedError(detail)
    if isinstance(exc, _RETRYABLE):
        return BusRetryableError(detail)
    if isinstance(exc, nats.js.errors.APIError):
        # JetStream answers 503 while it has no quorum or is starting; other codes (even 500,
        # which it uses for bad configurations) do not change by retrying.
        return StreamConfigError(detail)
    return BusPermanentError(detail)


# JetStream's "wrong last sequence" answers to a revision-checked publish (JSStreamWrongLastSequenceErrF
# and JSStreamWrongLastSequenceConstantErr); nats-py's KV maps them to KeyWrongLastSequenceError,
# a raw `js.publish` with an expected-last-sequence header leaves them as APIError.
_WRONG_LAST_SEQUENCE = (10071, 10164)

# What a call into nats-py raises when NATS did not do what was asked: its own errors, the
# socket's, and asyncio's timeouts. For callers that handle (or translate) them as one.
NATS_ERRORS = (nats.errors.Error, OSError, TimeoutError)


def wrong_revision(exc: BaseException) -> bool:
    """True when `exc` says a revision-checked write lost: the key's (or subject's) last revision
    was not the one the write was checked against. Another writer got there first; re-read."""
    return isinstance(exc, nats.js.errors.KeyWrongLastSequenceError) or (
        # Some of nats-py's APIError subclasses (KeyNotFoundError, ...) never set err_code.
        isinstance(exc, nats.js.errors.APIError)
        and getattr(exc, "err_code", None) in _WRONG_LAST_SEQUENCE
    )


def _server_picker(
    backoff: Backoff,
) -> Callable[[list[_NatsServer], dict[str, Any]], tuple[_NatsServer | None, float]]:
    # nats-py's own reconnect waits a fixed time; this handler picks the least-tried server and
    # waits exponentially longer the more often it has failed since the last success.
    def pick(servers: list[_NatsServer], _info: dict[str, Any]) -> tuple[_NatsServer | None, float]:
        if not servers:
            return None, backoff.delay(0)
        best = min(servers, key=lambda s: s.reconnects)
        return best, backoff.delay(best.reconnects)

    return pick


async def connect(
    servers: str | Sequence[str],
    *,
    name: str,
    backoff: Backoff | None = None,
    deadline: float | None = None,
    connect_timeout: float = 2.0,
    disconnected_cb: Callback | None = None,
    reconnected_cb: Callback | None = None,
    error_cb: ErrorCallback | None = None,
    **options: Any,
) -> Client:
    """A connected nats-py client that reconnects forever (see the module docstring).

    `deadline` bounds only the first connection (seconds; None = wait forever). The callbacks are
    nats-py's, called after our logging; `error_cb` hears, among other errors, every failed
    connection attempt, the first ones included. Extra `options` (credentials, TLS, ...) go to
    `nats.connect` unchanged.
    """
    backoff = backoff or Backoff()
    # A single string may list several servers, comma-separated (as NATS_URL often does).
    raw = servers.split(",") if isinstance(servers, str) else list(servers)
    urls = [u.strip() for u in raw if u.strip()]
    if not urls:
        raise BusPermanentError("no NATS server URL given")

    async def on_error(exc: Exception) -> None:
        log.debug("nats %s: %s", name, exc)
        if error_cb is not None:
            await error_cb(exc)

    async def on_disconnected() -> None:
        log.info("nats %s: disconnected", name)
        if disconnected_cb is not None:
            await disconnected_cb()

    async def on_reconnected() -> None:
        log.info("nats %s: reconnected", name)
        if reconnected_cb is not None:
            await reconnected_cb()

    ping_interval = options.pop("ping_interval", PING_INTERVAL)
    max_pings = options.pop("max_outstanding_pings", MAX_OUTSTANDING_PINGS)
    attempt = 0
    loop = asyncio.get_running_loop()
    until = None if deadline is None else loop.time() + deadline
    while True:
        try:
            client = await nats.connect(
                urls,
                name=name,
                ping_interval=ping_interval,
                max_outstanding_pings=max_pings,
                allow_reconnect=True,
                # First connection: nats-py would retry forever at a fixed interval, so allow one
                # retry per server and back off here instead; once connected, retry forever.
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=max(1, round(connect_timeout)),
                reconnect_to_server_handler=_server_picker(backoff),
                error_cb=on_error,
                disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected,
                **options,
            )
            # nats-py reads its options dict at every reconnect; -1 means "never give up".
            client.options["max_reconnect_attempts"] = -1
            # Only used (with the handler in charge of delays) as close()'s wait for the
            # reconnect task to unwind.
            client.options["reconnect_time_wait"] = 2
            return client
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            err = translate(exc, f"connect {name} to {urls}")
            if not isinstance(err, BusRetryableError):
                raise err from exc
            wait = backoff.delay(attempt)
            attempt += 1
            if until is not None and loop.time() + wait > until:
                raise NotConnectedError(f"no NATS server reachable at {urls}: {exc}") from exc
            log.info("nats %s: %s; retrying in %.2fs", name, exc, wait)
            await asyncio.sleep(wait)


async def flush_subscriptions(nc: Client, timeout: float = 10.0) -> None:
    """Return once the server has every subscription `nc` made so far.

    One `flush()` is not that barrier: nats-py writes its PING straight to the socket, ahead of
    commands still queued for its flusher task (a SUB just made among them), so the PONG can come
    back before the server has seen the SUB. By the time that PONG is read the flusher has run;
    the second PING follows the SUB on the wire.
    """
    for _ in range(2):
        await nc.flush(timeout=max(1, round(timeout)))


async def disconnect(nc: Client, *, drain: bool = True) -> None:
    """Close `nc` for good: drain it (deliver what is in flight) when connected, else close.

    Never raises: shutdown must complete even mid-outage, when nats-py's own close can fail with a
    connection error after having stopped its tasks.
    """
    if nc.is_closed:
        return
    try:
        if drain and nc.is_connected:
            await nc.drain()
        else:
            await nc.close()
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        log.info("nats: error while closing (%s); closing hard", exc)
        try:
            await nc.close()
        except (nats.errors.Error, OSError, TimeoutError) as again:
            log.warning("nats: close failed: %s", again)
