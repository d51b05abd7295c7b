"""Pure rules on ResourceClaim and Pod JSON: what state a claim is in and the writes that follow.

Every `with_*` / `without_*` function returns a changed deep copy, or None when the object already
is as wanted — so the caller never writes (and never triggers a watch event) for nothing.
- A claim is DELETING once it has a `deletionTimestamp`, ALLOCATED with a `status.allocation`,
  else PENDING. A field of the wrong shape (the standalone store checks no schema; an API server
  does) reads as absent: one such claim must never end a loop that reads every claim.
- The allocation is written as kube-scheduler writes it: the `resource.kubernetes.io/delete-
  protection` finalizer on the object first, then `status.allocation`.
- An unschedulable reason is kept in the annotation `gpudra.io/unschedulable` (resource.k8s.io/v1
  has no claim conditions; the annotation is what `kubectl describe` and `gpudra get` show).
- The allocation's trace: `status.allocation` is written together with the W3C trace context of
  the write (annotations `gpudra.io/traceparent` and, when there is one, `gpudra.io/tracestate`),
  so whoever acts on the allocation next (the kubelet plugin's prepare) continues the claim's trace.
- A pod's scheduling gate `gpudra.io/allocation` is lifted once every claim the pod names is known
  and each is either allocated or not gpudra's (`ungated`'s `ready`): a claim of another driver is
  allocated by kube-scheduler, which never sees a gated pod, so waiting for it would deadlock.
- Gangs: `gpudra.io/gang` names the gang a claim belongs to, `gpudra.io/gang-size` how many claims
  it has in all (`gang_of`).
- The pod watches hold pods as `slim_pod` leaves them: only `POD_FIELDS`, every field read here
  and by `gates`, `consumers` and `events.PodUnits` (about 27 times less memory than whole pods;
  `bench/pod_informer_memory.py`).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping
from typing import Any

# The annotation names are gpudra_api's (the kubelet plugin reads the same trace annotations);
# re-exported here for this service's modules.
from gpudra_api import TRACE_ANNOTATIONS as TRACE_ANNOTATIONS
from gpudra_api import TRACEPARENT_ANNOTATION as TRACEPARENT_ANNOTATION
from gpudra_api import TRACESTATE_ANNOTATION as TRACESTATE_ANNOTATION
from gpudra_api import UNSCHEDULABLE_ANNOTATION as UNSCHEDULABLE_ANNOTATION
from gpudra_kube.resources import spec_of as spec_of
from gpudra_kube.resources import status_of as status_of
from gpudrapb.v1 import claims_pb2

FINALIZER = "resource.kubernetes.io/delete-protection"
GANG_ANNOTATION = "gpudra.io/gang"
GANG_SIZE_ANNOTATION = "gpudra.io/gang-size"
MAX_GANG_SIZE = 10_000
SCHEDULING_GATE = "gpudra.io/allocation"
MAX_REASON = 4096

KubeObject = dict[str, Any]


class ClaimState(enum.Enum):
    PENDING = "pending"
    ALLOCATED = "allocated"
    DELETING = "deleting"


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else empty: a claim of the wrong shape (the standalone
    store checks no schema) is read as lacking the field, never as an error that would end the
    loop reading it, for every claim."""
    return value if isinstance(value, dict) else {}


def _meta(obj: KubeObject) -> dict[str, Any]:
    return _mapping(obj.get("metadata"))


def state_of(claim: KubeObject) -> ClaimState:
    if _meta(claim).get("deletionTimestamp"):
        return ClaimState.DELETING
    if allocation_of(claim):
        return ClaimState.ALLOCATED
    return ClaimState.PENDING


def allocation_of(claim: KubeObject) -> dict[str, Any] | None:
    allocation = status_of(claim).get("allocation")
    return allocation if isinstance(allocation, dict) else None


