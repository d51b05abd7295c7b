"""Pods' scheduling gate `gpudra.io/allocation`: lifted once all of gpudra's claims are allocated.

kube-scheduler leaves a gated pod alone, so it cannot race the allocator; once the gate is lifted
it schedules the pod where the claims' `allocation.nodeSelector` says (it honours existing
allocations). Promises: the gate is lifted once every claim the pod names exists and is either
allocated or not gpudra's (`Ownership`) — a pod with no gpudra claim at all is let go at once, and
another driver's claim, which kube-scheduler allocates only after the gate is gone, is never waited
for (that would deadlock the pod). Other gates stay; a conflicting pod update re-reads and decides
again. Triggers: a gated pod appearing or changing (`run`), and a claim appearing, changing or
getting allocated (`claim_changed`, which looks only at the gated pods the pod informer has seen).
An API error never escapes (it would end the claim-writer's loops): a check that an error cut
short (the lift's write, the re-read after a conflict, a claim or pod read failing) is tried
again every `retry_interval` seconds while `run` runs, until it settles or the pod is deleted,
because nothing else would trigger it: a gated pod gets no status updates, and its allocated
claims do not change until it is scheduled. A write the API refuses for good (403, 422) is
logged, not retried.
Every pod event (gated or not, deleted too) is also handed to `on_pod`: the pod watch is what tells
`events.PodUnits` which claims belong together.
The pod informer holds, and hands on, each pod as `claims.slim_pod` leaves it (only the fields
gpudra reads: with 100k pods whole ones take gigabytes); a lift reads the whole pod and writes
that, never the watch's copy (one more read per lift).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpudra_claim_writer.claims import (
    ClaimState,
    is_gated,
    pod_claim_names,
    slim_pod,
    state_of,
    ungated,
)
from gpudra_claim_writer.ownership import Ownership
from gpudra_claim_writer.retrying import beside
from gpudra_kube.errors import KubeError, KubeRetryableError, NotFoundError
from gpudra_kube.informer import informer
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS
from gpudra_kube.store import EventType, Store, WatchEvent

log = logging.getLogger(__name__)

_MAX_TRIES = 10

OnPod = Callable[[WatchEvent], Awaitable[None]]  # every pod event, SYNCED included


class Gates:
    def __init__(
        self,
        store: Store,
        namespace: str = "",
        watch_timeout: float = 10.0,
        ownership: Ownership | None = None,
        on_pod: OnPod | None = None,
        retry_interval: float = 5.0,
    ) -> None:
        self._store = store
        self._retry_interval = retry_interval
        self.retrying: set[tuple[str, str]] = set()  # pods whose check an error cut short
        self._on_pod = on_pod
        self._ownership = ownership or Ownership(store)
        self._watch_timeout = watch_timeout
        self._namespace = namespace or None
        self.lifted = 0
        self._gated: dict[tuple[str, str], set[str]] = {}

    async def run(self) -> None:
        await beside(self._follow(), self._retry_interval, self.retry)

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
                if self._on_pod is not None and event.type is not EventType.BOOKMARK:
                    try:
                        await self._on_pod(event)
                    except KubeError as exc:
                        log.warning("pod %s: %s", _key(event.object), exc)
                if event.type in (EventType.SYNCED, EventType.BOOKMARK):
                    continue
                if event.type is EventType.DELETED:
                    self._gated.pop(_key(event.object), None)
                    self.retrying.discard(_key(event.object))
                elif self.seen(event.object):
                    await self.check_pod(event.object, whole=False)
                else:
                    self.retrying.discard(_key(event.object))

    async def retry(self) -> None:
        """Check again the pods whose check failed (`run` does, every `retry_interval` s)."""
        for namespace, name in sorted(self.retrying):
            try:
                pod = await self._store.get(PODS, name, namespace)
            except NotFoundError:
                self.retrying.discard((namespace, name))
                continue
            except KubeError as exc:
                log.warning("reading pod %s/%s failed: %s", namespace, name, exc)
                continue
            await self.check_pod(pod)

    def seen(self, pod: dict[str, Any]) -> bool:
        """Note a pod the watch reported (its claims, while gated); True when it is gated."""
        key = _key(pod)
        if not is_gated(pod):
            self._gated.pop(key, None)
            return False
        self._gated[key] = set(pod_claim_names(pod) or ())
        return True

    async def claim_changed(self, namespace: str, name: str) -> None:
        """A claim appeared, changed or got its allocation: look at the gated pods using it."""
        for (pod_ns, pod_name), claims in list(self._gated.items()):
            if pod_ns != namespace or name not in claims:
                continue
            try:
                pod = await self._store.get(PODS, pod_name, pod_ns)
            except NotFoundError:
                continue  # its deletion is the pod watch's news
            except KubeError as exc:
                log.warning("reading pod %s/%s failed: %s", pod_ns, pod_name, exc)
                self.retrying.add((pod_ns, pod_name))
                continue
            await self.check_pod(pod)

    async def check_pod(self, pod: dict[str, Any], *, whole: bool = True) -> None:
        """Lift the pod's gate when its claims are ready; never raises a `KubeError`: a check an
        error cut short is tried again later (`retrying`). `whole=False`: `pod` is the watch's
        slim copy (`slim_pod`), read again before the lift writes it."""
        if await self._settle(pod, whole):
            self.retrying.discard(_key(pod))
        else:
            self.retrying.add(_key(pod))

    async def _settle(self, pod: dict[str, Any], whole: bool) -> bool:
        """Lift the gate if it is time; False when an error left that undecided."""
        namespace, name = _key(pod)
        current = pod
        for _ in range(_MAX_TRIES):
            ready: set[str] = set()
            unsure = False
            for claim in pod_claim_names(current) or ():
                answer = await self._ready(namespace, claim)
                if answer:
                    ready.add(claim)
                unsure = unsure or answer is None
            updated = ungated(current, ready.__contains__)
            if updated is None:
                return not (unsure and is_gated(current))
            if whole and await self._lift(updated):
                return True
            # The watch's slim copy is never written back (it would drop the containers); a
            # conflict or a passing error is decided again on the pod as it is now.
            whole = True
            try:
                current = await self._store.get(PODS, name, namespace)
            except NotFoundError:
                return True
            except KubeError as exc:
                log.warning("reading pod %s/%s failed: %s", namespace, name, exc)
                return False
        log.warning("pod %s/%s: gate not lifted after %d tries", namespace, name, _MAX_TRIES)
        return False

    async def _lift(self, updated: dict[str, Any]) -> bool:
        """Write the pod without the gate; False when it is worth deciding again (a conflict, or
        the API server away for now), True when done (lifted, the pod gone, refused for good)."""
        namespace, name = _key(updated)
        try:
            await self._store.replace(PODS, updated)
        except NotFoundError:
            return True
        except KubeRetryableError as exc:
            log.info("lifting the gate of pod %s/%s: %s; re-reading", namespace, name, exc)
            return False
        except KubeError as exc:
            log.warning("lifting the gate of pod %s/%s failed: %s", namespace, name, exc)
            return True  # refused for good: trying again changes nothing
        self.lifted += 1
        log.info("pod %s/%s: scheduling gate lifted", namespace, name)
        return True

    async def _ready(self, namespace: str, name: str) -> bool | None:
        """The claim exists and is allocated, or is not gpudra's (kube-scheduler allocates it);
        None when it could not be read now."""
        try:
            claim = await self._store.get(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError:
            return False  # its creation is the intake's news, and calls `claim_changed`
        except KubeError as exc:
            log.warning("reading claim %s/%s failed: %s", namespace, name, exc)
            return None
        state = state_of(claim)
        if state is ClaimState.ALLOCATED:
            return True
        return state is ClaimState.PENDING and not await self._ownership.claim_is_ours(claim)


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")
