"""Standalone mode: the claim-writer records claims' consumers itself, as kube-scheduler (which
reserves a claim for the pod it binds) and kube-controller-manager (which removes pods that are
gone and deallocates a claim nobody uses any more) do in a cluster.

Promises (`Consumers`):
- A pod that is running or may run (no `deletionTimestamp`, phase neither Succeeded nor Failed)
  is added to `status.reservedFor` of each claim it names, once that claim is allocated — when the
  pod appears (`run`, a pod informer) or when the claim gets its allocation (`claim_allocated`,
  called by the write-back). At most 256 consumers per claim, as the API allows; a pod that does
  not fit is logged and counted (`counts["full"]`).
- A pod that is deleted or has finished is removed from the claims it names; the last consumer
  leaving releases the claim (`gpudra_kube.consumers.unreserve`), which the intake then reports to
  the allocator as a deallocation.
- After every (re)list of pods, every claim's pod consumers that no longer exist (deleted while
  nobody watched) are removed the same way, so a restart loses no release.
- A claim-store error is logged and counted, and that reservation or removal is tried again
  every `retry_interval` seconds while `run` runs (until it is done, or no longer wanted: the pod
  finished or went, or came back), besides the pod's next change, the claim's next allocation or
  the next relist: none of those may come (a deleted pod has no next change, and the KV store
  never asks for a relist), and a removal lost for good keeps the claim allocated for nobody.
  Never raises out of `run` except on cancellation.
- The pod informer holds each pod as `claims.slim_pod` leaves it (what these rules read).
Not in kubernetes mode: there kube-scheduler and kube-controller-manager own `reservedFor`.

After the last consumer (both modes; the rule the intake and the write-back apply): in Kubernetes
an allocation that kube-controller-manager cleared because the claim's last consumer stopped is
made again only when a pod that references the claim is scheduled. gpudra follows: a claim seen
allocated *with* consumers (`had_consumers`) whose allocation is then cleared gets the annotation
`gpudra.io/consumers-left` (`with_consumers_left`, written by the intake before it reports the
deallocation) and from then on is offered to the allocator only with a pod that uses it and may
run (`pod_waiting_for`; `events.PodUnits` ignores finished pods too), never alone. The annotation
is never removed: once consumed, a claim is always allocated for a pod. A claim that never had a
consumer (`gpudra apply` of bare claims, the demo) is still allocated eagerly, and so is one whose
allocation was cleared live while, as far as the intake saw, nobody used it (unless the witness
below shows otherwise: a relist can hide the consumers).

A clearing nobody watched (the claim-writer was down, or a 410 relist skipped the revisions):
- The witness. The write-back's metadata write before an allocation (the one that adds the
  delete-protection finalizer) also sets `gpudra.io/allocation-id` to an id of that decision
  (`with_allocation_id`; no extra write). The consumers-left mark carries the id of the
  allocation whose consumers left (value `true` when unknown: claims marked before ids existed).
  A claim is *left unreported* (`left_unreported`) when it is pending (no allocation, not being
  deleted), carries an allocation id, no longer carries the finalizer, and is not marked for that
  id. Kube-controller-manager clears an allocation only when its last consumer stopped (the
  transition "was used" to "is not used") and then removes the finalizer; standalone's
  `gpudra_kube.consumers.unreserve` does the same. Nothing else in gpudra clears an allocation.
  So such a claim had consumers, lost its allocation, and its release was never reported.
- Why not another witness: the finalizer alone is not one — kube-controller-manager removes it
  right after clearing the allocation, and the write-back adds it *before* writing the allocation,
  so "finalizer, no allocation" is also a write-back interrupted between its two writes (its
  decision is redelivered and written: reporting a release then would free devices about to be
  written). The allocator's `c.<uid>` records and the decisions stream say "decided", never
  whether the allocation was written and then cleared, and they are the allocator's. The trace
  annotations are missing when tracing is off. The claims KV bucket exists in standalone mode
  only. The id lives on the claim itself, in both modes, and costs no write.
- Adopted allocations (kube-scheduler allocated the claim itself: no scheduling gate). When the
  intake first sees an allocation of gpudra's devices that this process did not write, on a
  claim with the finalizer (kube-scheduler adds it before the allocation, as the write-back does;
  without it "no finalizer" says nothing), it gives the claim an id of that allocation
  (`adopted_id`) before it publishes the adoption: one metadata write, resourceVersion-checked,
  conflicts re-read, never over an id that names this allocation; a claim pending again or
  deleted by the re-read gets nothing. Their clearing while nobody watched is then seen like
  gpudra's own. Which ids name the current allocation
  (`names_allocation`): `left_unreported` needs the id to differ from the mark. A claim is
  allocated again only after its earlier allocation was cleared, and a clearing somebody saw was
  marked with the earlier id when it had consumers (the live path marks before it publishes the
  release, a restart publishes and then marks), or else its release was published live, under
  the resourceVersion, by a process that remembers the id (`released`). So an allocated claim
  whose id is its mark, or that released id, gets a new one; any other id is left as it is, by
  every relist and restart. That is sound: the write-back writes its decision id before the
  allocation (so its ids, and the allocations this process wrote, are never touched); an adopted
  id is written while its allocation is seen; and an old id left unmarked (its live release
  forgotten by a restart) still differs from the mark, so the next clearing is reported under it.
  Allocations without an id (written by a claim-writer older than the id) get one too.
- At first sight of a pending claim (every (re)list and watch event of a claim this process has
  not seen allocated), a claim left unreported has its deallocation published
  (`<uid>/deallocated/<id>`) and is then marked with the id; until the mark lands the witness
  itself counts as the mark (`needs_pod`: the write-back's re-offer and `events.PodUnits` treat
  it so). Publishing first means a crash in between re-publishes the same message id at the next
  start, never loses the release. Idempotent: once marked with the id, the claim is no longer
  left unreported (a second restart, or a relist after 410, reports and marks nothing).
- The write-back reads the same witness for a decision delivered again (its ack lost, or the
  claim-writer stopped between writing and acknowledging it): a claim that carries that
  decision's id, no allocation and no finalizer was written and cleared since (`cleared_since`),
  and is not written again (that redelivery handed freed devices back to the claim).
- Still not covered: an allocation cleared in the moment between kube-controller-manager's (or
  `unreserve`'s) two writes (status cleared, finalizer still on) when the claim-writer starts is
  taken for a write-back interrupted in between (offered, its old decision written again); an
  adopted allocation whose id could not be written (refused, or conflicting ten times: logged;
  the adoption is published regardless, as the allocator must hold what kube-scheduler handed
  out) is released only when a process sees its clearing live; a clearing by hand (status
  edited) that also removes the finalizer is taken for its consumers leaving. A pod's event
  published right after the mark may still meet the old decision at an allocator that has not
  handled the deallocation yet (the allocator fences off only events *older* than its record),
  and is answered with it: the write-back finds that decision written and cleared since
  (`cleared_since`) and leaves the claim alone, as on the live path.
- An allocation cleared and made again (kube-scheduler, for the next pod) both while nobody
  watched: the claim is never seen pending, and its id is taken for the new allocation's (the
  first one's release is never reported on its own). The adoption the intake publishes names that
  id (`replaces_allocation`): the allocator's record of it holds the first allocation's devices,
  which differ, so the allocator frees them and holds the new ones. The record then carries that
  id, so the new allocation's clearing is reported under it as before.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
from collections import Counter
from typing import Any

from gpudra_api import ALLOCATION_ID_ANNOTATION
from gpudra_claim_writer.claims import FINALIZER, pod_claim_names, slim_pod, status_of
from gpudra_claim_writer.retrying import beside
from gpudra_kube.claims import ClaimStore
from gpudra_kube.consumers import Outcome, consumers_of, pod_consumer_uids, reserve, unreserve
from gpudra_kube.errors import KubeError
from gpudra_kube.informer import informer
from gpudra_kube.resources import PODS
from gpudra_kube.store import EventType, Store

log = logging.getLogger(__name__)

_DONE_PHASES = ("Succeeded", "Failed")
CONSUMERS_LEFT_ANNOTATION = "gpudra.io/consumers-left"
_UNKNOWN = "true"  # the mark of a claim whose allocation had no id
ADOPTED_PREFIX = "adopted-"  # the ids the intake gives allocations gpudra did not write


def had_consumers(claim: dict[str, Any]) -> bool:
    """The claim is reserved for at least one consumer (`status.reservedFor`)."""
    return bool(consumers_of(claim))


def consumers_left(claim: dict[str, Any]) -> bool:
    """Its consumers left it before: it is allocated again only for a pod (module docstring)."""
    return CONSUMERS_LEFT_ANNOTATION in _annotations(claim)


def with_consumers_left(claim: dict[str, Any], allocation: str = "") -> dict[str, Any] | None:
    """A copy marked as left by the consumers of allocation `allocation` (its id; "" when it had
    none); None when it carries that mark already (for "", any mark)."""
    value = allocation or _UNKNOWN
    current = _annotations(claim).get(CONSUMERS_LEFT_ANNOTATION)
    if current is not None and (current == value or not allocation):
        return None
    new = copy.deepcopy(claim)
    meta = new.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), CONSUMERS_LEFT_ANNOTATION: value}
    return new


def allocation_id(claim: dict[str, Any]) -> str:
    """The id of the claim's last allocation ("" for none): the write-back's decision id, or the
    one the intake gave an allocation it adopted (`adopted_id`)."""
    return str(_annotations(claim).get(ALLOCATION_ID_ANNOTATION) or "")


def with_allocation_id(claim: dict[str, Any], allocation: str) -> dict[str, Any] | None:
    """A copy carrying allocation id `allocation`; None when it carries it already."""
    if not allocation or allocation_id(claim) == allocation:
        return None
    new = copy.deepcopy(claim)
    meta = new.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ALLOCATION_ID_ANNOTATION: allocation}
    return new


def names_allocation(claim: dict[str, Any], released: str = "") -> bool:
    """Its allocation id is taken to name its current allocation: it carries one, not marked
    consumers-left (that allocation's release was reported), and not `released` (the id whose
    release this process reported, "" for none). Only for an allocated claim; see "Adopted
    allocations" in the module docstring for why that is sound."""
    allocation = allocation_id(claim)
    return (
        bool(allocation)
        and allocation != released
        and _annotations(claim).get(CONSUMERS_LEFT_ANNOTATION) != allocation
    )


