"""Publishing ClaimEvents: one place that builds them, names their subjects and de-duplicates.

Message ids (JetStream drops a repeat within its duplicate window): `<uid>/<generation>/pending`
for intake, `<uid>/deleted` for a deletion, `<uid>/deallocated/<resourceVersion>` for a cleared
allocation, `<uid>/external` for an adoption; a repeat outside the window is harmless because the
allocator's decisions are idempotent per claim UID.

A deletion carries no claim JSON and a deallocation carries the claim: that is how the allocator
tells "gone for good" (tombstone) from "allocation cleared, may be allocated again".

A claim of a gang (annotations `gpudra.io/gang`, `gpudra.io/gang-size`) carries `gang_id` (the
gang's name, prefixed with the namespace: gangs never span namespaces) and `gang_size`. Annotations
that do not make sense (a size that is no whole number in range, a size without a name) give
`gang_id` with `gang_size` 0, which the allocator answers as an invalid claim.

Pods (`PodUnits`, fed by the pod watch of `gates`): a pending claim that a known pod uses is
published with that pod (`pod_uid`, `pod_name`, `pod_claims` = the UIDs of the pod's gpudra claims)
so the allocator places the pod's claims together, on one node, all or none. Rules:
- Only pods that may run count (`consumers.is_active`): a finished pod, or one being deleted, uses
  its claims no more, as kube-controller-manager sees it. A claim whose consumers left
  (`gpudra.io/consumers-left`) never goes out alone, only with a pod; one whose allocation was
  cleared while nobody watched (`consumers.left_unreported`) does not go out at all until the
  intake has reported its release and marked it (its old decision would be announced again).
- A pod is *complete* once every claim it names exists (a template's claim is named only once the
  pod's `status.resourceClaimStatuses` says which claim was generated for it). Its claims go out
  only then; until then they are held, so none is allocated alone.
- A claim several pods use goes out once per generation, with its *home* pod: the oldest complete
  consumer (creationTimestamp, then name). The other consumers still list it in `pod_claims`;
  the allocator pins their claims to its node once it is allocated.
- A claim owned by a pod (`ownerReferences`, kind Pod, controller: a template's claim) waits for
  that pod; a claim no known pod uses goes out alone, as before pods were known — at once once the
  pod watch has listed every pod (`SYNCED`), and at that moment for a claim seen before (after a
  restart the claims may be listed before the pods that use them; read again then, or taken as
  it was offered when that read fails: nothing else would offer it); when a held claim's last pod
  is deleted, it goes out alone then.
- Message ids: `<uid>/<generation>/pending/<pod uid>` for a claim sent with its pod.
- An adoption names the allocation it may have taken the place of (`replaces`: an allocation id,
  `ClaimEvent.replaces_allocation`). The write-back's, for an allocation written in place of its
  decision, has the message id `<uid>/replaces/<decision's id>`.
- A claim whose allocation was cleared is offered again (`reoffer`, once the allocator confirmed
  the release) with its home pod, so it is placed beside the pod's other claims, not alone.
- A read of a claim that fails (an API error, not a 404) leaves its pod, or the claim its last
  pod left, undecided; `run` looks at them again every `retry_interval` seconds, since no event
  may come to do it (the claims exist already and are pending).
- Gangs and pods combine: `gpudra.io/gang-size` counts claims, so a gang of 2 pods with 2 claims
  each has size 4; the allocator places each pod's claims on one node.

Size: a ClaimEvent is at most `CLAIM_EVENT.max_bytes`, and a claim's JSON can be larger (the API
server stores up to 1.5 MiB). A claim whose JSON is over `MAX_CLAIM_JSON` is never published:
room is kept for the rest of the event and its headers, which the server counts too (it closes
the connection of a client that goes over). `publish_event` logs such an event and returns False
instead of raising: the error would end the loop that met it (the intake, the pod watch), and
every restart would meet the claim again. `oversized` says in advance why a claim cannot go out
(the intake writes that into the claim).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from gpudra_bus import CLAIM_EVENT, OversizedMessageError, Publisher, subjects
from gpudra_claim_writer.claims import (
    GANG_ANNOTATION,
    ClaimState,
    gang_of,
    pod_claim_names,
    ref_of,
    spec_of,
    state_of,
)
from gpudra_claim_writer.consumers import is_active, left_unreported, needs_pod
from gpudra_claim_writer.ownership import Ownership
from gpudra_claim_writer.retrying import every
from gpudra_kube.errors import KubeError, NotFoundError
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_kube.store import EventType, Store, WatchEvent
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)

Kind = claims_pb2.ClaimEvent.Kind
KubeObject = dict[str, Any]
# What a ClaimEvent and its headers may need beside the claim's JSON (refs, gang, pod and its
# claims' UIDs, trace context): the server refuses a message over its max_payload (the codec's
# limit) headers included, closing the connection.
_EVENT_ROOM = 16 * 1024
MAX_CLAIM_JSON = CLAIM_EVENT.max_bytes - _EVENT_ROOM


@dataclass(frozen=True)
class PodUnit:
    """The pod a claim is published with: its UID, `namespace/name` and gpudra claims' UIDs."""

    uid: str
    name: str
    claims: tuple[str, ...]


