"""The API server's write rules, for backends that have no API server (standalone KV).

Pure functions on JSON objects, so the KV backend behaves like kube-apiserver where gpudra's
services can tell the difference: server-owned metadata (uid, creationTimestamp, generation,
deletionTimestamp) cannot be set by clients; status is written only through the status
subresource; generation grows when spec changes; create clears status.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from datetime import UTC, datetime

from gpudra_kube.errors import InvalidObjectError
from gpudra_kube.resources import KubeObject, Resource, check_scope

_SERVER_OWNED = ("uid", "creationTimestamp", "deletionTimestamp", "generation")


def now() -> str:
    """An RFC 3339 timestamp, second precision, as the API server writes them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare_create(resource: Resource, obj: KubeObject) -> KubeObject:
    """The object as stored by a create: name resolved, server fields set, status cleared."""
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        if not meta.get("name") and isinstance(meta.get("generateName"), str):
            obj = copy.deepcopy(obj)
            obj["metadata"]["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
    check_scope(resource, obj)
    new = copy.deepcopy(obj)
    new["kind"], new["apiVersion"] = resource.kind, resource.api_version
    meta = new["metadata"]
    for field in ("resourceVersion", "deletionTimestamp"):
        meta.pop(field, None)
    meta["uid"] = str(uuid.uuid4())
    meta["generation"] = 1
    meta["creationTimestamp"] = now()
    if resource.has_status:
        new.pop("status", None)
    return new


def merge_update(resource: Resource, old: KubeObject, obj: KubeObject) -> KubeObject:
    """What a PUT of `obj` over `old` stores (main resource: status and server fields kept)."""
    check_scope(resource, obj)
    new = copy.deepcopy(obj)
    new["kind"], new["apiVersion"] = resource.kind, resource.api_version
    meta = new["metadata"]
    for field in _SERVER_OWNED:
        if field in old["metadata"]:
            meta[field] = old["metadata"][field]
        else:
            meta.pop(field, None)
    if resource.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    if new.get("spec") != old.get("spec"):
        meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
    return new


def merge_status(resource: Resource, old: KubeObject, obj: KubeObject) -> KubeObject:
    """What a PUT to the status subresource stores: `old` with `obj`'s status."""
    if not resource.has_status:
        raise InvalidObjectError(f"{resource.kind} has no status subresource")
    check_scope(resource, obj)
    new = copy.deepcopy(old)
    if "status" in obj:
        new["status"] = copy.deepcopy(obj["status"])
    else:
        new.pop("status", None)
    return new


def mark_deleted(obj: KubeObject) -> KubeObject:
    """`obj` with deletionTimestamp set (a delete of an object that has finalizers)."""
    new = copy.deepcopy(obj)
    new["metadata"].setdefault("deletionTimestamp", now())
    return new


def is_gone(obj: KubeObject) -> bool:
    """True when a stored object must disappear: marked for deletion and no finalizers left."""
    meta = obj.get("metadata", {})
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")