def adopted_id(claim: dict[str, Any]) -> str:
    """The allocation id the intake gives the allocation `claim` carries, which gpudra did not
    write: `adopted-` and 16 hex digits of the hash of the claim's UID, the resourceVersion it is
    seen at and the allocation. A later allocation of the claim is first seen at a later
    resourceVersion, so it gets another id even on the very same devices; the prefix keeps it
    apart from the write-back's decision ids."""
    meta = claim.get("metadata") or {}
    allocation = (claim.get("status") or {}).get("allocation")
    seen = json.dumps(
        [meta.get("uid"), meta.get("resourceVersion"), allocation],
        sort_keys=True,
        separators=(",", ":"),
    )
    return ADOPTED_PREFIX + hashlib.sha256(seen.encode()).hexdigest()[:16]


def left_unreported(claim: dict[str, Any]) -> bool:
    """Its allocation was cleared by its last consumer leaving, and that release was never
    reported: pending, with an allocation id, without the finalizer, not marked for that id."""
    allocation = allocation_id(claim)
    return (
        cleared_since(claim, allocation)
        and _annotations(claim).get(CONSUMERS_LEFT_ANNOTATION) != allocation
    )


def cleared_since(claim: dict[str, Any], allocation: str) -> bool:
    """Allocation `allocation` (its id) was written into the claim and cleared since by its last
    consumer leaving: pending, carrying that id, without the finalizer. A delivery of that
    decision now (redelivered: its ack was lost or the claim-writer stopped before it) must not
    write it again; a write-back interrupted between its two writes still has the finalizer."""
    meta = claim.get("metadata") or {}
    return (
        bool(allocation)
        and allocation_id(claim) == allocation
        and not meta.get("deletionTimestamp")
        and not status_of(claim).get("allocation")
        and FINALIZER not in (meta.get("finalizers") or [])
    )


