"""The allocator's loop: claim events in, reserved and announced decisions out.

`Worker` is the coordinator: it consumes the claims stream, handles each event in its claim's
lane, hands it to the steps of its kind, and runs the retry pass, the warm-up and the tombstone
collection beside them. The steps are mixins, one job each (`steps`): PENDING claim by claim
(`claim_steps`) and by unit (`gang_steps`), DELETED (`releases`), ALLOCATED_EXTERNALLY
(`adoption`), the claims held for retry (`retries`) and the decisions published
(`announcements`); each module states its own promises.

Promises (with `Reservations` for the multi-replica part):
- Reserve before announce: a decision is published only after its devices are held in the
  reservation bucket and its `c.<uid>` record was created; a claim event is acknowledged only after
  that publication, so a replica killed at any point loses nothing (JetStream redelivers) and
  duplicates nothing (the record makes the second attempt re-announce the first decision).
- Decisions are idempotent per claim UID (`announcements`).
- An unschedulable claim gets an UNSCHEDULABLE decision with the core's explanation (again only
  when the reason changes: `announcements`) and is kept, unacknowledged, and retried on change and
  at least every `retry_interval` seconds (`retries`); if this replica dies, the event is
  redelivered to another one after `ack_wait`.
- A claim whose CEL selector (its own or its class's) fails at run time on a device is held the
  same way, with the core's "... CEL runtime error: ..." message as its reason; a claim invalid in
  itself gets "invalid claim: ..." and is acknowledged for good (`claim_steps`). A unit (gang,
  pod) is held on either error, its members told the reason (`gang_steps`).
- The topology reserve (`reserve` > 0, off by default) is told before each decision how many pods
  this replica holds for retry need a whole large NVLink domain (`claim_steps`, `retries`).
- Gangs (events with `gang_id`): a member is held (unacknowledged) until all `gang_size` members
  have arrived — at any replica: membership is kept in the reservations bucket (`gangs`). The
  replica that sees the set complete places all members at once with the placement layer's gang
  step, reserves every member's devices (one revision-checked write per pool, all or none),
  then creates the gang's decision record `g.<gang>` (once: the loser drops its holdings) and
  the members' `c.<uid>` records from it, and announces each member. Other replicas holding
  members find those records on their next retry. A gang that does not fit reserves nothing;
  every member gets the explanation, and the gang is retried on change like any waiting claim.
- Pods (events with `pod_uid` naming a pod with several gpudra claims, `pod_claims`) are units the
  same way, keyed by the pod: held until each of the pod's claims arrived or is allocated, then
  placed on one node all or none (pinned to the node of those already allocated); gang members
  are grouped into pods, each pod's claims on one node (`gang_steps`). Events without pod
  information are placed claim by claim, as before.
- One claim's events are handled one after the other, in the order this replica received them
  (keyed by subject, one per claim name); different claims' events overlap. A held claim is not
  retried while an event of it is being handled.
- An ALLOCATED_EXTERNALLY event adopts an allocation gpudra did not make (kube-scheduler's);
  a claim already decided keeps its record unless the event may replace it (`adoption`).
- Events are fenced by their claims-stream sequence: the claim's record keeps the sequence of the
  event that wrote it (a unit member's: of its own newest event, kept with the unit's members),
  and a deallocation leaves a `cleared` mark with its own (`forget`) instead of removing the
  record. An event older than the record or the mark (a redelivery, or one that another replica
  handled after a newer one) changes nothing and is acknowledged (counted `stale`): an adoption
  arriving after the deallocation that followed it holds nothing (`adoption`), a deallocation
  arriving after the next decision keeps that decision (`releases`), a pending event arriving
  after its claim was allocated and cleared is not decided again (the claim-writer offers the
  claim anew: `claim_steps`).
- A sequence is compared only within one incarnation of the claims stream: the stream deleted and
  created again (an operator's `nats stream rm`, its storage lost) numbers events from 1 again
  while the records live on. Each event is tagged with its incarnation (the stream's creation
  time, by the event's store time, `incarnations`) and records keep it beside the sequence
  (`ClaimRecord.epoch`, `Members.epochs`): an event of a newer incarnation is never older than a
  record of an older one, whatever its sequence, and an event of an older incarnation always is
  (a record written before incarnations were kept is compared by sequence alone). The consumer
  found gone with its stream is opened again, and the stream created again if nobody did
  (`consumer`), without a restart; a subscription of the old stream that reads the consumer
  another replica re-created tags the new stream's events by their store time all the same.
- A DELETED event releases the claim, or frees a cleared allocation of a claim that lives on,
  or one the API server refused to store (422), which is not decided again while the claim is
  unchanged (`releases`). Malformed events are dead-lettered and acknowledged; they never block
  the stream.
- Slice and class changes are warmed up for off the claim path (`warmup`): shortly after a burst
  of changes the engine's per-node state is rebuilt between claims, so the first claim after a
  change does not pay for it (`warmup_delay` 0: it does). A claim decided before that still sees
  the newest slices.
- Tombstones are removed once they are `grace_for(ack_wait, retry_interval)` old (at least ten
  minutes), long after any event of the claim can still arrive (`tombstones` says why that is
  safe); every replica runs a pass every quarter of that, at a jittered time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Mapping
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from gpudra_allocator.adoption import AdoptSteps
from gpudra_allocator.announcements import Announcer
from gpudra_allocator.claim_steps import ClaimSteps
from gpudra_allocator.consumer import ClaimsConsumer
from gpudra_allocator.engine import Engine
from gpudra_allocator.errors import BadClaimError
from gpudra_allocator.events import quietly
from gpudra_allocator.gang_steps import GangSteps
from gpudra_allocator.gangs import GangBook
from gpudra_allocator.index import KvIndex
from gpudra_allocator.releases import ReleaseSteps
from gpudra_allocator.reservations import Reservations
from gpudra_allocator.retries import RetryQueue
from gpudra_allocator.settings import Settings
from gpudra_allocator.steps import Waiting
from gpudra_allocator.tombstones import TombstoneCollector, grace_for
from gpudra_allocator.warmup import Warmer
from gpudra_api import DeviceClass, ResourceSlice
from gpudra_bus import (
    CLAIM_EVENT,
    BusError,
    BusPermanentError,
    BusRetryableError,
    DeadLetters,
    Publisher,
    receive,
    tracing,
)
from gpudra_service import cancel_until_done
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)


class Worker(ClaimSteps, ReleaseSteps, AdoptSteps, RetryQueue, Announcer, GangSteps):
    """The allocator's loop, which keeps the state its steps (the mixins) share."""

    def __init__(
        self,
        nc: Client,
        settings: Settings,
        engine: Engine,
        index: KvIndex[ResourceSlice],
        reservations: Reservations,
        classes: KvIndex[DeviceClass] | None = None,
    ) -> None:
        self._nc = nc
        self._settings = settings
        self._engine = engine
        self._index = index
        self._classes = classes
        self._classes_seen = -1
        self._res = reservations
        self._gangs = GangBook(reservations.kv)
        self._gang_reasons: dict[str, str] = {}
        self._publisher = Publisher(nc)
        self._dead = DeadLetters(self._publisher, service="allocator")
        self._waiting: dict[str, Waiting] = {}
        self._queue_version = 0  # `retries`
        self.replica = settings.replica
        self.ready = False
        self.decided = 0
        self.unschedulable = 0
        self.released = 0
        self.last_decision_at: float | None = None  # epoch seconds; read by `/statusz`
        self._decide_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._inflight: set[asyncio.Task[None]] = set()
        # The newest task of each claim (by subject, one per claim name): a claim's events are
        # handled one after the other, in delivery order (`_handle_in_slot`).
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self.replaced = 0
        self.stale = 0
        self.refused = 0  # allocations the API server refused, their devices freed
        self.refused_unchanged = 0  # pending events of such a claim, unchanged: not decided
        self._consumer = ClaimsConsumer(nc.jetstream(), settings)
        self._tombstones = TombstoneCollector(
            nc.jetstream(),
            reservations.kv,
            grace_for(settings.ack_wait, settings.retry_interval),
        )
        self.warmer = Warmer(
            engine,
            lambda: (self._index.slices.values(), self._index.version, self._res.state),
            settings.warmup_delay,
            before=self._refresh_classes,
        )

    # Read-only views for `/statusz` (`status.AllocatorStatus`).
    @property
    def waiting(self) -> Mapping[str, Waiting]:
        """The claims held for retry, by UID."""
        return self._waiting

    @property
    def dead_letters(self) -> Mapping[str, int]:
        """Malformed events dead-lettered, by kind."""
        return self._dead.counts

    @property
    def engine_builds(self) -> int:
        """Times the engine rebuilt its per-node state (warm-ups and decisions)."""
        return self._engine.builds

    @property
    def reserve_status(self) -> dict[str, Any]:
        """The topology reserve's settings and what it did (`Engine.reserve_status`)."""
        return self._engine.reserve_status()

    @property
    def engine_nodes_rebuilt(self) -> int:
        """Nodes whose per-node state those rebuilds recomputed."""
        return self._engine.nodes_rebuilt

    @property
    def in_flight(self) -> int:
        """Claim events being handled now."""
        return len(self._inflight)

    async def _collect_tombstones(self) -> None:
        while True:
            await asyncio.sleep(self._tombstones.grace / 4 * random.uniform(0.75, 1.25))
            try:
                await self._tombstones.collect()
            except BusError as exc:
                log.warning("collecting tombstones failed (%s); trying again later", exc)

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.open()
        self.ready = True
        log.info("allocator %s consuming claim events", self.replica)
        collector = asyncio.create_task(self._collect_tombstones(), name="tombstones")
        watched = [i for i in (self._index, self._classes) if i is not None]
        try:  # from here on every exit stops the collector and the warm-up
            if self._settings.warmup_delay > 0:
                for index in watched:
                    index.listeners.append(self.warmer.notify)
                self.warmer.start()
            while not stop.is_set():
                msgs = await self._consumer.fetch()
                for msg in msgs:
                    # Claims are handled concurrently (their bus and KV round trips overlap);
                    # only decide+reserve is serialised, under `_decide_lock`. One claim's
                    # events wait for each other: an adoption and the deallocation right after it
                    # handled side by side could leave the claim's devices held for good.
                    await self._slots.acquire()
                    before = self._lanes.get(msg.subject)
                    task = asyncio.create_task(self._handle_in_slot(msg, before))
                    self._inflight.add(task)
                    self._lanes[msg.subject] = task
                    task.add_done_callback(functools.partial(self._task_done, msg.subject))
                await self._retry_waiting()
        finally:
            self.ready = False
            for index in watched:
                with contextlib.suppress(ValueError):
                    index.listeners.remove(self.warmer.notify)
            await self.warmer.stop()
            await cancel_until_done(collector)
            # In-flight work gets a grace period; what does not finish is redelivered later.
            if self._inflight:
                _, stuck = await asyncio.wait(set(self._inflight), timeout=5.0)
                for task in stuck:
                    task.cancel()
            await self._consumer.close()

    def _task_done(self, subject: str, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._lanes.get(subject) is task:
            del self._lanes[subject]

    async def _handle_in_slot(self, msg: Msg, before: asyncio.Task[None] | None) -> None:
        try:
            if before is not None:
                await asyncio.wait({before})  # the same claim's earlier event first
            await self._guarded(msg)
        except Exception:
            log.exception("claim event on %s failed; it will be redelivered", msg.subject)
        finally:
            self._slots.release()

    async def _guarded(self, msg: Msg) -> None:
        try:
            await self.handle(msg)
        except BusRetryableError as exc:
            log.warning("claim event on %s deferred: %s", msg.subject, exc)
            await quietly(msg.nak(delay=1.0))
        except (BusPermanentError, BadClaimError) as exc:
            await self._dead.park(msg, exc)
            await quietly(msg.ack())

    async def handle(self, msg: Msg) -> None:
        event = await receive(msg, CLAIM_EVENT, self._dead)
        if event is None:
            return
        with tracing.process_span(
            msg.subject, msg.headers, size=len(msg.data), consumer=self._settings.consumer
        ) as span:
            span.set_attribute("gpudra.claim.uid", event.claim.uid)
            kind = event.kind
            if kind == claims_pb2.ClaimEvent.KIND_PENDING:
                await self._pending(msg, event)
            elif kind == claims_pb2.ClaimEvent.KIND_DELETED:
                await self._deleted(msg, event)
            elif kind == claims_pb2.ClaimEvent.KIND_ALLOCATED_EXTERNALLY:
                await self._adopt(msg, event)
            else:
                raise BadClaimError(f"claim event of unknown kind {kind}")

    def _refresh_classes(self) -> None:
        if self._classes is not None and self._classes.version != self._classes_seen:
            self._classes_seen = self._classes.version
            self._engine.use_classes(self._classes.objects.values())
