"""The claims the allocator's loop holds for retry, and when it retries them (mixed into `Worker`).

A claim that cannot be placed now (unschedulable, a class missing, a CEL selector failing at run
time, a unit not complete, its attempts losing every race) is held: its event stays
unacknowledged, kept in `_waiting` by UID (`Waiting`), until a decision or a release finishes it.
Promises:
- A held claim is retried whenever the slices or the reservations change (at most every half
  second per claim) and at least every `retry_interval` seconds; a retry that fails is logged and
  the claim stays held: one claim's error never stops the others' retries (the pass runs in the
  consumer loop itself, so it must neither skip the others nor end the loop). A retry waits, as a
  redelivery does, until holdings of an earlier attempt that were never recorded are stale, and
  drops them first. If this replica dies, the event is redelivered to another one after
  `ack_wait`; while it lives, a held event is marked in progress once a third of `ack_wait` has
  passed since its last mark.
- A held claim is not retried while an event of it is being handled (its lane, `worker`): that
  event goes first. Each retry reads the claim's record first (`_settled`): a claim decided or
  released meanwhile (by another replica, or its deletion) is finished, not attempted.
- The topology reserve (`reserve` > 0) counts this queue (`GangSteps._large_waiting`): a claim
  leaving the waiting set (placed, or deleted while pending) counts as a change too while the
  reserve runs, so claims it held back retry.
- `_finish` forgets the claim and acknowledges its event and the delivery held for it, if
  another; `_hold` keeps (or replaces) the claim's entry. Both bump `_held_version` when the queue
  changes, so the reserve's count of the queue is kept until then.
- What this replica told a unit (`_gang_reasons`) is kept while it holds a member of it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from nats.aio.msg import Msg

from gpudra_allocator.events import quietly
from gpudra_allocator.gangs import unit_of
from gpudra_allocator.index import KvIndex
from gpudra_allocator.steps import Steps, Waiting
from gpudra_api import DeviceClass
from gpudra_bus import BusRetryableError, tracing

log = logging.getLogger(__name__)

_MIN_RETRY_GAP = 0.5  # seconds


class RetryQueue(Steps):
    """Holds unschedulable claims and retries them on change or after `retry_interval`."""

    _classes: KvIndex[DeviceClass] | None
    # Bumped when a claim leaves `_waiting` while the topology reserve runs: fewer pods
    # waiting for a whole domain may let the reserve hold fewer, so held-back claims retry.
    _queue_version: int
    # The newest task of each claim (by subject, one per claim name), kept by `Worker`.
    _lanes: dict[str, asyncio.Task[None]]

    def _versions(self) -> tuple[int, ...]:
        classes = self._classes.version if self._classes is not None else 0
        return (self._index.version, self._res.version, classes, self._queue_version)

    def _hold(self, waiting: Waiting) -> None:
        uid = waiting.event.claim.uid
        if self._waiting.get(uid) is not waiting:
            self._held_version += 1
        self._waiting[uid] = waiting

    async def _finish(self, uid: str, msg: Msg) -> None:
        held = self._waiting.pop(uid, None)
        if held is not None:
            self._held_version += 1
            self._forget_unit_reason(held)
        if held is not None and self._engine.reserving:
            self._queue_version += 1
        if held is not None and held.msg is not msg:
            await quietly(held.msg.ack())
        await quietly(msg.ack())

    def _forget_unit_reason(self, finished: Waiting) -> None:
        """What this replica told a unit (`_gang_reasons`) is kept while it holds a member of it.

        Kept longer, it would grow by every unit ever told anything (one decided by another
        replica, one whose claims were deleted), and a unit of the same name later (a job run
        again) would never be told a reason it had been told before."""
        unit = unit_of(finished.event)
        if unit not in self._gang_reasons:
            return
        if not any(unit_of(w.event) == unit for w in self._waiting.values()):
            del self._gang_reasons[unit]

    async def _retry_waiting(self) -> None:
        if not self._waiting:
            return
        now = time.monotonic()
        current = self._versions()
        for uid, waiting in list(self._waiting.items()):
            if self._waiting.get(uid) is not waiting:
                continue
            if waiting.msg.subject in self._lanes:
                continue  # an event of the claim is being handled; it goes first
            if now - waiting.last_touch > self._settings.ack_wait / 3:
                waiting.last_touch = now
                await quietly(waiting.msg.in_progress())
            since = now - waiting.last_try
            due = since >= self._settings.retry_interval
            # A change triggers a retry, but at most every _MIN_RETRY_GAP seconds per claim:
            # explaining an unschedulable claim walks every node, and a busy fleet changes often.
            changed = waiting.seen_version != current and since >= _MIN_RETRY_GAP
            if not (due or changed):
                continue
            with tracing.process_span(
                waiting.msg.subject, waiting.msg.headers, consumer=self._settings.consumer
            ):
                try:
                    if await self._settled(waiting.msg, waiting.event):
                        continue
                    if not unit_of(waiting.event) and not await self._res.drop_stale(
                        uid, stale_after=self._settings.ack_wait
                    ):
                        # An attempt that reserved but never recorded (its commit failed):
                        # decided again now, its devices would stay held beside the next
                        # decision's for the claim's life. Once it is older than any live
                        # attempt it is dropped, as on a redelivery (`_pending`).
                        waiting.last_try = now
                        continue
                    await self._attempt(waiting)
                except BusRetryableError as exc:
                    log.warning("retry of claim %s deferred: %s", waiting.claim.key, exc)
                except Exception:
                    # This pass runs in the consumer loop itself: an error of one held claim (a
                    # key it cannot read, a lost compare-and-set race) must neither skip the
                    # others nor end the loop. The claim stays held and is tried again.
                    log.exception(
                        "retry of claim %s/%s failed; it stays held",
                        waiting.event.claim.namespace,
                        waiting.event.claim.name,
                    )
