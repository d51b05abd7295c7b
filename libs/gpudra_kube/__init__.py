"""gpudra's Kubernetes adapter: one `Store` interface over resource.k8s.io/v1 and core/v1 objects,
with two backends — `ApiStore` (a kube-apiserver via kubernetes-asyncio) and `KvStore` (standalone
mode: the same JSON objects in NATS JetStream KV buckets) — plus `informer` (list + watch that
resumes and relists), `ClaimStore` (the claim, slice and pod operations services need, with
conflict handling) and `EventRecorder` (Kubernetes Events, deduplicated into series).

Importing the package (or any module in it) does not import kubernetes-asyncio (well over half a
second): `ApiStore` and `load_api_client` are loaded from `gpudra_kube.api_backend` on first
access (PEP 562), so standalone users (KV backend only) never pay for the API client. Type
checkers see them as ordinary imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gpudra_kube.claims import (
    DELETE_PROTECTION_FINALIZER,
    SCHEDULING_GATE,
    ClaimStore,
    Mutation,
)
from gpudra_kube.errors import (
    AlreadyAllocatedError,
    AlreadyExistsError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidObjectError,
    KubeError,
    KubePermanentError,
    KubeRetryableError,
    NotFoundError,
    UnavailableError,
)
from gpudra_kube.informer import informer
from gpudra_kube.kv_backend import BUCKETS, KvStore, object_key
from gpudra_kube.recorder import EventRecorder
from gpudra_kube.resources import (
    ALL_RESOURCES,
    DEVICE_CLASSES,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeObject,
    Resource,
)
from gpudra_kube.store import EventType, ObjectList, Store, WatchEvent

# Names loaded on first access, by the module that defines them.
_LAZY = {"ApiStore": "gpudra_kube.api_backend", "load_api_client": "gpudra_kube.api_backend"}

if TYPE_CHECKING:
    # Type checkers see plain imports, and no module `__getattr__`: a misspelt name stays an error.
    from gpudra_kube.api_backend import ApiStore, load_api_client
else:

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


__all__ = [
    "ALL_RESOURCES",
    "AlreadyAllocatedError",
    "AlreadyExistsError",
    "ApiStore",
    "BUCKETS",
    "ClaimStore",
    "ConflictError",
    "DELETE_PROTECTION_FINALIZER",
    "DEVICE_CLASSES",
    "EVENTS",
    "EventRecorder",
    "EventType",
    "ForbiddenError",
    "GoneError",
    "InvalidObjectError",
    "KubeError",
    "KubeObject",
    "KubePermanentError",
    "KubeRetryableError",
    "KvStore",
    "Mutation",
    "NODES",
    "NotFoundError",
    "ObjectList",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "Resource",
    "SCHEDULING_GATE",
    "Store",
    "UnavailableError",
    "WatchEvent",
    "informer",
    "load_api_client",
    "object_key",
]
