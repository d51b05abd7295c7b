"""The claim-writer's Kubernetes Events: what a person reads in `kubectl describe resourceclaim`
(and in `kubectl events`) about gpudra's decisions.

- An unschedulable decision: a Warning `FailedAllocation` (action `Allocate`) whose note is the
  allocator's explanation — the same text as the claim's `gpudra.io/unschedulable` annotation.
  Decisions repeat while the claim waits (every inventory or allocation change retries it); the
  recorder folds the repeats into one Event's series (`gpudra_kube.recorder`).
- A newly written allocation: a Normal `Allocated` (action `Allocate`) naming the node and devices.
- `regarding` is the claim; `related` is the pod that uses it when the claim says so: the pod
  that owns it (a claim generated from a ResourceClaimTemplate) or its first pod consumer
  (`status.reservedFor`).
Without a recorder (standalone mode: no Events API) every call is a no-op.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gpudra_kube.recorder import NORMAL, WARNING, EventRecorder, reference
from gpudra_kube.resources import RESOURCE_CLAIMS

CONTROLLER = "gpudra.io/claim-writer"
ACTION = "Allocate"
FAILED = "FailedAllocation"
ALLOCATED = "Allocated"
_DEVICES_SHOWN = 8


def related_pod(claim: Mapping[str, Any]) -> dict[str, str] | None:
    """The reference of the pod using `claim`, when the claim names one (see the docstring)."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, dict) and owner.get("kind") == "Pod" and owner.get("name"):
            return _pod_ref(namespace, owner)
    for consumer in (claim.get("status") or {}).get("reservedFor") or []:
        if (
            isinstance(consumer, dict)
            and consumer.get("resource") == "pods"
            and not consumer.get("apiGroup")
            and consumer.get("name")
        ):
            return _pod_ref(namespace, consumer)
    return None


def _claim_ref(claim: Mapping[str, Any]) -> dict[str, str]:
    return reference(
        {
            **claim,
            "apiVersion": claim.get("apiVersion") or RESOURCE_CLAIMS.api_version,
            "kind": claim.get("kind") or RESOURCE_CLAIMS.kind,
        }
    )


def _pod_ref(namespace: str, ref: Mapping[str, Any]) -> dict[str, str]:
    out = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": str(ref["name"])}
    if ref.get("uid"):
        out["uid"] = str(ref["uid"])
    return {k: v for k, v in out.items() if v}


def allocation_note(allocation: Mapping[str, Any]) -> str:
    """ "allocated 2 device(s) on node n1: pool/gpu-0, pool/gpu-1"."""
    results = [
        r for r in (allocation.get("devices") or {}).get("results") or [] if isinstance(r, dict)
    ]
    names = [f"{r.get('pool', '?')}/{r.get('device', '?')}" for r in results]
    shown = ", ".join(names[:_DEVICES_SHOWN])
    if len(names) > _DEVICES_SHOWN:
        shown += f", … ({len(names) - _DEVICES_SHOWN} more)"
    node = allocation_node(allocation)
    where = f" on node {node}" if node else ""
    return f"allocated {len(names)} device(s){where}" + (f": {shown}" if shown else "")


def allocation_node(allocation: Mapping[str, Any]) -> str:
    """The node an allocation's `nodeSelector` pins (`metadata.name In [node]`), else ""."""
    selector = allocation.get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in (term or {}).get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and values:
                return str(values[0])
    return ""


class ClaimEvents:
    """See the module docstring."""

    def __init__(self, recorder: EventRecorder | None) -> None:
        self.recorder = recorder

    def unschedulable(self, claim: Mapping[str, Any], reason: str) -> None:
        self._record(claim, WARNING, FAILED, reason or "cannot allocate")

    def allocated(self, claim: Mapping[str, Any], allocation: Mapping[str, Any]) -> None:
        self._record(claim, NORMAL, ALLOCATED, allocation_note(allocation))

    def _record(self, claim: Mapping[str, Any], type_: str, reason: str, note: str) -> None:
        """An allocation event about `claim`, related to the pod that waits for it."""
        if self.recorder is None:
            return
        self.recorder.record(
            _claim_ref(claim),
            type=type_,
            reason=reason,
            action=ACTION,
            note=note,
            related=related_pod(claim),
        )

    async def run(self) -> None:
        """Write what was recorded (the recorder's loop); without a recorder, wait forever."""
        if self.recorder is None:
            await asyncio.Event().wait()
        else:
            await self.recorder.run()
