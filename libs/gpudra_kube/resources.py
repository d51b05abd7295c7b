"""The Kubernetes resources gpudra reads and writes, and helpers on their JSON objects.

Objects travel as plain JSON dicts (`KubeObject`), exactly as the API serves them: the Kubernetes
JSON is the source of truth, and the typed layer above (gpudra_api) parses what it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpudra_bus.errors import InvalidSubjectError
from gpudra_bus.subjects import validate_namespace, validate_object_name
from gpudra_kube.errors import InvalidObjectError

KubeObject = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One resource type: where it lives in the API and how kubernetes-asyncio names it."""

    kind: str
    api_version: str
    plural: str
    snake: str  # kubernetes-asyncio method infix, e.g. "resource_claim"
    api_class: str  # kubernetes-asyncio API class, e.g. "ResourceV1Api"
    namespaced: bool
    has_status: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection (or one object) — used by the fake API and logs."""
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return base if name is None else f"{base}/{name}"


RESOURCE_CLAIMS = Resource(
    "ResourceClaim", "resource.k8s.io/v1", "resourceclaims", "resource_claim", "ResourceV1Api",
    namespaced=True, has_status=True,
)  # fmt: skip
RESOURCE_CLAIM_TEMPLATES = Resource(
    "ResourceClaimTemplate", "resource.k8s.io/v1", "resourceclaimtemplates",
    "resource_claim_template", "ResourceV1Api", namespaced=True, has_status=False,
)  # fmt: skip
RESOURCE_SLICES = Resource(
    "ResourceSlice", "resource.k8s.io/v1", "resourceslices", "resource_slice", "ResourceV1Api",
    namespaced=False, has_status=False,
)  # fmt: skip
DEVICE_CLASSES = Resource(
    "DeviceClass", "resource.k8s.io/v1", "deviceclasses", "device_class", "ResourceV1Api",
    namespaced=False, has_status=False,
)  # fmt: skip
PODS = Resource(
    "Pod", "v1", "pods", "pod", "CoreV1Api", namespaced=True, has_status=True,
)  # fmt: skip
# Read only, in kubernetes mode: the inventory makes each Node the owner of its pool's slices.
NODES = Resource(
    "Node", "v1", "nodes", "node", "CoreV1Api", namespaced=False, has_status=True,
)  # fmt: skip
# Written only in kubernetes mode (see `recorder`); standalone mode has no events bucket.
EVENTS = Resource(
    "Event", "events.k8s.io/v1", "events", "event", "EventsV1Api", namespaced=True,
    has_status=False,
)  # fmt: skip

ALL_RESOURCES: tuple[Resource, ...] = (
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    PODS,
    NODES,
    EVENTS,
)


def metadata(obj: KubeObject) -> dict[str, Any]:
    """`obj.metadata`, or `InvalidObjectError` when the object has none."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        raise InvalidObjectError("object has no metadata")
    return meta


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj.spec`, empty when absent or not a JSON object: the standalone store checks no schema,
    and one object of the wrong shape must read as lacking the field, never as an error that
    ends a loop reading every object."""
    return _object(obj.get("spec"))


def status_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj.status`, empty when absent or not a JSON object (see `spec_of`)."""
    return _object(obj.get("status"))


def name_of(obj: KubeObject) -> str:
    name = metadata(obj).get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObjectError("object has no metadata.name")
    return name


def namespace_of(obj: KubeObject) -> str | None:
    ns = metadata(obj).get("namespace")
    return ns if isinstance(ns, str) and ns else None


def resource_version_of(obj: KubeObject) -> str:
    rv = metadata(obj).get("resourceVersion")
    return rv if isinstance(rv, str) else ""


def key_of(obj: KubeObject) -> tuple[str, str]:
    """(namespace or "", name): the identity of an object within its resource."""
    return namespace_of(obj) or "", name_of(obj)


def check_name(resource: Resource, name: str, namespace: str | None) -> None:
    """Reject names that are not DNS-1123 subdomains, and a missing or malformed namespace of a
    namespaced resource (empty names would turn a get into a list; `/` or NATS wildcards would
    address something else)."""
    try:
        validate_object_name(name)
        if resource.namespaced:
            if not namespace:
                raise InvalidObjectError(f"{resource.kind} is namespaced: give a namespace")
            validate_namespace(namespace)
    except InvalidSubjectError as exc:
        raise InvalidObjectError(f"{resource.kind}: {exc}") from exc


def check_scope(resource: Resource, obj: KubeObject) -> None:
    """Reject objects of the wrong kind, or a namespace on a cluster-scoped object (or none)."""
    if not isinstance(obj, dict):
        raise InvalidObjectError(f"{resource.kind} must be a JSON object")
    if obj.get("kind", resource.kind) != resource.kind:
        raise InvalidObjectError(f"expected a {resource.kind}, got {obj.get('kind')!r}")
    if obj.get("apiVersion", resource.api_version) != resource.api_version:
        raise InvalidObjectError(
            f"expected apiVersion {resource.api_version}, got {obj.get('apiVersion')!r}"
        )
    name_of(obj)
    if resource.namespaced and namespace_of(obj) is None:
        raise InvalidObjectError(f"{resource.kind} {name_of(obj)} needs metadata.namespace")
    if not resource.namespaced and namespace_of(obj) is not None:
        raise InvalidObjectError(f"{resource.kind} is cluster-scoped; drop metadata.namespace")
