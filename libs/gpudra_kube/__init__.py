"""gpudra's Kubernetes adapter: one `Store` interface over resource.k8s.io/v1 and core/v1 objects,
with two backends — `ApiStore` (a kube-apiserver via kubernetes-asyncio) and `KvStore` (standalone
mode: the same JSON objects in NATS JetStream KV buckets) — plus `informer` (list + watch that
resumes and relists), `ClaimStore` (the claim, slice and pod operations services need, with
conflict handling) and `EventRecorder` (Kubernetes Events, deduplicated into series).
"""

from __future__ import annotations

from gpudra_kube.api_backend import ApiStore, load_api_client
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
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeObject,
    Resource,
)
from gpudra_kube.store import EventType, ObjectList, Store, WatchEvent

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
