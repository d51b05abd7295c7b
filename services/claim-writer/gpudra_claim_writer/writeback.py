"""Write-back: the allocator's decisions become ResourceClaim status, never overwriting anything.

Promises:
- ALLOCATED: the claim gets the delete-protection finalizer and then `status.allocation`, each
  write carrying the resourceVersion just read; a 409 re-reads and decides again. The first try
  may start from the claim as the standalone KV store last saw it at the decision's
  resourceVersion (its watch delivered it to the intake; no read) when it was pending then: the
  writes name that version, so a claim changed since is refused (409) and read again. An allocation
  that is already there is left alone (decisions repeat after restarts). Another allocation
  already there (kube-scheduler allocated an ungated pod's claim first) is left alone too, and
  sent to the allocator as an adoption that replaces this decision (`replaces_allocation`, the
  decision's allocation id; counted "foreign"), so the allocator frees the decision's devices and
  holds the ones the claim got. A claim that is gone (also when it goes between the read and a
  write: a 404 there is no malformed decision to dead-letter), or was re-created under the same
  name with another UID, gets a DELETED event instead, so the allocator frees the devices it
  reserved for it. So does a claim being deleted, unless a consumer (`reservedFor`) still holds
  it: a pod may run on its devices, and the intake releases them once the last consumer is off
  ("deleting-in-use"); such a claim is left as it is (an allocation other than the decision's
  on it is sent for adoption, as above).
- The allocation carries the claim's trace on: the metadata write before it (the finalizer) also
  sets the annotations `gpudra.io/traceparent` / `gpudra.io/tracestate` to the context of the
  `write claim status` span, so the kubelet plugin's prepare span, which reads them, joins the
  claim's trace in a real cluster too. Only a claim not yet carrying the allocation is annotated.
- The same metadata write sets `gpudra.io/allocation-id` to the decision's id (`decision_id`:
  the allocator's, the same for every announcement of one decision; from an older allocator a hash
  of the decision message, the same for every delivery), so a write interrupted between its two
  steps is not written again, and the allocator can tell which of its decisions a claim carries; `consumers` explains how the intake uses it to
  see, after a restart, an allocation that was cleared while nobody watched. A decision delivered
  again after its allocation was written and then cleared by its consumers leaving (its ack lost,
  or the claim-writer stopped before acknowledging it; `consumers.cleared_since`: the claim
  carries its id but neither the allocation nor the finalizer) is not written again: the
  allocator frees those devices when the intake reports the release (counted "cleared").
- UNSCHEDULABLE: the reason lands in the claim's `gpudra.io/unschedulable` annotation (removed by
  the metadata write that adds the finalizer, before the allocation is written, so a claim never
  shows an allocation beside a stale reason: a reason written in between makes the allocation's
  write conflict, and the re-read removes it again) and, with an Events recorder (kubernetes
  mode), in a Warning `FailedAllocation` Event; a newly written allocation gets a Normal `Allocated` Event (see `kube_events`).
- Released after a deallocation: if the claim still exists and is pending, it is offered for
  allocation again: with its pod as one unit when a complete pod uses it (`PodUnits.reoffer`),
  else alone — unless its consumers left it (annotation `gpudra.io/consumers-left`, or not marked
  yet but `consumers.left_unreported`: `consumers.needs_pod`): then only with a pod that may run
  and names it, never alone (it waits for a pod, as in Kubernetes; counted "waiting").
- The message is acknowledged after the write; a decision that cannot be written now (API away) is
  redelivered. Malformed messages are dead-lettered. So is an allocation the API server refuses
  for good (422: its validation, or an admission policy), after the refusal is written into the
  claim as its unschedulable reason (annotation and Warning Event; counted "refused"): the claim
  says why it is not allocated. Then, as kube-scheduler un-reserves after a failed status write,
  the allocator is told, before the decision is acknowledged: a deallocation of the pending claim
  naming the refused allocation (`refused_allocation`, message id `<uid>/refused/<allocation
  id>`), carrying the claim as it is after the reason was written. The allocator frees the
  decision's devices and decides the claim again only once it has changed (another generation or
  resourceVersion than that one): offered again unchanged, it would be refused again, in a
  loop; its `Released` ("refused") therefore offers the claim nowhere. A claim gone or no longer
  pending by then is released by the intake as usual. A write the API refuses to the claim-writer
  itself (401/403: its RBAC or credentials, which an operator fixes, not the decision) is
  redelivered too, after 5 s doubling up to a minute (counted "forbidden"): dead-lettered, the
  decision's devices stayed held for a claim that never got them.
- Spans: each decision is processed under the trace its headers carry (the claim's trace), with a
  child span per status write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry import trace

from gpudra_bus import (
    ALLOCATION_DECISION,
    DECISIONS_STREAM,
    NATS_ERRORS,
    RELEASED,
    Backoff,
    BusPermanentError,
    BusRetryableError,
    CodecError,
    DeadLetters,
    Publisher,
    receive,
    schema_of,
    subjects,
    tracing,
)
from gpudra_bus.consume import fetch_ready
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.claims import (
    TRACE_ANNOTATIONS,
    ClaimState,
    allocation_of,
    chained,
    ref_of,
    state_of,
    with_allocation,
    with_finalizer,
    with_reason,
    with_trace,
)
from gpudra_claim_writer.consumers import (
    cleared_since,
    had_consumers,
    needs_pod,
    pod_waiting_for,
    with_allocation_id,
)
from gpudra_claim_writer.events import Kind, publish_event
from gpudra_claim_writer.kube_events import ClaimEvents
from gpudra_kube.errors import (
    ConflictError,
    ForbiddenError,
    InvalidObjectError,
    KubePermanentError,
    KubeRetryableError,
    NotFoundError,
)
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_kube.store import Store
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)
tracer = trace.get_tracer("gpudra_claim_writer")

_MAX_TRIES = 10
# A write refused to the claim-writer itself (401/403) is tried again after 5 s, doubling to 60 s.
_FORBIDDEN = Backoff(initial=5.0, maximum=60.0, jitter=0.0)

OnAllocated = Callable[[str, str, str, dict[str, Any]], Awaitable[None]]
# Offers a claim that is pending again after a deallocation together with its pod (`PodUnits.reoffer`);
# False when no complete pod uses it, and the claim goes out alone.
Reoffer = Callable[[dict[str, Any]], Awaitable[bool]]


class Writeback:
    def __init__(
        self,
        nc: Client,
        store: Store,
        publisher: Publisher,
        *,
        consumer: str,
        on_allocated: OnAllocated | None = None,
        concurrency: int = 16,
        events: ClaimEvents | None = None,
        reoffer: Reoffer | None = None,
    ) -> None:
        self._nc = nc
        self._store = store
        self._publisher = publisher
        self._consumer = consumer
        self._on_allocated = on_allocated
        self._events = events or ClaimEvents(None)
        self._reoffer = reoffer
        self._dead = DeadLetters(publisher, service="claim-writer")
        self.counts: Counter[str] = Counter()
        self.ready = False
        self._slots = asyncio.Semaphore(concurrency)
        self._inflight: set[asyncio.Task[None]] = set()

    @property
    def dead_letters(self) -> Mapping[str, int]:
        """Malformed decisions dead-lettered, by kind (read by `/statusz`)."""
        return self._dead.counts

    async def run(self) -> None:
        sub = await self._nc.jetstream().pull_subscribe(
            subjects.all_of(SubjectKind.ALLOCATIONS),
            durable=self._consumer,
            stream=DECISIONS_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=30.0,
                max_deliver=-1,
            ),
        )
        self.ready = True
        try:
            while True:
                try:
                    msgs = await fetch_ready(sub, 64, 1.0)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except (nats.errors.Error, OSError) as exc:
                    log.warning("fetching decisions failed (%s); retrying", exc)
                    continue
                for msg in msgs:
                    # Decisions of different claims are independent; every write is checked
                    # against the resourceVersion it read, so overlapping them is safe.
                    await self._slots.acquire()
                    task = asyncio.create_task(self._in_slot(msg))
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
        finally:
            self.ready = False
            # In-flight work gets a grace period; what does not finish is redelivered later.
            if self._inflight:
                _, stuck = await asyncio.wait(set(self._inflight), timeout=5.0)
                for task in stuck:
                    task.cancel()
            with contextlib.suppress(*NATS_ERRORS):
                await sub.unsubscribe()

    async def _in_slot(self, msg: Msg) -> None:
        try:
            await self._guarded(msg)
        except Exception:
            log.exception("decision on %s failed; it will be redelivered", msg.subject)
        finally:
            self._slots.release()

    async def _guarded(self, msg: Msg) -> None:
        try:
            await self.handle(msg)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.ack()
        except (BusRetryableError, KubeRetryableError) as exc:
            log.warning("decision on %s deferred: %s", msg.subject, exc)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.nak(delay=1.0)
        except ForbiddenError as exc:
            self.counts["forbidden"] += 1
            delivered = msg.metadata.num_delivered if msg.metadata else 1
            delay = _FORBIDDEN.delay(delivered - 1)
            log.error(
                "the API refused the claim-writer's write for %s (%s): check its RBAC and "
                "credentials; the decision is tried again in %.0fs",
                msg.subject,
                exc,
                delay,
            )
            with contextlib.suppress(*NATS_ERRORS):
                await msg.nak(delay=delay)
        except (BusPermanentError, KubePermanentError) as exc:
            await self._dead.park(msg, exc)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.ack()

    async def handle(self, msg: Msg) -> None:
        try:
            name = schema_of(msg.headers).name
        except CodecError:
            name = ""
        with tracing.process_span(
            msg.subject, msg.headers, size=len(msg.data), consumer=self._consumer
        ):
            if name == RELEASED.schema.name:
                released = await receive(msg, RELEASED, self._dead)
                if released is not None:
                    await self._released(released)
                return
            decision = await receive(msg, ALLOCATION_DECISION, self._dead)
            if decision is None:
                return
            if decision.outcome == claims_pb2.AllocationDecision.OUTCOME_ALLOCATED:
                await self._allocated(decision)
            elif decision.outcome == claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE:
                await self._unschedulable(decision)
            else:
                raise BusPermanentError(f"decision with unknown outcome {decision.outcome}")

    async def _current(
        self, ref: claims_pb2.ClaimRef, *, seen: bool = False
    ) -> dict[str, Any] | None:
        """The claim the decision is for; None when it is gone or is another claim by now.

        With `seen`, a pending claim the KV store remembers at `ref`'s resourceVersion is taken
        without a read (only a write naming that version may follow)."""
        if seen and isinstance(self._store, KvStore) and ref.resource_version:
            known = self._store.seen_at(
                RESOURCE_CLAIMS, ref.name, ref.namespace, ref.resource_version
            )
            if (
                known is not None
                and ref_of(known).uid == ref.uid
                and state_of(known) is ClaimState.PENDING
                and allocation_of(known) is None
            ):
                return known
        try:
            claim = await self._store.get(RESOURCE_CLAIMS, ref.name, ref.namespace)
        except NotFoundError:
            return None
        return claim if ref_of(claim).uid == ref.uid else None

    async def _release_stale(self, ref: claims_pb2.ClaimRef) -> None:
        await publish_event(
            self._publisher, Kind.KIND_DELETED, None, ref=ref, msg_id=f"{ref.uid}/deleted"
        )
        self.counts["stale"] += 1

    async def _written_instead(
        self, claim: dict[str, Any], decision: claims_pb2.AllocationDecision
    ) -> None:
        """The claim was allocated by someone else (kube-scheduler, for an ungated pod) before
        this decision was written: the allocator must hold those devices, not the decision's."""
        ref = ref_of(claim)
        log.warning(
            "claim %s/%s was allocated outside gpudra before decision %s was written; "
            "the allocator adopts that allocation instead",
            ref.namespace,
            ref.name,
            decision.allocation_id or "(no id)",
        )
        self.counts["foreign"] += 1
        if decision.allocation_id:  # an older allocator's decision: the intake's adoption only
            await publish_event(
                self._publisher,
                Kind.KIND_ALLOCATED_EXTERNALLY,
                claim,
                msg_id=f"{ref.uid}/replaces/{decision.allocation_id}",
                replaces=decision.allocation_id,
            )

    async def _allocated(self, decision: claims_pb2.AllocationDecision) -> None:
        ref = decision.claim
        try:
            allocation = json.loads(decision.allocation_json)
        except ValueError as exc:
            raise BusPermanentError(f"allocation of {ref.name} is not JSON: {exc}") from exc
        if not isinstance(allocation, dict):
            raise BusPermanentError(f"allocation of {ref.name} is not an object")
        with tracer.start_as_current_span(
            "write claim status",
            attributes={
                "gpudra.claim": f"{ref.namespace}/{ref.name}",
                "gpudra.node": decision.node_name,
            },
        ):
            carrier = {k: v for k, v in tracing.inject().items() if k in TRACE_ANNOTATIONS and v}
            epoch = decision_id(decision)
            for attempt in range(_MAX_TRIES):
                claim = await self._current(ref, seen=attempt == 0)
                if claim is not None and state_of(claim) is ClaimState.DELETING:
                    if had_consumers(claim):
                        # A pod still holds it: its devices stay held until the intake sees the
                        # last consumer off. Only an allocation in place of this decision's is
                        # news (the allocator must hold the devices in use, not the decision's).
                        if allocation_of(claim) not in (None, allocation):
                            await self._written_instead(claim, decision)
                        return
                    claim = None
                if claim is None:
                    await self._release_stale(ref)
                    return
                existing = allocation_of(claim)
                if existing is None and cleared_since(claim, epoch):
                    # Written, used and released: the intake reports that release; writing it
                    # again would hand out devices the allocator has freed.
                    log.info(
                        "claim %s/%s: decision %s was written and cleared since; not again",
                        ref.namespace,
                        ref.name,
                        epoch,
                    )
                    self.counts["cleared"] += 1
                    return
                if existing is not None and existing != allocation:
                    await self._written_instead(claim, decision)
                    return
                # The trace goes with the first write of the allocation, never over a later one.
                metadata = functools.partial(
                    _metadata,
                    carrier=carrier if existing is None else None,
                    allocation=epoch,
                )
                try:
                    claim = await self._write(claim, metadata, status=False)
                    claim = await self._write(
                        claim, lambda c: with_allocation(c, allocation), status=True
                    )
                except ConflictError as exc:
                    log.info("claim %s/%s changed (%s); re-reading", ref.namespace, ref.name, exc)
                    self.counts["conflicts"] += 1
                    continue
                except NotFoundError:
                    # Gone since it was read: as for a claim gone before (not a malformed
                    # decision to dead-letter).
                    await self._release_stale(ref)
                    return
                except InvalidObjectError as exc:
                    # Refused for good (422): every delivery would fail the same way. The claim
                    # says why, the allocator frees the devices, then the decision is
                    # dead-lettered (`_guarded`).
                    await self._refused(ref, decision, exc)
                    raise
                self.counts["allocated"] += 1
                if existing is None:  # not a repeated decision: say so once
                    self._events.allocated(claim, allocation)
                break
            else:
                raise KubeRetryableError(f"claim {ref.namespace}/{ref.name} keeps changing")
        if self._on_allocated is not None:
            await self._on_allocated(ref.uid, ref.namespace, ref.name, allocation)

    async def _write(
        self,
        claim: dict[str, Any],
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        status: bool,
    ) -> dict[str, Any]:
        updated = change(claim)
        if updated is None:
            return claim
        if status:
            return await self._store.replace_status(RESOURCE_CLAIMS, updated)
        return await self._store.replace(RESOURCE_CLAIMS, updated)

    async def _unschedulable(self, decision: claims_pb2.AllocationDecision) -> None:
        if await self._reason(decision.claim, decision.reason):
            self.counts["unschedulable"] += 1

    async def _reason(self, ref: claims_pb2.ClaimRef, reason: str) -> dict[str, Any] | None:
        """Write `reason` into the pending claim (conflicts re-read) and record its Event; the
        claim as written (as read, when it said so already), or None when the claim is gone or
        no longer pending."""
        for _ in range(_MAX_TRIES):
            claim = await self._current(ref)
            if claim is None or state_of(claim) is not ClaimState.PENDING:
                return None
            try:
                written = await self._write(claim, lambda c: with_reason(c, reason), status=False)
                self._events.unschedulable(claim, reason)
                return written
            except ConflictError:
                self.counts["conflicts"] += 1
                continue
            except NotFoundError:
                return None  # gone since it was read: nothing to say any more
        raise KubeRetryableError(f"claim {ref.namespace}/{ref.name} keeps changing")

    async def _refused(
        self,
        ref: claims_pb2.ClaimRef,
        decision: claims_pb2.AllocationDecision,
        refusal: InvalidObjectError,
    ) -> None:
        """The API server refused to store the decision's allocation (422): say so in the claim,
        where users look, as an unschedulable reason (counted "refused"), then tell the allocator
        (`refused_allocation`, see the module docstring), which frees the decision's devices and
        does not decide the claim again until it has changed: offered again unchanged, it would
        be decided and refused the same way, over and over."""
        self.counts["refused"] += 1
        log.error(
            "claim %s/%s: the API server refused allocation %s: %s",
            ref.namespace,
            ref.name,
            decision_id(decision),
            refusal,
        )
        node = f" on node {decision.node_name}" if decision.node_name else ""
        reason = f"the API server refused gpudra's allocation{node}: {refusal}"
        try:
            claim = await self._reason(ref, reason)
        except KubePermanentError as exc:
            # Refused too: the log has it. (A retryable error is raised: the decision is
            # delivered again, meets the same refusal, and the reason is written then.)
            log.error("claim %s/%s: refusal not written: %s", ref.namespace, ref.name, exc)
            claim = await self._current(ref)
            if claim is not None and state_of(claim) is not ClaimState.PENDING:
                claim = None
        if claim is None:
            return  # gone or no longer pending: the intake releases it as for any claim
        refused = decision_id(decision)
        current = ref_of(claim)
        # The claim as it is now, reason and all: the allocator decides it again only once it
        # differs. A failed publish raises, and the decision is delivered again (message id:
        # a repeat is dropped by the stream).
        await publish_event(
            self._publisher,
            Kind.KIND_DELETED,
            claim,
            msg_id=f"{current.uid}/refused/{refused}",
            refused=refused,
        )

    async def _released(self, released: claims_pb2.Released) -> None:
        self.counts["released"] += 1
        if released.reason != "deallocated":
            return
        claim = await self._current(released.claim)
        if claim is None or state_of(claim) is not ClaimState.PENDING:
            return
        if needs_pod(claim):
            # Allocated again only for a pod that may run (`PodUnits` ignores finished pods).
            if not (
                self._reoffer is not None
                and await pod_waiting_for(self._store, claim)
                and await self._reoffer(claim)
            ):
                self.counts["waiting"] += 1
            return
        if self._reoffer is not None and await self._reoffer(claim):
            return  # went out again with its pod, as one unit
        ref = ref_of(claim)
        await publish_event(
            self._publisher,
            Kind.KIND_PENDING,
            claim,
            msg_id=f"{ref.uid}/{ref.generation}/pending/{ref.resource_version}",
        )


def decision_id(decision: claims_pb2.AllocationDecision) -> str:
    """The id an allocation written for `decision` carries (`gpudra.io/allocation-id`): the one
    the allocator gave the decision (the same for every announcement of it), or from an older
    allocator 16 hex digits of the hash of the decision message (the same for every delivery)."""
    if decision.allocation_id:
        return decision.allocation_id
    return hashlib.sha256(decision.SerializeToString(deterministic=True)).hexdigest()[:16]


def _metadata(
    claim: dict[str, Any], carrier: dict[str, str] | None, allocation: str
) -> dict[str, Any] | None:
    """The finalizer without the unschedulable reason, plus the trace annotations and the
    allocation id when `carrier` is given (a claim not allocated yet): one metadata write, before
    the allocation's."""
    if carrier is None:
        return chained(claim, with_finalizer, lambda c: with_reason(c, None))
    return chained(
        claim,
        with_finalizer,
        lambda c: with_reason(c, None),
        lambda c: with_trace(c, carrier),
        lambda c: with_allocation_id(c, allocation),
    )
