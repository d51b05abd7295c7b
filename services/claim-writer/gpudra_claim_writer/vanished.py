"""Kubernetes mode: claims deleted while no claim-writer watched are released all the same.

In a cluster, kube-controller-manager deallocates a claim marked for deletion once nobody uses it
and removes its delete-protection finalizer; the claim is gone without any claim-writer's help.
A running claim-writer sees the deletion (its watch, or the difference a relist after 410 yields)
and the intake publishes DELETED. One that was not running then (an upgrade, a crash, a node
drained) lists only the claims that are left at its start: nothing would ever tell the allocator,
which would hold the claim's devices for good.

Promises (`Vanished.run`: once the intake's first list is delivered, `reconcile` passes, every
`retry_interval` seconds until one completes; beside the intake, never in its way):
- it reads the allocator's claim records: the `c.<uid>` keys of the `gpudra-reservations`
  bucket, and of a record only the JSON fields `state` and `claim` (`<namespace>/<name>`), the
  allocator's format since its first version. For a record of a held allocation (`allocated`)
  whose UID is not among the claims the intake has seen, it reads the claim: when it is gone
  (404) or is another claim by now (re-created under its name, another UID), it publishes the
  DELETED event the intake would have published (message id `<uid>/deleted`, no claim JSON: the
  allocator's tombstone), and the allocator frees the devices. A claim created after the list
  is found by that read and left alone, so a live claim is never released. With a namespace
  (the claim-writer watches only that one) records of other namespaces' claims are left alone.
- an error (NATS, the API server) ends the pass, logged, and the next one tries again; a record
  that cannot be read as above is logged and skipped. Nothing is raised; `run` returns only when
  cancelled (a loop of the service that ends, ends the service).
Not in standalone mode: there the claim-writer itself removes the finalizer of a claim being
deleted, so no allocated claim disappears while it is down.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from gpudra_bus import NATS_ERRORS, BusError, Publisher
from gpudra_bus.kvlist import live_keys
from gpudra_claim_writer.claims import ref_of
from gpudra_claim_writer.events import Kind, publish_event
from gpudra_kube.errors import KubeError, NotFoundError
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_kube.store import Store
from gpudrapb.v1 import claims_pb2

log = logging.getLogger(__name__)

RECORD_PREFIX = "c."  # the allocator's claim records in the reservations bucket
_NATS = (*NATS_ERRORS, BusError)


class Vanished:
    """See the module docstring."""

    def __init__(
        self, store: Store, publisher: Publisher, reservations: KeyValue, namespace: str = ""
    ) -> None:
        self._store = store
        self._namespace = namespace  # only claims of this namespace are watched ("": all)
        self._publisher = publisher
        self._kv = reservations
        self.done = False  # a pass completed: nothing vanished before this process started
        self.released = 0

    async def run(
        self, synced: asyncio.Event, seen: Collection[str], retry_interval: float = 5.0
    ) -> None:
        """Once `synced` is set, pass until one pass completes (`seen`: the intake's `live`)."""
        await synced.wait()
        while True:
            await self.reconcile(seen)
            if self.done:
                break
            await asyncio.sleep(retry_interval)
        await asyncio.Event().wait()

    async def reconcile(self, seen: Collection[str]) -> None:
        """One pass over the allocator's records, `seen` being the UIDs of the claims listed."""
        try:
            keys = await live_keys(self._kv, RECORD_PREFIX)
            for key in keys:
                uid = key[len(RECORD_PREFIX) :]
                if uid not in seen:
                    await self._check(key, uid)
        except (*_NATS, KubeError) as exc:
            log.warning("looking for claims deleted while nobody watched failed: %s", exc)
            return
        self.done = True

    async def _check(self, key: str, uid: str) -> None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return  # removed since the listing (released meanwhile)
        try:
            doc = json.loads(entry.value or b"")
            state, claim = doc["state"], doc["claim"]
            namespace, _, name = claim.partition("/")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("claim record %s is not readable (%s); skipped", key, exc)
            return
        if state != "allocated" or not namespace or not name:
            return
        if self._namespace and namespace != self._namespace:
            return  # not among the claims this claim-writer watches: another one's to judge
        try:
            current = await self._store.get(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError:
            current = None
        if current is not None and ref_of(current).uid == uid:
            return  # created after the list: the intake has it
        log.info(
            "claim %s/%s (uid %s) was deleted while nobody watched; released", namespace, name, uid
        )
        ref = claims_pb2.ClaimRef(namespace=namespace, name=name, uid=uid)
        await publish_event(
            self._publisher, Kind.KIND_DELETED, None, ref=ref, msg_id=f"{uid}/deleted"
        )
        self.released += 1
