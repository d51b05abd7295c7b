"""Publishing that survives outages, and dead-lettering of malformed messages.

Promises:
- `Publisher.publish` returns only once JetStream has stored the message (the `PubAck`). While
  the server is away it keeps retrying with backoff — nats-py reconnects underneath — so a message
  published during an outage is republished after the reconnect. Every attempt of one call carries
  the same `Nats-Msg-Id` (the caller's, e.g. `<claim uid>/<generation>`, or a random one), so a
  retry after a lost ack is de-duplicated by the stream instead of stored twice. An optional
  `deadline` turns "keep trying" into `BusRetryableError`; permanent failures (no stream for the
  subject, bad input) raise at once. A message whose headers and payload together exceed the
  server's `max_payload` is refused with `OversizedMessageError` before it is sent: nats-py checks
  the payload alone, and the server answers an oversized publish by closing the connection.
- Every message carries the codec's schema header and the W3C trace context of the current span;
  `publish` opens a PRODUCER span around the attempt.
- `DeadLetters.send` stores a malformed message, unchanged, on `gpudra.deadletter.<kind>` with the
  reason in headers (a message too large to carry them within the server's max_payload is cut to
  fit, its original size in `Gpudra-Truncated-From`); `receive` decodes a JetStream message or
  dead-letters and acks it, so that a bad event never blocks a stream and is never silently lost.
  A message redelivered because the ack after its dead-lettering was lost is parked once: its dead
  letter's `Nats-Msg-Id` is its stream and sequence, de-duplicated within `DUPLICATE_WINDOW`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import TypeVar

import nats.errors
import nats.js.errors
from google.protobuf.message import Message
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import PubAck
from opentelemetry.trace import Tracer

from gpudra_bus import subjects, tracing
from gpudra_bus.codec import Codec
from gpudra_bus.connection import Backoff, translate
from gpudra_bus.errors import (
    BusRetryableError,
    CodecError,
    InvalidSubjectError,
    NotConnectedError,
    OversizedMessageError,
    StreamConfigError,
)

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

MSG_ID_HEADER = "Nats-Msg-Id"
ORIGINAL_SUBJECT_HEADER = "Gpudra-Original-Subject"
ERROR_HEADER = "Gpudra-Error"
ERROR_TYPE_HEADER = "Gpudra-Error-Type"
DEAD_LETTERED_BY_HEADER = "Gpudra-Dead-Lettered-By"
TRUNCATED_FROM_HEADER = "Gpudra-Truncated-From"
# Header bytes left for what publishing adds (message id, trace context).
_PUBLISH_HEADER_ROOM = 1024


def _header_bytes(headers: Mapping[str, str]) -> int:
    """The size of `headers` on the wire: the version line, a "key: value" line each, CRLFs."""
    return 12 + sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())


class Publisher:
    """JetStream publishing with schema headers, trace context, retries and de-duplication.

    `tracer`: where PRODUCER spans go (default: the global tracer provider's).
    """

    def __init__(
        self,
        nc: Client,
        *,
        ack_timeout: float = 2.0,
        backoff: Backoff | None = None,
        max_no_stream: int = 40,
        tracer: Tracer | None = None,
    ) -> None:
        self._nc = nc
        self._tracer = tracer
        self._js = nc.jetstream()
        self._max_no_stream = max_no_stream
        self._ack_timeout = ack_timeout
        self._backoff = backoff or Backoff()
        self.retries = 0  # attempts that failed and were retried, for metrics and tests

    @property
    def max_payload(self) -> int:
        """The most bytes (headers and payload) the server accepts in one message."""
        return int(self._nc.max_payload)

    async def publish(
        self,
        subject: str,
        message: M,
        codec: Codec[M],
        *,
        msg_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> PubAck:
        """Store `message` on `subject`; see the module docstring for the retry promise."""
        data, schema_headers = codec.encode(message)
        return await self.publish_raw(
            subject,
            data,
            {**(headers or {}), **schema_headers},
            msg_id=msg_id,
            deadline=deadline,
        )

    async def publish_raw(
        self,
        subject: str,
        data: bytes,
        headers: Mapping[str, str],
        *,
        msg_id: str | None = None,
        deadline: float | None = None,
    ) -> PubAck:
        """`publish` for an already encoded payload (dead letters, replays)."""
        loop = asyncio.get_running_loop()
        until = None if deadline is None else loop.time() + deadline
        msg_id = msg_id or uuid.uuid4().hex
        attempt = no_stream = 0
        with tracing.publish_span(subject, size=len(data), tracer=self._tracer):
            all_headers = tracing.inject({**headers, MSG_ID_HEADER: msg_id})
            while True:
                # Checked at every attempt: a reconnect may land on a server with another limit.
                size = _header_bytes(all_headers) + len(data)
                if size > self.max_payload:
                    raise OversizedMessageError(
                        f"publish to {subject}: {size} bytes with headers, over the server's "
                        f"max_payload of {self.max_payload}"
                    )
                try:
                    return await self._js.publish(
                        subject, data, timeout=self._ack_timeout, headers=all_headers
                    )
                except (TimeoutError, nats.errors.Error, OSError) as exc:
                    err = translate(exc, f"publish to {subject}")
                    if self._nc.is_closed:
                        raise NotConnectedError(f"publish to {subject}: connection closed") from exc
                    if isinstance(exc, nats.js.errors.NoStreamResponseError):
                        # No stream answered: JetStream still starting after a restart (wait),
                        # or no stream stores this subject at all (give up after a while).
                        no_stream += 1
                        if no_stream > self._max_no_stream:
                            raise StreamConfigError(f"no stream stores {subject}") from exc
                    elif not isinstance(err, BusRetryableError):
                        raise err from exc
                    wait = self._backoff.delay(attempt)
                    attempt += 1
                    if until is not None and loop.time() + wait > until:
                        raise err from exc
                    self.retries += 1
                    log.info("publish to %s failed (%s); retry in %.2fs", subject, err, wait)
                    await asyncio.sleep(wait)


class DeadLetters:
    """Parks malformed messages on `gpudra.deadletter.<kind>` and counts them per kind."""

    def __init__(self, publisher: Publisher, *, service: str) -> None:
        self._publisher = publisher
        self._service = service
        self.counts: Counter[str] = Counter()

    async def park(self, msg: Msg, error: BaseException) -> bool:
        """`send` a received message, named by its stream and sequence: parked once however
        often it is delivered (a redelivery after a lost ack is de-duplicated, not counted)."""
        return await self.send(msg.subject, msg.data, msg.headers, error, msg_id=_origin(msg))

    async def send(
        self,
        subject: str,
        data: bytes,
        headers: Mapping[str, str] | None,
        error: BaseException,
        *,
        msg_id: str | None = None,
    ) -> bool:
        """Store the message with the reason; False when `subject` is not a gpudra subject.

        `msg_id` names the original message (`receive` passes its stream and sequence), so that
        parking it again is de-duplicated by the stream and not counted twice.
        """
        try:
            kind = subjects.kind_of(subject)
            target = subjects.deadletter(kind)
        except InvalidSubjectError:
            log.error("dropping malformed message on non-gpudra subject %r: %s", subject, error)
            self.counts["unknown"] += 1
            return False
        kept = {
            k: v
            for k, v in (headers or {}).items()
            if isinstance(v, str) and not k.startswith("Nats-")
        }
        reason = {
            ORIGINAL_SUBJECT_HEADER: subject,
            # Header values must be one line.
            ERROR_HEADER: " ".join(str(error).split())[:1024] or type(error).__name__,
            ERROR_TYPE_HEADER: type(error).__name__,
            DEAD_LETTERED_BY_HEADER: self._service,
        }
        kept.update(reason)
        data = bytes(data)
        # The server closes the connection of a client that publishes more than max_payload
        # (headers included), and a message that was just under it is over once the reason is
        # added: keep the reason and as much of the message as fits.
        limit = self._publisher.max_payload - _PUBLISH_HEADER_ROOM
        if _header_bytes(kept) + len(data) > limit:
            kept[TRUNCATED_FROM_HEADER] = str(len(data))
            if _header_bytes(kept) > limit // 2:
                kept = {**reason, TRUNCATED_FROM_HEADER: str(len(data))}
            data = data[: max(0, limit - _header_bytes(kept))]
        ack = await self._publisher.publish_raw(target, data, kept, msg_id=msg_id)
        if ack.duplicate:
            log.info("message from %s was dead-lettered before (%s)", subject, msg_id)
            return True
        self.counts[kind.value] += 1
        log.warning("dead-lettered a message from %s to %s: %s", subject, target, error)
        return True


async def receive(msg: Msg, codec: Codec[M], dead_letters: DeadLetters) -> M | None:
    """Decode a JetStream message, or dead-letter it, ack it and return None.

    The caller acks a decoded message itself once it has acted on it.
    """
    try:
        return codec.decode(msg.data, msg.headers)
    except CodecError as exc:
        await dead_letters.park(msg, exc)
        try:
            await msg.ack()
        except (nats.errors.Error, OSError) as ack_exc:
            raise translate(ack_exc, f"ack of dead-lettered message on {msg.subject}") from ack_exc
        return None


def _origin(msg: Msg) -> str | None:
    """`deadletter/<stream>/<stream sequence>` of a JetStream message: the same for every
    redelivery of it (None for a plain NATS message, which is never redelivered)."""
    try:
        meta = msg.metadata
        return f"deadletter/{meta.stream}/{meta.sequence.stream}"
    except (nats.errors.Error, ValueError, TypeError, IndexError, AttributeError):
        return None