def needs_pod(claim: dict[str, Any]) -> bool:
    """Allocated again only for a pod that uses it: marked, or left unreported (not marked yet)."""
    return consumers_left(claim) or left_unreported(claim)


def _annotations(claim: dict[str, Any]) -> dict[str, Any]:
    annotations = (claim.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def uses(pod: dict[str, Any], name: str) -> bool:
    """The pod may run and names claim `name`."""
    return is_active(pod) and name in (pod_claim_names(pod) or ())


async def pod_waiting_for(store: Store, claim: dict[str, Any], *, may_run: bool = True) -> bool:
    """A pod names the claim (one list of its namespace's pods): one that may run (`is_active`),
    or with `may_run=False` any pod, finished ones too.

    The list is read as `slim_pod` leaves each pod, page by page (what `uses` reads): it holds a
    page of whole pods at a time, not the namespace's. It is not read from a pod informer's cache:
    in kubernetes mode no informer holds every pod (`gates` keeps gated ones only, `Consumers`
    runs standalone only), and a cache may not have the pod created just before this call yet."""
    meta = claim.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    listed = await store.list(PODS, namespace, transform=slim_pod)
    if not may_run:
        return any(name in (pod_claim_names(pod) or ()) for pod in listed.items)
    return any(uses(pod, name) for pod in listed.items)


PodKey = tuple[str, str]


def is_active(pod: dict[str, Any]) -> bool:
    """The pod may still use its claims: not being deleted and not finished."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return status_of(pod).get("phase") not in _DONE_PHASES


class Consumers:
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        namespace: str = "",
        watch_timeout: float = 10.0,
        *,
        retry_interval: float = 5.0,
    ) -> None:
        self._claims = ClaimStore(store)
        self._retry_interval = retry_interval
        # Reservations (pod key) and removals (pod uid) of (namespace, claim) that failed.
        self._failed_reserve: set[tuple[str, str, PodKey]] = set()
        self._failed_unreserve: set[tuple[str, str, str]] = set()
        self._store = store
        self._namespace = namespace or None
        self._watch_timeout = watch_timeout
        self._active: dict[PodKey, dict[str, Any]] = {}  # active pods naming claims
        # (pod uid, namespace, claim) reserved by this process: a pod's status updates need no
        # claim read each.
        self._reserved: set[tuple[str, str, str]] = set()
        self.counts: Counter[str] = Counter()

    @property
    def retrying(self) -> int:
        """Reservations and removals that failed and wait to be tried again."""
        return len(self._failed_reserve) + len(self._failed_unreserve)

    async def run(self) -> None:
        await beside(self._follow(), self._retry_interval, self.retry)

    async def retry(self) -> None:
        """Try again what failed, while it is still wanted (see the module docstring)."""
        for namespace, name, uid in sorted(self._failed_unreserve):
            if any(_uid(p) == uid for p in self._active.values()):
                # The pod is back (a relist): it uses the claim after all.
                self._failed_unreserve.discard((namespace, name, uid))
            else:
                await self._unreserve(namespace, name, uid)  # kept while it fails
        for namespace, name, key in sorted(self._failed_reserve):
            pod = self._active.get(key)
            if pod is None or name not in (pod_claim_names(pod) or ()):
                self._failed_reserve.discard((namespace, name, key))  # not wanted any more
            else:
                await self._reserve(namespace, name, pod)  # kept while it fails

    async def _follow(self) -> None:
        events = informer(
            self._store,
            PODS,
            self._namespace,
            watch_timeout=self._watch_timeout,
            transform=slim_pod,
        )
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                if event.type is EventType.SYNCED:
                    await self.reconcile()
                elif event.type is EventType.DELETED:
                    await self._gone(event.object)
                elif event.type in (EventType.ADDED, EventType.MODIFIED):
                    await self.pod_changed(event.object)

    async def pod_changed(self, pod: dict[str, Any]) -> None:
        key = _key(pod)
        if not is_active(pod):
            await self._gone(pod)
            return
        if not _uid(pod) or not pod_claim_names(pod):
            self._active.pop(key, None)
            return
        self._active[key] = pod
        for name in pod_claim_names(pod) or ():
            if (_uid(pod), key[0], name) not in self._reserved:
                await self._reserve(key[0], name, pod)

    async def claim_allocated(self, namespace: str, name: str) -> None:
        """A claim got its allocation: reserve it for the active pods that name it."""
        for (pod_ns, _), pod in list(self._active.items()):
            if pod_ns == namespace and name in (pod_claim_names(pod) or ()):
                await self._reserve(namespace, name, pod)

    async def reconcile(self) -> None:
        """Remove consumers whose pod no longer exists or has finished (see the docstring)."""
        alive = {_uid(p) for p in self._active.values()}
        try:
            claims = (await self._claims.list_claims(self._namespace)).items
        except KubeError as exc:
            log.warning("listing claims to check their consumers failed: %s", exc)
            self.counts["failed"] += 1
            return
        for claim in claims:
            meta = claim.get("metadata") or {}
            for uid in sorted(pod_consumer_uids(claim) - alive):
                await self._unreserve(str(meta.get("namespace")), str(meta.get("name")), uid)

    async def _gone(self, pod: dict[str, Any]) -> None:
        self._active.pop(_key(pod), None)
        uid = _uid(pod)
        if not uid:
            return
        for name in pod_claim_names(pod) or ():
            await self._unreserve(_key(pod)[0], name, uid)

    async def _reserve(self, namespace: str, name: str, pod: dict[str, Any]) -> None:
        try:
            outcome = await reserve(self._claims, namespace, name, pod)
        except KubeError as exc:
            log.warning(
                "reserving claim %s/%s for pod %s failed: %s", namespace, name, _key(pod), exc
            )
            self.counts["failed"] += 1
            self._failed_reserve.add((namespace, name, _key(pod)))
            return
        self._failed_reserve.discard((namespace, name, _key(pod)))
        self.counts[outcome.value] += 1
        if outcome in (Outcome.RESERVED, Outcome.ALREADY):
            self._reserved.add((_uid(pod), namespace, name))
        if outcome is Outcome.FULL:
            log.warning(
                "claim %s/%s already has 256 consumers; pod %s cannot use it",
                namespace,
                name,
                _key(pod)[1],
            )

    async def _unreserve(self, namespace: str, name: str, uid: str) -> None:
        try:
            outcome = await unreserve(self._claims, namespace, name, uid)
        except KubeError as exc:
            log.warning("removing consumer %s of claim %s/%s failed: %s", uid, namespace, name, exc)
            self.counts["failed"] += 1
            self._failed_unreserve.add((namespace, name, uid))
            return
        self._failed_unreserve.discard((namespace, name, uid))
        self.counts[outcome.value] += 1
        self._reserved.discard((uid, namespace, name))
        if outcome is Outcome.RELEASED:
            log.info("claim %s/%s: last consumer gone, allocation released", namespace, name)


def _key(pod: dict[str, Any]) -> PodKey:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")
