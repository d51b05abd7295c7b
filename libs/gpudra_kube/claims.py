"""`ClaimStore`: the claim, template, pod and slice operations gpudra's services need, on any
`Store` backend, with optimistic-concurrency handled the way kube-scheduler does it.

Promises:
- `mutate` / `mutate_status` apply a function to the latest object and write it with its
  resourceVersion; on `ConflictError` they re-read and apply the function again (up to
  `conflict_attempts`), so a write is never based on a stale read and never overwrites blindly.
- `write_allocation` adds the `resource.kubernetes.io/delete-protection` finalizer, then writes
  `status.allocation`; it is idempotent (the same allocation again is a no-op), refuses a claim whose
  UID differs (deleted and re-created: `NotFoundError`), and raises `AlreadyAllocatedError` when
  the claim carries a different allocation — the caller re-decides.
- `apply_slice` creates or replaces a ResourceSlice (create-or-update), `delete_slice` is
  idempotent.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from gpudra_kube.errors import (
    AlreadyAllocatedError,
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
)
from gpudra_kube.informer import informer
from gpudra_kube.resources import (
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeObject,
    Resource,
    name_of,
)
from gpudra_kube.store import ObjectList, Store, WatchEvent

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
SCHEDULING_GATE = "gpudra.io/allocation"

# A mutation returns the changed object, or None for "nothing to change" (no write happens).
Mutation = Callable[[KubeObject], KubeObject | None]


def without_delete_protection(claim: KubeObject) -> KubeObject | None:
    """A `Mutation`: the claim without the delete-protection finalizer (None: it has none)."""
    finalizers = claim["metadata"].get("finalizers") or []
    if DELETE_PROTECTION_FINALIZER not in finalizers:
        return None
    claim["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
    return claim


class ClaimStore:
    """See the module docstring."""

    def __init__(self, store: Store, *, conflict_attempts: int = 5) -> None:
        self.store = store
        self._attempts = max(1, conflict_attempts)

    # -- generic read-modify-write ---------------------------------------------------------------

    async def _mutate(
        self, resource: Resource, name: str, namespace: str | None, fn: Mutation, status: bool
    ) -> KubeObject:
        last: ConflictError | None = None
        for _ in range(self._attempts):
            current = await self.store.get(resource, name, namespace)
            changed = fn(copy.deepcopy(current))
            if changed is None:
                return current
            try:
                if status:
                    return await self.store.replace_status(resource, changed)
                return await self.store.replace(resource, changed)
            except ConflictError as exc:
                last = exc
        assert last is not None
        raise last

    async def mutate(
        self, resource: Resource, name: str, namespace: str | None, fn: Mutation
    ) -> KubeObject:
        """Apply `fn` to the latest object (not its status) and write it; see the docstring."""
        return await self._mutate(resource, name, namespace, fn, status=False)

    async def mutate_status(
        self, resource: Resource, name: str, namespace: str | None, fn: Mutation
    ) -> KubeObject:
        """As `mutate`, through the status subresource."""
        return await self._mutate(resource, name, namespace, fn, status=True)

    # -- claims ----------------------------------------------------------------------------------

    async def list_claims(self, namespace: str | None = None) -> ObjectList:
        return await self.store.list(RESOURCE_CLAIMS, namespace)

    def watch_claims(self, namespace: str | None = None) -> AsyncIterator[WatchEvent]:
        """Every claim change, forever, surviving watch breaks and 410s (see `informer`)."""
        return informer(self.store, RESOURCE_CLAIMS, namespace)

    async def get_claim(self, namespace: str, name: str) -> KubeObject:
        return await self.store.get(RESOURCE_CLAIMS, name, namespace)

    async def create_claim(self, claim: KubeObject) -> KubeObject:
        return await self.store.create(RESOURCE_CLAIMS, claim)

    async def delete_claim(self, namespace: str, name: str) -> bool:
        """Delete (or mark for deletion, with finalizers); False when it did not exist."""
        try:
            await self.store.delete(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError:
            return False
        return True

    async def write_allocation(
        self, namespace: str, name: str, *, uid: str, allocation: dict[str, Any]
    ) -> KubeObject:
        """Finalizer, then `status.allocation` (see the module docstring)."""

        def check(claim: KubeObject) -> None:
            if claim["metadata"].get("uid") != uid:
                raise NotFoundError(f"claim {namespace}/{name} with uid {uid} no longer exists")
            if claim["metadata"].get("deletionTimestamp"):
                raise NotFoundError(f"claim {namespace}/{name} is being deleted")
            existing = (claim.get("status") or {}).get("allocation")
            if existing is not None and existing != allocation:
                raise AlreadyAllocatedError(
                    f"claim {namespace}/{name} already has a different allocation"
                )

        def add_finalizer(claim: KubeObject) -> KubeObject | None:
            check(claim)
            finalizers = claim["metadata"].setdefault("finalizers", [])
            if DELETE_PROTECTION_FINALIZER in finalizers:
                return None
            finalizers.append(DELETE_PROTECTION_FINALIZER)
            return claim

        def set_allocation(claim: KubeObject) -> KubeObject | None:
            check(claim)
            status = claim.setdefault("status", {}) or {}
            claim["status"] = status
            if status.get("allocation") == allocation:
                return None
            status["allocation"] = copy.deepcopy(allocation)
            return claim

        await self.mutate(RESOURCE_CLAIMS, name, namespace, add_finalizer)
        return await self.mutate_status(RESOURCE_CLAIMS, name, namespace, set_allocation)

    async def release_allocation(self, namespace: str, name: str, *, uid: str) -> KubeObject:
        """Clear `status.allocation` and `reservedFor`, then drop the delete-protection finalizer
        (what kube-controller-manager does when a claim has no consumers left; standalone mode)."""

        def clear(claim: KubeObject) -> KubeObject | None:
            if claim["metadata"].get("uid") != uid:
                raise NotFoundError(f"claim {namespace}/{name} with uid {uid} no longer exists")
            status = claim.get("status") or {}
            if not status.get("allocation") and not status.get("reservedFor"):
                return None
            status.pop("allocation", None)
            status.pop("reservedFor", None)
            claim["status"] = status
            return claim

        released = await self.mutate_status(RESOURCE_CLAIMS, name, namespace, clear)
        try:
            return await self.mutate(RESOURCE_CLAIMS, name, namespace, without_delete_protection)
        except NotFoundError:  # that was the last finalizer of a claim being deleted
            return released

    async def add_consumer(self, namespace: str, name: str, pod: KubeObject) -> KubeObject:
        """Add `pod` to `status.reservedFor` (standalone mode; kube-scheduler does it in a
        cluster). Idempotent; at most 256 consumers, as the API allows."""
        ref = {"resource": "pods", "name": name_of(pod), "uid": pod["metadata"].get("uid", "")}

        def reserve(claim: KubeObject) -> KubeObject | None:
            status = claim.get("status") or {}
            consumers = status.setdefault("reservedFor", [])
            if any(c.get("uid") == ref["uid"] for c in consumers):
                return None
            if len(consumers) >= 256:
                raise InvalidObjectError(f"claim {namespace}/{name} already has 256 consumers")
            consumers.append(ref)
            claim["status"] = status
            return claim

        return await self.mutate_status(RESOURCE_CLAIMS, name, namespace, reserve)

    # -- templates and pods ----------------------------------------------------------------------

    async def get_template(self, namespace: str, name: str) -> KubeObject:
        return await self.store.get(RESOURCE_CLAIM_TEMPLATES, name, namespace)

    async def get_pod(self, namespace: str, name: str) -> KubeObject:
        return await self.store.get(PODS, name, namespace)

    async def remove_scheduling_gate(
        self, namespace: str, pod: str, gate: str = SCHEDULING_GATE
    ) -> bool:
        """Lift `gate` from the pod; False when it was not there (already lifted)."""
        removed = False

        def lift(obj: KubeObject) -> KubeObject | None:
            nonlocal removed
            gates = obj.get("spec", {}).get("schedulingGates") or []
            kept = [g for g in gates if g.get("name") != gate]
            if len(kept) == len(gates):
                removed = False
                return None
            obj["spec"]["schedulingGates"] = kept
            removed = True
            return obj

        await self.mutate(PODS, pod, namespace, lift)
        return removed

    # -- slices ----------------------------------------------------------------------------------

    async def list_slices(self, driver: str | None = None) -> list[KubeObject]:
        items = (await self.store.list(RESOURCE_SLICES)).items
        if driver is None:
            return items
        return [s for s in items if s.get("spec", {}).get("driver") == driver]

    async def apply_slice(self, slice_obj: KubeObject) -> KubeObject:
        """Create the slice, or replace the existing one's spec, labels and annotations."""
        try:
            return await self.store.create(RESOURCE_SLICES, slice_obj)
        except AlreadyExistsError:
            pass

        def overwrite(current: KubeObject) -> KubeObject | None:
            wanted_meta = slice_obj.get("metadata", {})
            same = current.get("spec") == slice_obj.get("spec") and all(
                current["metadata"].get(k) == wanted_meta.get(k) for k in ("labels", "annotations")
            )
            if same:
                return None
            current["spec"] = copy.deepcopy(slice_obj.get("spec"))
            for k in ("labels", "annotations", "ownerReferences"):
                if k in wanted_meta:
                    current["metadata"][k] = copy.deepcopy(wanted_meta[k])
                else:
                    current["metadata"].pop(k, None)
            return current

        return await self.mutate(RESOURCE_SLICES, name_of(slice_obj), None, overwrite)

    async def delete_slice(self, name: str) -> bool:
        """Delete the slice; False when it did not exist."""
        try:
            await self.store.delete(RESOURCE_SLICES, name)
        except NotFoundError:
            return False
        return True
