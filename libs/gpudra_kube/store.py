"""The one interface both backends implement: `Store`, a resource-generic Kubernetes client.

Promises every backend keeps (tests run the same scenarios against both):
- Objects in and out are `resource.k8s.io/v1` / `v1` JSON dicts with `metadata.resourceVersion`.
- `replace` / `replace_status` with a `resourceVersion` succeed only if the stored object still has
  it, else `ConflictError`; `replace` never changes `status` and `replace_status` changes only
  `status` (the status-subresource rules of the API server).
- `watch` yields the changes after `resource_version`, plus BOOKMARK events that only advance the
  version; it ends after `timeout` seconds or when the server closes it, and raises `GoneError`
  when the version is too old (the caller relists: see `informer`).
- `delete` of an object with finalizers only marks it (`deletionTimestamp`); the object goes away
  when an update removes the last finalizer.
- `list(..., transform=f)` returns `f` of each object, applied as the objects arrive: a list
  holds at most one page (API server) or one object (KV) of whole objects at a time, however
  many it returns — what lets a transforming informer relist 100k pods without holding them
  whole (client-go's reflector does the same).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from gpudra_kube.resources import KubeObject, Resource

# An informer's `transform` (client-go's `SetTransform`): it may change the object it is handed.
Transform = Callable[[KubeObject], KubeObject]


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    # Emitted by the informer (never by a backend) once a (re)list has been fully delivered.
    SYNCED = "SYNCED"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: KubeObject
    resource_version: str = ""


@dataclass(frozen=True)
class ObjectList:
    items: list[KubeObject] = field(default_factory=list)
    resource_version: str = ""


class Store(Protocol):
    """CRUD + watch on Kubernetes resources (API server or standalone KV)."""

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        """All objects (of one namespace, or all), each as `transform` leaves it (see the module
        docstring), and the version to watch from."""
        ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout: float = 300.0,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version` (see the module docstring)."""
        ...

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> KubeObject: ...

    async def create(self, resource: Resource, obj: KubeObject) -> KubeObject: ...

    async def replace(self, resource: Resource, obj: KubeObject) -> KubeObject: ...

    async def replace_status(self, resource: Resource, obj: KubeObject) -> KubeObject: ...

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None: ...

    async def close(self) -> None: ...
