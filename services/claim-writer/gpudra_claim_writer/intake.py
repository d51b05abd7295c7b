"""Intake: every ResourceClaim change becomes the ClaimEvent the allocator needs.

Promises:
- A PENDING claim (no allocation, not being deleted) is published once per (UID, generation) per
  process, and again after every restart (the informer lists everything first): decisions are
  idempotent, so a repeat costs a lookup, while a missed one would strand the claim.
- An allocation that appears without gpudra (kube-scheduler allocated an ungated pod's claim) is
  published once as ALLOCATED_EXTERNALLY (one message id per allocation), so the allocator adopts
  its devices. Before that, when it hands out gpudra's devices and the claim carries the
  delete-protection finalizer (kube-scheduler adds it first), the claim gets the witness of a
  clearing nobody watched, `gpudra.io/allocation-id` of that allocation (counted "witnessed"),
  unless the id it carries names it already (`consumers`, "Adopted allocations": a relist or a
  restart writes nothing; an id of an earlier, cleared allocation is replaced): so the release of
  an adopted claim whose pod went while the claim-writer was down is seen at its restart, as for
  gpudra's own. The write-back's ids are never touched. The adoption names the id the claim
  carried before (`replaces_allocation`): if the allocator's record of the claim is that
  allocation on other devices (it was cleared and made again while no claim-writer watched), the
  allocator frees those and holds these.
- A claim that is deleted, or marked for deletion, is published as DELETED; then the
  delete-protection finalizer is removed (conflicts re-read, never overwrite; never from a claim
  re-created under the name; a refusal or an API error is logged, never fatal). A removal that
  an API error cut short (the API server away for the write and the re-read, or conflicts that
  kept coming) is tried again every `retry_interval` seconds while `run` runs (counted
  "finalizers-retrying"), until the claim is gone, re-created or no longer being deleted: no
  further watch event comes for such a claim, which would otherwise stay Terminating until a
  restart. With
  `wait_for_consumers` (kubernetes mode) a claim marked for deletion while `status.reservedFor`
  still names a consumer is left alone (counted "deleting-in-use"): its pod may be running on the
  devices, and Kubernetes keeps such a claim until kube-controller-manager takes the last consumer
  off; the event of that change releases it. Standalone mode releases it at once. A cleared allocation
  (kube-controller-manager deallocating) is published as a deallocation; the claim is offered for
  allocation again only after the allocator confirms the release (see `writeback`), so a new
  decision can never race the release of the old one.
- After the last consumer (`consumers` has the rule, both modes): a claim seen allocated with
  consumers (`reservedFor`) whose allocation is then cleared is annotated `gpudra.io/consumers-
  left` before its deallocation is published, and its pod-unit record is forgotten, so a pod that
  names it later publishes it with that pod (`events.PodUnits`). A pending claim carrying the
  annotation is never offered alone: it waits for a pod, as in Kubernetes (counted "waiting").
  Without the pod watch (`gate-pods` off) such a claim is not offered again by gpudra at all (in
  a cluster kube-scheduler allocates it for the next pod). The mark names the allocation whose
  consumers left (`gpudra.io/allocation-id`), so a claim that is allocated and left again is
  marked again for its new allocation.
- A clearing nobody watched (the claim-writer was down; a 410 relist skipped it): a pending claim
  this process has not seen allocated that is `consumers.left_unreported` (`consumers` says why
  that witness is sound) gets its deallocation published (`<uid>/deallocated/<allocation id>`)
  and is then marked, its pod-unit record forgotten, and it is not offered (counted
  "released-unseen"). A second restart or relist finds it marked and does nothing; within one
  process, a release already published live is not published again (the claim is only marked).
- With an `Ownership`, a pending claim that is not gpudra's (see `ownership`) is not offered to
  the allocator at all: another driver's claim gets no gpudra reason written into it.
- A pending gpudra claim too large for any ClaimEvent (`events.oversized`) is not offered: the
  reason goes into its `gpudra.io/unschedulable` annotation (counted "oversized"), and nothing is
  raised (that would stop the intake for every claim, after every restart too).
- `live` is the set of the UIDs of the claims that exist, as the watch tells (what `vanished`
  compares the allocator's records with, once `synced` is set).
- Every claim seen (not deleted) is passed to `on_claim` (namespace, name): a gated pod waiting
  for it may be ready now (see `gates`).
- With `PodUnits`, a pending claim that a known pod uses goes out with its pod, once the pod's
  claims all exist (`events.PodUnits` has the rules); one no known pod uses goes out alone.
- Each claim's intake opens a new trace (root span `intake claim`); the allocator and the status
  write continue it through the message headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from gpudra_bus import Publisher
from gpudra_claim_writer.claims import (
    FINALIZER,
    ClaimState,
    allocation_of,
    ref_of,
    state_of,
    with_reason,
    without_finalizer,
)
from gpudra_claim_writer.consumers import (
    adopted_id,
    allocation_id,
    consumers_left,
    had_consumers,
    left_unreported,
    names_allocation,
    with_allocation_id,
    with_consumers_left,
)
from gpudra_claim_writer.events import Kind, PodUnits, oversized, publish_event
from gpudra_claim_writer.ownership import DRIVERS, Ownership
from gpudra_claim_writer.retrying import beside
from gpudra_kube.errors import ConflictError, KubeError, KubeRetryableError, NotFoundError
from gpudra_kube.informer import informer
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_kube.store import EventType, Store, WatchEvent

log = logging.getLogger(__name__)
tracer = trace.get_tracer("gpudra_claim_writer")

_MAX_TRIES = 10


OnClaim = Callable[[str, str], Awaitable[None]]


class Intake:
    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        namespace: str = "",
        watch_timeout: float = 10.0,
        on_claim: OnClaim | None = None,
        ownership: Ownership | None = None,
        pods: PodUnits | None = None,
        wait_for_consumers: bool = False,
        retry_interval: float = 5.0,
    ) -> None:
        self._store = store
        self._live: set[str] = set()  # UIDs of the claims that exist, as the watch tells
        self._retry_interval = retry_interval
        # claim uid -> (namespace, name) of deleted claims whose finalizer an API error kept on
        self._finalizers: dict[str, tuple[str, str]] = {}
        self._wait_for_consumers = wait_for_consumers
        self._pods = pods
        self._on_claim = on_claim
        self._ownership = ownership
        self._watch_timeout = watch_timeout
        self._publisher = publisher
        self._namespace = namespace or None
        # claim uid -> the generations offered (or decided not to offer): by UID, so a deletion
        # forgets its claim in constant time (a scan of every claim made deleting n claims cost
        # n squared: 34 s of a stalled intake for 20,000)
        self._pending_sent: dict[str, set[int]] = {}
        self._allocated: dict[str, dict[str, Any]] = {}
        self._gone: set[str] = set()
        self._ours: set[str] = set()
        self._consumed: set[str] = set()  # claims seen allocated with consumers
        # claim uid -> id of the allocation whose deallocation this process published
        self._reported: dict[str, str] = {}
        self.synced = asyncio.Event()
        self.published: Counter[str] = Counter()
        self.conflicts = 0  # metadata writes refused by a changed resourceVersion, re-read

    @property
    def live(self) -> Collection[str]:
        """UIDs of the claims that exist, as far as the watch told (kept up to date)."""
        return self._live

    @property
    def retrying(self) -> int:
        """Finalizer removals that an API error cut short, waiting to be tried again."""
        return len(self._finalizers)

    async def run(self) -> None:
        await beside(self._follow(), self._retry_interval, self.retry)

    async def retry(self) -> None:
        """Try again the finalizer removals an API error cut short, while still wanted: the
        claim (its UID) still exists, is being deleted and carries the finalizer."""
        for uid, (namespace, name) in sorted(self._finalizers.items()):
            try:
                claim = await self._store.get(RESOURCE_CLAIMS, name, namespace)
            except NotFoundError:
                self._finalizers.pop(uid, None)
                continue
            except KubeError as exc:
                log.info("claim %s/%s: finalizer removal still waits: %s", namespace, name, exc)
                continue
            self._finalizers.pop(uid, None)
            finalizers = (claim.get("metadata") or {}).get("finalizers") or []
            wanted = ref_of(claim).uid == uid and state_of(claim) is ClaimState.DELETING
            if wanted and FINALIZER in finalizers:
                await self._drop_finalizer(claim)  # kept again while it fails

    async def _follow(self) -> None:
        events = informer(
            self._store, RESOURCE_CLAIMS, self._namespace, watch_timeout=self._watch_timeout
        )
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                await self.on_event(event)

    async def on_event(self, event: WatchEvent) -> None:
        if event.type is EventType.SYNCED:
            self.synced.set()
            return
        claim = event.object
        ref = ref_of(claim)
        if not ref.uid or not ref.name:
            log.error("ignoring a claim without name or UID: %s", claim.get("metadata"))
            return
        if event.type is EventType.DELETED:
            self._live.discard(ref.uid)
        else:
            self._live.add(ref.uid)
        with tracer.start_as_current_span(
            "intake claim",
            context=Context(),
            attributes={
                "gpudra.claim": f"{ref.namespace}/{ref.name}",
                "gpudra.claim.uid": ref.uid,
                "gpudra.watch.event": event.type.value,
            },
        ):
            if event.type is EventType.DELETED:
                await self._deleted(claim)
                # Nothing of this UID follows its DELETED (the informer's promise), so what only
                # kept a deletion from being reported twice can go: kept, it grew with every
                # claim ever deleted.
                self._gone.discard(ref.uid)
            elif state_of(claim) is ClaimState.DELETING:
                if self._wait_for_consumers and had_consumers(claim):
                    # Still reserved for a pod that may run on its devices: released once
                    # kube-controller-manager has taken the last consumer off (next event).
                    self.published["deleting-in-use"] += 1
                else:
                    await self._deleted(claim)
                    await self._drop_finalizer(claim)
            elif state_of(claim) is ClaimState.ALLOCATED:
                await self._allocated_seen(claim)
            else:
                await self._pending(claim)
        if self._on_claim is not None and event.type is not EventType.DELETED:
            await self._on_claim(ref.namespace, ref.name)

    async def _pending(self, claim: dict[str, Any]) -> None:
        ref = ref_of(claim)
        if self._allocated.pop(ref.uid, None) is not None:
            # The next allocation is news, whoever makes it (kube-scheduler, for the next pod).
            self._ours.discard(ref.uid)
            epoch = allocation_id(claim)
            if ref.uid in self._consumed or consumers_left(claim) or left_unreported(claim):
                claim = await self._mark_consumers_left(claim, epoch)
                if self._pods is not None:
                    self._pods.forget(ref.uid)  # a pod naming it later publishes it again
            await publish_event(
                self._publisher,
                Kind.KIND_DELETED,
                claim,
                msg_id=f"{ref.uid}/deallocated/{ref.resource_version}",
            )
            self._reported[ref.uid] = epoch
            self.published["deallocated"] += 1
            return
        if left_unreported(claim):
            await self._left_unseen(claim)
            return
        if consumers_left(claim):
            self.published["waiting"] += 1  # only a pod that names it brings it back
            return
        if ref.generation in self._pending_sent.get(ref.uid, ()):
            return
        sent = self._pending_sent.setdefault(ref.uid, set())
        if self._ownership is not None and not await self._ownership.claim_is_ours(claim):
            # Another driver's claim: kube-scheduler allocates it; gpudra stays out of its way.
            sent.add(ref.generation)
            self.published["foreign"] += 1
            return
        too_large = oversized(claim)
        if too_large:
            # No event can carry it to the allocator: say so where users look, once.
            sent.add(ref.generation)
            self.published["oversized"] += 1
            log.error("claim %s/%s: %s", ref.namespace, ref.name, too_large)
            await self._rewrite(
                claim,
                lambda c: with_reason(c, too_large),
                lambda c: state_of(c) is ClaimState.PENDING,
                "unschedulable reason",
            )
            return
        if self._pods is not None and await self._pods.offer(claim):
            self.published["with-pod"] += 1  # published with its pod, now or once it is complete
            return
        await publish_event(
            self._publisher,
            Kind.KIND_PENDING,
            claim,
            msg_id=f"{ref.uid}/{ref.generation}/pending",
        )
        sent.add(ref.generation)
        self.published["pending"] += 1

    async def _left_unseen(self, claim: dict[str, Any]) -> None:
        """Its consumers left and its allocation was cleared while nobody watched: report the
        release (unless this process did), then mark it (see the module docstring)."""
        ref, epoch = ref_of(claim), allocation_id(claim)
        if self._reported.get(ref.uid) != epoch:
            await publish_event(
                self._publisher, Kind.KIND_DELETED, claim, msg_id=f"{ref.uid}/deallocated/{epoch}"
            )
            self._reported[ref.uid] = epoch
            self.published["released-unseen"] += 1
            log.info("claim %s/%s: allocation cleared unseen; released", ref.namespace, ref.name)
        await self._mark_consumers_left(claim, epoch)
        if self._pods is not None:
            self._pods.forget(ref.uid)  # a pod naming it later publishes it again

    async def _allocated_seen(self, claim: dict[str, Any]) -> None:
        ref = ref_of(claim)
        allocation = allocation_of(claim)
        assert allocation is not None
        if had_consumers(claim):
            self._consumed.add(ref.uid)
        if self._allocated.get(ref.uid) == allocation:
            return
        first = ref.uid not in self._allocated
        self._allocated[ref.uid] = allocation
        if first and ref.uid not in self._ours:
            # The id it carried before: the allocation this one may have taken the place of.
            replaces = allocation_id(claim)
            # The witness goes on before the allocator holds the devices: an adoption published
            # is (but for a write that failed) one whose clearing a restart will see.
            claim = await self._witness(claim)
            # Ours or not, the allocator decides: a recorded decision of these devices makes this
            # a no-op. One message id per allocation (its id and its devices): a later one of the
            # same claim is news, even under the id of the one it replaced.
            digest = hashlib.sha256(
                json.dumps(allocation, sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest()[:12]
            await publish_event(
                self._publisher,
                Kind.KIND_ALLOCATED_EXTERNALLY,
                claim,
                msg_id=f"{ref.uid}/external/{allocation_id(claim) or ref.resource_version}/{digest}",
                replaces=replaces,
            )
            self.published["external"] += 1

    async def _witness(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Give an allocation this process did not write an allocation id, unless the one the
        claim carries names it (`consumers.names_allocation`; "Adopted allocations" there):
        conflicts re-read, never overwrite; a claim that is not the same allocation any more
        (pending, deleted, re-created) gets nothing. The claim as written, or as given."""
        ref = ref_of(claim)
        seen = allocation_of(claim)
        if not _on_gpudras_devices(seen):
            return claim  # another driver's: gpudra writes nothing into it
        if FINALIZER not in ((claim.get("metadata") or {}).get("finalizers") or []):
            # The witness reads "finalizer removed" as "cleared by its last consumer leaving";
            # an allocation made without it (not kube-scheduler's way) would read as that always.
            return claim
        released = self._reported.get(ref.uid, "")
        new = adopted_id(claim)
        written, wrote = await self._rewrite(
            claim,
            lambda c: None if names_allocation(c, released) else with_allocation_id(c, new),
            lambda c: state_of(c) is ClaimState.ALLOCATED and allocation_of(c) == seen,
            "allocation id",
        )
        if wrote:
            self.published["witnessed"] += 1
        return written

    async def _rewrite(
        self,
        claim: dict[str, Any],
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        same: Callable[[dict[str, Any]], bool],
        what: str,
        cut_short: Callable[[], None] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Write `change(claim)` (None: nothing to write); on a conflict or a retryable error read
        the claim again and apply `change` to that, while it is the same claim (UID) and `same`
        holds for it; never overwrites. The claim as written and True, or the claim as last seen
        (as given when it went away, changed beyond `same`, refused the write or kept
        conflicting; logged) and False. `cut_short` is called when the write did not happen for a
        reason that may pass (the re-read failed with a retryable error, or conflicts kept
        coming), not when the claim went, changed or the write was refused."""
        ref = ref_of(claim)
        current = claim
        for _ in range(_MAX_TRIES):
            updated = change(current)
            if updated is None:
                return current, False
            try:
                return await self._store.replace(RESOURCE_CLAIMS, updated), True
            except (ConflictError, KubeRetryableError) as exc:
                log.info("claim %s/%s: %s; re-reading", ref.namespace, ref.name, exc)
                if isinstance(exc, ConflictError):
                    self.conflicts += 1
                try:
                    current = await self._store.get(RESOURCE_CLAIMS, ref.name, ref.namespace)
                except KubeError as err:
                    log.info("claim %s/%s: %s not written: %s", ref.namespace, ref.name, what, err)
                    if isinstance(err, KubeRetryableError) and cut_short is not None:
                        cut_short()
                    return claim, False
                if ref_of(current).uid != ref.uid or not same(current):
                    log.info("claim %s/%s changed: %s not written", ref.namespace, ref.name, what)
                    return claim, False
            except KubeError as exc:  # gone, or refused
                log.info("claim %s/%s: %s not written: %s", ref.namespace, ref.name, what, exc)
                return claim, False
        log.error("could not write the %s of %s/%s", what, ref.namespace, ref.name)
        if cut_short is not None:
            cut_short()
        return claim, False

    def written(self, uid: str) -> None:
        """The write-back stored this claim's allocation: seeing it in the watch is no news.

        Only a flag: what the claim looked like is learned from the watch alone, in its order, so
        an older event still on its way can never look like the allocation being cleared.
        """
        self._ours.add(uid)

    async def _deleted(self, claim: dict[str, Any]) -> None:
        ref = ref_of(claim)
        self._finalizers.pop(ref.uid, None)
        self._allocated.pop(ref.uid, None)
        self._ours.discard(ref.uid)
        self._consumed.discard(ref.uid)
        self._reported.pop(ref.uid, None)
        if self._pods is not None:
            self._pods.forget(ref.uid)
        if ref.uid in self._gone:
            return
        await publish_event(
            self._publisher, Kind.KIND_DELETED, None, ref=ref, msg_id=f"{ref.uid}/deleted"
        )
        self._gone.add(ref.uid)
        self._pending_sent.pop(ref.uid, None)
        self.published["deleted"] += 1

    async def _mark_consumers_left(self, claim: dict[str, Any], epoch: str) -> dict[str, Any]:
        """Annotate the claim `gpudra.io/consumers-left` with allocation id `epoch` (conflicts
        re-read, never overwrite); the claim as written, or as given when it is gone or the write
        keeps failing (logged: its release must go out regardless)."""
        marked, _ = await self._rewrite(
            claim, lambda c: with_consumers_left(c, epoch), lambda c: True, "consumers-left mark"
        )
        return marked

    async def _drop_finalizer(self, claim: dict[str, Any]) -> None:
        """Remove the delete-protection finalizer (`_rewrite`: conflicts re-read, never
        overwrite): only from this claim (its UID) while it is being deleted, never from a claim
        re-created under its name; a refusal or an error is logged, never raised (it would end
        the intake, and a restart would meet the same refusal); one an API error cut short is
        kept for `retry`."""
        ref = ref_of(claim)
        self._finalizers.pop(ref.uid, None)

        def later() -> None:
            self._finalizers[ref.uid] = (ref.namespace, ref.name)

        await self._rewrite(
            claim,
            without_finalizer,
            lambda c: state_of(c) is ClaimState.DELETING,
            "finalizer removal",
            later,
        )


def _on_gpudras_devices(allocation: dict[str, Any] | None) -> bool:
    """The allocation hands out at least one device of a driver gpudra serves."""
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return any(isinstance(r, dict) and r.get("driver") in DRIVERS for r in results)
