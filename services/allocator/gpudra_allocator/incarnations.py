"""Which incarnation of the claims stream a delivered claim event belongs to, and how two
events' positions in the stream compare across incarnations.

The worker fences a claim's events by their claims-stream sequence (`ClaimRecord.seq`). A stream
deleted and created again (an operator's `nats stream rm`, the stream lost from JetStream's
storage, a configuration change that forces it) numbers its messages from 1 again, while the
reservations bucket keeps records written from the old one. A sequence alone says nothing across
incarnations, so a position is `StreamPos(epoch, seq)`: `epoch` names the incarnation by the
stream's creation time (`created` in its stream info, microseconds since the Unix epoch; 0:
unknown). `StreamPos.after` compares sequences within one incarnation only; an event of a newer
incarnation is after anything of an older one.

`Incarnations.tag` stamps each fetched message with its epoch before it is handled (`epoch_of`
reads it back; a message never tagged, a test's stand-in or one whose stream info could not be
read, reads 0). The durable consumer has one name in every incarnation, so a pull subscription
opened on the old stream fetches from the new stream's consumer as soon as any replica has
created it again, and nothing tells this replica so. Each message's JetStream timestamp does: a
message stored at time t belongs to the incarnation alive at t, the newest one created at or
before t (streams of one name never overlap). The stream's current incarnation is read (one
stream-info request) whenever a batch holds a message stored after every message confirmed so
far; older messages (redeliveries, held claims) are classified from what is known already.

Limits: incarnations are ordered by the server's clock (a clock set back between two creations
could order them wrongly); an incarnation created and deleted again between two reads of this
replica is never learned, and its messages are taken for the one before it. Both need a stream
deleted twice within moments.
"""

from __future__ import annotations

import bisect
import datetime
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext

from gpudra_bus import NATS_ERRORS, BusRetryableError, translate

log = logging.getLogger(__name__)

_EPOCH_ATTR = "_gpudra_stream_epoch"
_UNIX = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND = datetime.timedelta(microseconds=1)


@dataclass(frozen=True)
class StreamPos:
    """Where an event is in the claims stream: its incarnation (`epoch`, 0: unknown) and its
    sequence in that incarnation (0: unknown)."""

    epoch: int = 0
    seq: int = 0

    def after(self, other: StreamPos) -> bool:
        """Whether this position is later than `other`: by incarnation when both are known and
        differ, otherwise by sequence (as before incarnations were kept: a record written
        without one is compared by its sequence)."""
        if self.epoch and other.epoch and self.epoch != other.epoch:
            return self.epoch > other.epoch
        return self.seq > other.seq


def micros(when: datetime.datetime) -> int:
    """`when` in whole microseconds since the Unix epoch (naive: UTC, as nats-py parses)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return (when - _UNIX) // _MICROSECOND


def epoch_of(msg: Any) -> int:
    """The incarnation `Incarnations.tag` gave the message (0: never tagged)."""
    epoch = getattr(msg, _EPOCH_ATTR, 0)
    return epoch if isinstance(epoch, int) else 0


def stored_at(msg: Any) -> int:
    """When JetStream stored the message, in microseconds (0: not a JetStream message)."""
    try:
        when = msg.metadata.timestamp
    except (AttributeError, TypeError, ValueError, IndexError):
        return 0
    return micros(when) if isinstance(when, datetime.datetime) else 0


class Incarnations:
    """The incarnations of one stream this replica has seen, and the tagging of its messages."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self._stream = stream
        self._known: list[int] = []  # creation times, ascending
        self._confirmed = 0  # messages stored up to this time are classified from `_known`

    @property
    def known(self) -> Sequence[int]:
        return tuple(self._known)

    async def current(self) -> int:
        """The stream's incarnation now (learned for the classification of later messages).
        `BusRetryableError` when the stream is missing or its info cannot be read."""
        try:
            info = await self._js.stream_info(self._stream)
        except nats.js.errors.NotFoundError as exc:
            raise BusRetryableError(f"stream {self._stream} does not exist") from exc
        except NATS_ERRORS as exc:
            raise translate(exc, f"reading stream {self._stream}") from exc
        if info.created is None:
            raise BusRetryableError(f"stream {self._stream}: its info names no creation time")
        created = micros(info.created)
        if created not in self._known:
            if self._known and created < self._known[-1]:
                log.warning(
                    "stream %s was created again at a time before its previous creation "
                    "(the server's clock went back?); ordering its incarnations by that time",
                    self._stream,
                )
            else:
                log.info("stream %s: incarnation created at %d us", self._stream, created)
            bisect.insort(self._known, created)
        return created

    async def tag(self, msgs: Sequence[Any]) -> None:
        """Stamp each message with the incarnation it was stored in (see the module docstring);
        `BusRetryableError` (nothing stamped) when the stream's info is needed and cannot be read:
        then the batch's incarnation is unknown, and the caller must not handle it."""
        stamps = [(msg, stored_at(msg)) for msg in msgs]
        newest = max((t for _, t in stamps), default=0)
        if newest > self._confirmed:
            await self.current()  # read after the fetch: alive then, so at every `t` it covers
            self._confirmed = newest
        for msg, t in stamps:
            if not t:
                continue
            at = bisect.bisect_right(self._known, t)
            setattr(msg, _EPOCH_ATTR, self._known[at - 1] if at else 0)