async def publish_event(
    publisher: Publisher,
    kind: Kind.ValueType,
    claim: dict[str, Any] | None,
    *,
    ref: claims_pb2.ClaimRef | None = None,
    msg_id: str,
    pod: PodUnit | None = None,
    replaces: str = "",
    refused: str = "",
) -> bool:
    """Publish the event; False (logged) when it is too large for the bus (module docstring).
    `replaces` and `refused` fill the fields `replaces_allocation` and `refused_allocation`."""
    ref = ref if ref is not None else ref_of(claim or {})
    event = claims_pb2.ClaimEvent(
        kind=kind, claim=ref, replaces_allocation=replaces, refused_allocation=refused
    )
    if claim is not None:
        event.claim_json = _claim_json(claim)
        if len(event.claim_json) > MAX_CLAIM_JSON:
            log.error("claim %s/%s: not published: %s", ref.namespace, ref.name, oversized(claim))
            return False
        event.gang_id, event.gang_size = gang_fields(claim, ref.namespace)
    if pod is not None:
        event.pod_uid, event.pod_name = pod.uid, pod.name
        event.pod_claims.extend(pod.claims)
    event.observed_at.GetCurrentTime()
    try:
        await publisher.publish(
            subjects.claims(ref.namespace, ref.name), event, CLAIM_EVENT, msg_id=msg_id
        )
    except OversizedMessageError as exc:
        log.error("claim %s/%s: not published: %s", ref.namespace, ref.name, exc)
        return False
    return True


def _claim_json(claim: dict[str, Any]) -> bytes:
    return json.dumps(claim, separators=(",", ":"), sort_keys=True).encode()


def oversized(claim: dict[str, Any]) -> str:
    """Why no ClaimEvent can carry `claim` (its JSON is over what one may hold), or ""."""
    size = len(_claim_json(claim))
    if size <= MAX_CLAIM_JSON:
        return ""
    return (
        f"gpudra cannot allocate this claim: it is too large ({size} bytes of JSON; "
        f"gpudra's allocator takes claims of up to {MAX_CLAIM_JSON} bytes)"
    )


def gang_fields(claim: dict[str, Any], namespace: str) -> tuple[str, int]:
    """(`gang_id`, `gang_size`) of a ClaimEvent for this claim; ("", 0) outside any gang."""
    try:
        name, size = gang_of(claim)
    except ValueError:
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        name, size = str(annotations.get(GANG_ANNOTATION) or "?"), 0
    return (f"{namespace}/{name}", size) if name else ("", 0)