def ref_of(claim: KubeObject) -> claims_pb2.ClaimRef:
    meta = _meta(claim)
    return claims_pb2.ClaimRef(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON document (dicts, lists, scalars), several times cheaper than
    `copy.deepcopy`, which the write-back paid on every claim write: no memo, since a document
    decoded from JSON shares no sub-object and has no cycle. A value of any other type (never
    in a decoded document) is deep-copied as `copy.deepcopy` would."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def _changed(obj: KubeObject, change: Callable[[KubeObject], None]) -> KubeObject | None:
    new: KubeObject = json_copy(obj)
    change(new)
    return None if new == obj else new


def with_finalizer(claim: KubeObject) -> KubeObject | None:
    def add(c: KubeObject) -> None:
        finalizers = c.setdefault("metadata", {}).setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)

    return _changed(claim, add)


def without_finalizer(claim: KubeObject) -> KubeObject | None:
    def remove(c: KubeObject) -> None:
        meta = c.setdefault("metadata", {})
        kept = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if kept:
            meta["finalizers"] = kept
        else:
            meta.pop("finalizers", None)

    return _changed(claim, remove)


def with_allocation(claim: KubeObject, allocation: Mapping[str, Any]) -> KubeObject | None:
    def write(c: KubeObject) -> None:
        if not isinstance(c.get("status"), dict):
            c["status"] = {}  # of the wrong shape (`_mapping`): nothing in it to keep
        c["status"]["allocation"] = json_copy(dict(allocation))

    return _changed(claim, write)


def with_reason(claim: KubeObject, reason: str | None) -> KubeObject | None:
    """The claim with the unschedulable annotation set to `reason` (removed for None)."""

    def write(c: KubeObject) -> None:
        annotations = c.setdefault("metadata", {}).setdefault("annotations", {})
        if reason is None:
            annotations.pop(UNSCHEDULABLE_ANNOTATION, None)
        else:
            annotations[UNSCHEDULABLE_ANNOTATION] = reason[:MAX_REASON]
        if not annotations:
            c["metadata"].pop("annotations")

    return _changed(claim, write)


def with_trace(claim: KubeObject, carrier: Mapping[str, str]) -> KubeObject | None:
    """The claim annotated with the W3C headers of `carrier` (`traceparent`, `tracestate`).

    A header the carrier lacks removes its annotation: it would belong to an older trace.
    """

    def write(c: KubeObject) -> None:
        annotations = c.setdefault("metadata", {}).setdefault("annotations", {})
        for header, key in TRACE_ANNOTATIONS.items():
            value = carrier.get(header)
            if value:
                annotations[key] = value
            else:
                annotations.pop(key, None)
        if not annotations:
            c["metadata"].pop("annotations")

    return _changed(claim, write)


def chained(
    obj: KubeObject, *changes: Callable[[KubeObject], KubeObject | None]
) -> KubeObject | None:
    """`obj` after every change in turn (one write instead of several); None when none changed."""
    current = obj
    for change in changes:
        current = change(current) or current
    return None if current is obj else current


def class_names(claim: KubeObject) -> set[str]:
    """Every DeviceClass a claim's requests name (`exactly` and each `firstAvailable` entry)."""
    requests = _mapping(spec_of(claim).get("devices")).get("requests")
    names: set[str] = set()
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        alternatives = request.get("firstAvailable")
        subs = [request.get("exactly"), *(alternatives if isinstance(alternatives, list) else [])]
        for sub in subs:
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                names.add(sub["deviceClassName"])
    return names


def gang_of(claim: KubeObject) -> tuple[str, int]:
    """(gang name, gang size) from the claim's annotations; ("", 0) for a claim of no gang.

    Raises ValueError (naming the annotation) for a gang without a size, a size that is not a
    whole number from 1 to MAX_GANG_SIZE, or a size without a gang.
    """
    annotations = _meta(claim).get("annotations") or {}
    if not isinstance(annotations, dict):
        return "", 0
    name = annotations.get(GANG_ANNOTATION)
    size = annotations.get(GANG_SIZE_ANNOTATION)
    if name is None and size is None:
        return "", 0
    if not isinstance(name, str) or not name:
        raise ValueError(f"{GANG_SIZE_ANNOTATION} without a {GANG_ANNOTATION} annotation")
    try:
        count = int(str(size))
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_GANG_SIZE:
        raise ValueError(
            f"{GANG_SIZE_ANNOTATION} must be a whole number from 1 to {MAX_GANG_SIZE}, got {size!r}"
        )
    return name, count


