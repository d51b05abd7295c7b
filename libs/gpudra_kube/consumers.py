"""A claim's consumers (`status.reservedFor`), kept as kube-scheduler and kube-controller-manager
keep them — for standalone mode, where neither runs.

Promises:
- `reserve` adds a pod (`{"resource": "pods", "name", "uid"}`) to an *allocated* claim's
  `reservedFor` (kube-scheduler reserves only an allocated claim, when it binds the pod); it is
  idempotent per pod UID, refuses a claim being deleted, and never goes past the API's 256
  consumers (`Outcome.FULL`: the pod cannot use the claim, as kube-scheduler would not schedule
  it).
- `unreserve` removes a pod by UID; when that was the last consumer of an allocated claim, the
  same status write clears the allocation (kube-controller-manager's deallocation: the claim is
  free again, and the claim-writer's intake reports the release), and then the delete-protection
  finalizer is dropped — in that order, as kube-controller-manager does: a pending claim that
  carries gpudra's allocation id but no finalizer is how the claim-writer recognises, after a
  restart, a release it never reported (`gpudra_claim_writer.consumers`).
- Both re-read and re-apply on a conflict (`ClaimStore.mutate_status`), so a consumer is never
  lost to a concurrent write; a claim that is gone is `Outcome.GONE`, not an error.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any

from gpudra_kube.claims import ClaimStore, without_delete_protection
from gpudra_kube.errors import NotFoundError
from gpudra_kube.resources import RESOURCE_CLAIMS, KubeObject, status_of

MAX_CONSUMERS = 256


class Outcome(enum.Enum):
    RESERVED = "reserved"
    ALREADY = "already"  # reserve: the pod was a consumer already
    NOT_ALLOCATED = "not-allocated"  # reserve: nothing to consume yet (or being deleted)
    FULL = "full"
    REMOVED = "removed"
    RELEASED = "released"  # unreserve: the last consumer left; the allocation was cleared
    ABSENT = "absent"  # unreserve: the pod was no consumer
    GONE = "gone"


def pod_reference(pod: Mapping[str, Any]) -> dict[str, str]:
    """The `ResourceClaimConsumerReference` of a pod (core group: no `apiGroup`)."""
    meta = pod.get("metadata") or {}
    return {
        "resource": "pods",
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }


def consumers_of(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    reserved = status_of(claim).get("reservedFor")
    return [c for c in reserved if isinstance(c, dict)] if isinstance(reserved, list) else []


def pod_consumer_uids(claim: Mapping[str, Any]) -> set[str]:
    """UIDs of the pods among the claim's consumers."""
    return {
        str(c.get("uid"))
        for c in consumers_of(claim)
        if c.get("resource") == "pods" and not c.get("apiGroup")
    }


def with_consumer(claim: KubeObject, ref: Mapping[str, str]) -> tuple[Outcome, KubeObject | None]:
    """(outcome, the claim to write or None) for reserving `ref` (see the module docstring)."""
    status = status_of(claim)
    if claim.get("metadata", {}).get("deletionTimestamp") or not status.get("allocation"):
        return Outcome.NOT_ALLOCATED, None
    consumers = consumers_of(claim)
    if any(c.get("uid") == ref["uid"] for c in consumers):
        return Outcome.ALREADY, None
    if len(consumers) >= MAX_CONSUMERS:
        return Outcome.FULL, None
    new = copy.deepcopy(claim)
    new["status"]["reservedFor"] = [*consumers, dict(ref)]
    return Outcome.RESERVED, new


def without_consumer(claim: KubeObject, uid: str) -> tuple[Outcome, KubeObject | None]:
    """(outcome, the claim to write or None) for removing the consumer with `uid`."""
    consumers = consumers_of(claim)
    kept = [c for c in consumers if c.get("uid") != uid]
    if len(kept) == len(consumers):
        return Outcome.ABSENT, None
    new = copy.deepcopy(claim)
    status = new["status"]
    if kept:
        status["reservedFor"] = kept
        return Outcome.REMOVED, new
    status.pop("reservedFor", None)
    if status.pop("allocation", None) is None:
        return Outcome.REMOVED, new
    return Outcome.RELEASED, new


async def reserve(claims: ClaimStore, namespace: str, name: str, pod: Mapping[str, Any]) -> Outcome:
    """Add `pod` to the claim's consumers (see the module docstring)."""
    ref = pod_reference(pod)
    outcome = Outcome.NOT_ALLOCATED

    def apply(claim: KubeObject) -> KubeObject | None:
        nonlocal outcome
        outcome, new = with_consumer(claim, ref)
        return new

    try:
        await claims.mutate_status(RESOURCE_CLAIMS, name, namespace, apply)
    except NotFoundError:
        return Outcome.GONE
    return outcome


async def unreserve(claims: ClaimStore, namespace: str, name: str, uid: str) -> Outcome:
    """Remove the consumer `uid`; the last one leaving releases the claim (module docstring)."""
    outcome = Outcome.ABSENT

    def apply(claim: KubeObject) -> KubeObject | None:
        nonlocal outcome
        outcome, new = without_consumer(claim, uid)
        return new

    try:
        await claims.mutate_status(RESOURCE_CLAIMS, name, namespace, apply)
        if outcome is Outcome.RELEASED:
            await claims.mutate(RESOURCE_CLAIMS, name, namespace, without_delete_protection)
    except NotFoundError:
        return Outcome.GONE if outcome is not Outcome.RELEASED else outcome
    return outcome