def owner_pod(claim: KubeObject) -> str:
    """UID of the pod that owns the claim (a template's claim), or ""."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


@dataclass(frozen=True)
class PodEntry:
    """What the pod watch told about one pod that uses claims."""

    namespace: str
    name: str
    uid: str
    created: str
    claims: tuple[str, ...] | None  # None while a template's claim is not generated yet

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def of(pod: KubeObject) -> PodEntry | None:
        """The entry of a pod that uses claims (None for one that uses none)."""
        meta = pod.get("metadata") or {}
        if not spec_of(pod).get("resourceClaims") or not is_active(pod):
            return None  # uses no claim, or never will again (finished, being deleted)
        names = pod_claim_names(pod)
        return PodEntry(
            str(meta.get("namespace") or "default"),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
            str(meta.get("creationTimestamp") or ""),
            None if names is None else tuple(dict.fromkeys(names)),
        )


class PodUnits:
    """Publishes pending claims with their pod, per the rules of the module docstring."""

    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        ownership: Ownership,
        *,
        retry_interval: float = 5.0,
    ) -> None:
        self._store = store
        self._retry_interval = retry_interval
        # What a failed read left undecided, offered again by `run`: pods whose claims could not
        # all be read, and claims their last pod left that could not be read.
        self._unsure: set[str] = set()
        self._orphans: set[tuple[str, str]] = set()
        self._publisher = publisher
        self._ownership = ownership
        self._pods: dict[str, PodEntry] = {}  # key -> entry
        self._users: dict[tuple[str, str], set[str]] = {}  # (namespace, claim) -> pod keys
        self._sent: dict[str, int] = {}  # claim uid -> the generation it went out at
        self._early: dict[tuple[str, str], KubeObject] = {}  # offered before the pods were listed
        self.synced = False
        self.published = 0

    def consumers(self, namespace: str, name: str) -> list[PodEntry]:
        """Pods known to use the claim, oldest first (creationTimestamp, then name)."""
        found = [self._pods[key] for key in self._users.get((namespace, name), ())]
        return sorted(found, key=lambda p: (p.created, p.name))

    def _track(self, key: str, entry: PodEntry | None) -> PodEntry | None:
        """Remember `entry` under `key` (None: forget the pod); the entry it replaces."""
        before = self._pods.pop(key, None)
        if entry is None:
            self._unsure.discard(key)
        if before is not None:
            for name in before.claims or ():
                users = self._users.get((before.namespace, name), set())
                users.discard(key)
                if not users:
                    self._users.pop((before.namespace, name), None)
        if entry is not None:
            self._pods[key] = entry
            for name in entry.claims or ():
                self._users.setdefault((entry.namespace, name), set()).add(key)
        return before

    async def offer(self, claim: KubeObject) -> bool:
        """A pending gpudra claim: True when it goes with a pod (published now with it, or held
        until the pod is complete), False when no known pod uses it (publish it alone)."""
        ref = ref_of(claim)
        consumers = self.consumers(ref.namespace, ref.name)
        owner = owner_pod(claim)
        if not consumers and not owner and not self.synced:
            self._early[(ref.namespace, ref.name)] = claim  # a pod listed later may use it
            return True
        if not consumers:
            return bool(owner)  # a template's claim waits for its pod to name it
        for entry in consumers:
            await self._publish_pod(entry)
        return True

    async def pod_changed(self, event: WatchEvent) -> None:
        """The pod watch saw a pod change (or go), or listed them all: publish what is ready."""
        if event.type is EventType.SYNCED:
            await self._synced()
            return
        pod, deleted = event.object, event.type is EventType.DELETED
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        entry = None if deleted else PodEntry.of(pod)
        before = self._track(key, entry)
        if entry is not None and entry != before:
            # Only a new pod, or one whose claims changed (a template's claim generated): status
            # updates of running pods are frequent, and their claims' own news comes by `offer`.
            await self._publish_pod(entry)
        if before is not None and (entry is None or entry.claims != before.claims):
            gone = set(before.claims or ()) - set(entry.claims or () if entry else ())
            for name in sorted(gone):
                await self._orphaned(before, name)

    async def _synced(self) -> None:
        """Every pod is known now: claims offered before that and used by none go out alone."""
        self.synced = True
        early, self._early = self._early, {}
        for (namespace, name), offered in sorted(early.items()):
            if self.consumers(namespace, name):
                continue  # its pod published it (or will, once complete)
            try:
                claim = await self._store.get(RESOURCE_CLAIMS, name, namespace)
            except NotFoundError:
                continue  # gone: its deletion is the intake's news
            except KubeError as exc:
                # The reads come all at once, when the API server may well throttle them; and
                # nothing would offer this claim again. It goes out as it was offered: pending
                # then, and a decision about an older version is checked when it is written.
                log.warning(
                    "reading claim %s/%s failed (%s); offered as seen", namespace, name, exc
                )
                claim = offered
            if not owner_pod(claim):
                await self._alone(claim)

    async def _claims(self, entry: PodEntry) -> list[KubeObject] | None:
        """Every claim the pod names, or None while one is missing (the pod is not complete) or
        could not be read (then `run` looks at the pod again: no event may come to do it)."""
        if entry.claims is None:
            return None
        found = []
        for name in entry.claims:
            try:
                found.append(await self._store.get(RESOURCE_CLAIMS, name, entry.namespace))
            except NotFoundError:
                self._unsure.discard(entry.key)
                return None
            except KubeError as exc:
                log.warning("reading claim %s/%s failed: %s", entry.namespace, name, exc)
                self._unsure.add(entry.key)
                return None
        self._unsure.discard(entry.key)
        return found

    async def run(self) -> None:
        """Every `retry_interval` seconds, offer again what a failed read left undecided."""
        await every(self._retry_interval, self.retry)

    async def retry(self) -> None:
        """Look again at the pods whose claims could not be read, and at the claims their last
        pod left that could not be read (see `run`)."""
        for key in sorted(self._unsure):
            entry = self._pods.get(key)
            if entry is None:
                self._unsure.discard(key)
            else:
                await self._publish_pod(entry)
        orphans, self._orphans = self._orphans, set()
        for namespace, name in sorted(orphans):
            await self._orphan(namespace, name)

    async def _home(self, namespace: str, name: str) -> str:
        """UID of the oldest complete pod that uses the claim ("" for none)."""
        for entry in self.consumers(namespace, name):
            if await self._claims(entry) is not None:
                return entry.uid
        return ""

    async def _unit(
        self, entry: PodEntry, claims: list[KubeObject]
    ) -> tuple[PodUnit, list[KubeObject], list[claims_pb2.ClaimRef]]:
        """The pod's unit (its gpudra claims), those claims and their refs."""
        ours = [c for c in claims if await self._ownership.claim_is_ours(c)]
        refs = [ref_of(c) for c in ours]
        unit = PodUnit(entry.uid, entry.key, tuple(sorted({r.uid for r in refs if r.uid})))
        return unit, ours, refs

    async def reoffer(self, claim: KubeObject) -> bool:
        """A claim pending again after its allocation was cleared (and its release confirmed):
        published again with its home pod (the oldest complete pod using it), as a new message
        (`<uid>/<generation>/pending/<pod uid>/<resourceVersion>`), so the allocator places it
        beside the pod's other claims. False when no complete known pod uses it (publish it
        alone); True for a claim that is not pending any more (nothing to offer)."""
        ref = ref_of(claim)
        if state_of(claim) is not ClaimState.PENDING:
            return True
        for entry in self.consumers(ref.namespace, ref.name):
            claims = await self._claims(entry)
            if claims is None:
                continue
            unit, _, _ = await self._unit(entry, claims)
            if ref.uid not in unit.claims:
                continue  # not gpudra's: the caller's ownership check says so too
            await publish_event(
                self._publisher,
                Kind.KIND_PENDING,
                claim,
                msg_id=f"{ref.uid}/{ref.generation}/pending/{entry.uid}/{ref.resource_version}",
                pod=unit,
            )
            self._sent[ref.uid] = max(ref.generation, self._sent.get(ref.uid, -1))
            self.published += 1
            return True
        return False

    async def _publish_pod(self, entry: PodEntry) -> None:
        claims = await self._claims(entry)
        if claims is None:
            return
        unit, ours, refs = await self._unit(entry, claims)
        for claim, ref in zip(ours, refs, strict=True):
            if self._was_sent(ref) or state_of(claim) is not ClaimState.PENDING:
                continue
            if left_unreported(claim):
                continue  # the intake reports its release first, then marks it
            shared = len(self.consumers(ref.namespace, ref.name)) > 1
            if shared and await self._home(ref.namespace, ref.name) != entry.uid:
                continue
            await publish_event(
                self._publisher,
                Kind.KIND_PENDING,
                claim,
                msg_id=f"{ref.uid}/{ref.generation}/pending/{entry.uid}",
                pod=unit,
            )
            self._sent[ref.uid] = ref.generation
            self.published += 1

    async def _orphaned(self, pod: PodEntry, name: str) -> None:
        """`pod` no longer uses claim `name`: its other pods may take it, or it goes out alone."""
        await self._orphan(pod.namespace, name)

    async def _orphan(self, namespace: str, name: str) -> None:
        if self.consumers(namespace, name):
            for entry in self.consumers(namespace, name):
                await self._publish_pod(entry)
            return
        try:
            claim = await self._store.get(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError:
            return  # gone: its deletion is the intake's news
        except KubeError as exc:
            log.warning("reading claim %s/%s failed: %s", namespace, name, exc)
            self._orphans.add((namespace, name))  # nothing else would offer it
            return
        if not owner_pod(claim):
            await self._alone(claim)

    async def _alone(self, claim: KubeObject) -> None:
        """Publish a pending gpudra claim without a pod (once per generation)."""
        ref = ref_of(claim)
        if self._was_sent(ref) or state_of(claim) is not ClaimState.PENDING:
            return
        if needs_pod(claim):
            return  # allocated again only for a pod that names it (`consumers`)
        if not await self._ownership.claim_is_ours(claim):
            return
        await publish_event(
            self._publisher,
            Kind.KIND_PENDING,
            claim,
            msg_id=f"{ref.uid}/{ref.generation}/pending",
        )
        self._sent[ref.uid] = ref.generation
        self.published += 1

    def _was_sent(self, ref: claims_pb2.ClaimRef) -> bool:
        return self._sent.get(ref.uid, -1) >= ref.generation

    def forget(self, uid: str) -> None:
        """The claim is gone: what was sent for it need not be remembered any more."""
        self._sent.pop(uid, None)