def pod_claim_names(pod: KubeObject) -> list[str] | None:
    """Names of the ResourceClaims a pod uses; None while a template's claim is not generated.

    A template entry whose status says no claim was generated (`resourceClaimName` unset: "not
    necessary", per the API) names no claim, as kube-scheduler reads it; an entry without a
    status yet is still waiting for its claim."""
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in status_of(pod).get("resourceClaimStatuses") or []
        if isinstance(s, dict)
    }
    names = []
    for entry in spec_of(pod).get("resourceClaims") or []:
        if not isinstance(entry, dict):
            return None
        if entry.get("resourceClaimName"):
            names.append(str(entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            if entry.get("name") not in generated:
                return None
            name = generated[entry.get("name")]
            if name:
                names.append(str(name))
    return names


# Every field of a pod that the claim-writer reads from its pod watches (`gates`, `consumers`,
# `events.PodUnits`); `slim_pod` keeps these and drops the rest. A reader of a pod field that
# comes from a watch must have that field listed here (`claims_test` checks the readers).
POD_FIELDS: Mapping[str, tuple[str, ...]] = {
    "metadata": (
        "name",
        "namespace",
        "uid",
        "resourceVersion",  # the informer resumes and relists by it
        "creationTimestamp",  # `PodUnits`: a shared claim's home pod is the oldest
        "deletionTimestamp",  # `consumers.is_active`
    ),
    "spec": ("resourceClaims", "schedulingGates"),  # `pod_claim_names`, `is_gated`
    "status": ("phase", "resourceClaimStatuses"),  # `is_active`, `pod_claim_names`
}


def slim_pod(pod: KubeObject) -> KubeObject:
    """The pod with only `POD_FIELDS` (and `apiVersion`, `kind`): the informers' `transform`.

    A pod's containers, volumes, env and conditions are most of its JSON, and a pod watch holds
    every pod of the cluster. A section of the wrong shape (`metadata`, `spec` or `status` not a
    JSON object: the standalone store checks no schema) is kept as it is, so it reads exactly as
    in the whole pod. The result is for reading only: a write of a pod (the gate's lift) starts
    from the whole pod, read from the store."""
    slim: KubeObject = {k: pod[k] for k in ("apiVersion", "kind") if k in pod}
    for section, fields in POD_FIELDS.items():
        if section not in pod:
            continue
        value = pod[section]
        slim[section] = (
            {k: value[k] for k in fields if k in value} if isinstance(value, dict) else value
        )
    return slim


def is_gated(pod: KubeObject) -> bool:
    gates = spec_of(pod).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == SCHEDULING_GATE for g in gates)


def ungated(pod: KubeObject, ready: Callable[[str], bool]) -> KubeObject | None:
    """The pod without gpudra's scheduling gate, when `ready` holds for each claim it names.

    `ready(name)`: the claim exists and is allocated, or is not gpudra's to allocate. A pod that
    names no claim at all is ready at once; one whose template claims are not generated yet is not.
    """
    if not is_gated(pod):
        return None
    names = pod_claim_names(pod)
    if names is None or not all(ready(n) for n in names):
        return None

    def lift(p: KubeObject) -> None:
        spec = p["spec"]
        gates = [g for g in spec["schedulingGates"] if g.get("name") != SCHEDULING_GATE]
        if gates:
            spec["schedulingGates"] = gates
        else:
            spec.pop("schedulingGates")

    return _changed(pod, lift)
