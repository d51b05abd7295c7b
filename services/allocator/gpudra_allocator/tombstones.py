"""Garbage collection of released claims' tombstones (`c.<uid>` records in state "released"),
and of the marks of cleared allocations (state "cleared") the same way.

A tombstone is what a PENDING event of a claim that arrives after the claim's release finds
(`ClaimSteps._settled`), so that a deleted claim is never allocated. Keeping it forever costs a key
per claim ever deleted; `TombstoneCollector` removes those older than `grace` seconds.

Why that is safe — a PENDING event can reach an allocator after its claim's release only while it
is unacknowledged:
- The claims stream is a work queue: an acknowledged event is gone for good, no consumer (new or
  old) can replay it; the claim-writer never publishes PENDING for a deleted claim (it is no
  longer listed or watched, and a UID is never reused).
- An unacknowledged event is either held by a replica as a waiting claim, which reads the claim's
  record again on every retry (at least every `retry_interval`) and acknowledges the event on
  finding the tombstone, or it is redelivered `ack_wait` after its holder stopped extending it, to
  a replica that reads the record before anything else.
The same holds for a `cleared` mark, which only fences off events of the claim older than the
deallocation: those too reach an allocator only while unacknowledged. Not for one whose allocation
the API server refused (`ClaimRecord.refused`): it keeps the claim from being decided again
while unchanged, against PENDING events the claim-writer publishes anew at any restart, so it
stays until the claim's deletion puts a tombstone in its place (a claim deleted while no
claim-writer watched leaves it behind: one small key).
So a tombstone matters for about `ack_wait + retry_interval` after the release; `grace` is many
times that (`grace_for`: ten times, and never under ten minutes). Should an event still slip
through (a replica frozen for longer than `grace`), the claim-writer's write-back finds the claim
gone, or its UID changed, and answers with DELETED, which releases the devices again: a deleted
claim is never written an allocation.

How: a pass reads the last value of every `c.` key (an ordered consumer that stops at the end) and
purges each tombstone older than `grace` (by its KV timestamp) with a purge bounded by sequence
(`seq` = its revision + 1): a record written after the pass read the key is never touched, so
replicas may run passes at the same time. The purge leaves no delete marker behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import cast

from nats.js import JetStreamContext
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from gpudra_allocator.holdings import CLAIM_PREFIX, BadReservationError, ClaimRecord
from gpudra_bus import NATS_ERRORS, current_entries, translate

log = logging.getLogger(__name__)


def grace_for(ack_wait: float, retry_interval: float) -> float:
    """How long a tombstone is kept: ten times its useful life, never under ten minutes."""
    return max(600.0, 10.0 * (ack_wait + retry_interval))


class TombstoneCollector:
    """Removes tombstones older than `grace` seconds from the reservation bucket `kv`."""

    def __init__(
        self,
        js: JetStreamContext,
        kv: KeyValue,
        grace: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._js = js
        self._kv = kv
        self.grace = grace
        self._clock = clock
        self.removed = 0

    async def collect(self) -> int:
        """One pass; returns how many tombstones it removed."""
        return await self.remove(await self.expired())

    async def remove(self, expired: list[tuple[str, int]]) -> int:
        """Purge each (key, revision) up to that revision: a later write of the key stays."""
        if not expired:
            return 0
        try:
            status = await self._kv.status()
            stream = status.stream_info.config.name or f"KV_{status.bucket}"
            for key, revision in expired:
                await self._js.purge_stream(
                    stream, seq=revision + 1, subject=f"$KV.{status.bucket}.{key}"
                )
        except NATS_ERRORS as exc:
            raise translate(exc, "removing claim tombstones") from exc
        self.removed += len(expired)
        log.info("removed %d claim tombstone(s) older than %.0f s", len(expired), self.grace)
        return len(expired)

    async def expired(self) -> list[tuple[str, int]]:
        """(key, revision) of every tombstone older than `grace`."""
        now = self._clock()
        out: list[tuple[str, int]] = []
        try:
            entries = await current_entries(self._kv, f"{CLAIM_PREFIX}>")
        except NATS_ERRORS as exc:
            raise translate(exc, "reading claim records") from exc
        for entry in entries:
            if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                continue
            # nats-py annotates `created` as int; a watch sets it to the message's datetime.
            created = cast(datetime | None, entry.created)
            if created is None or now - created.timestamp() < self.grace:
                continue
            try:
                record = ClaimRecord.decode(entry.value)
            except BadReservationError as exc:
                log.error("claim record %s left alone: %s", entry.key, exc)
                continue
            if (record.released or (record.cleared and record.refused is None)) and entry.revision:
                out.append((entry.key, entry.revision))
        return out
