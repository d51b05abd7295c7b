"""What the claim-writer's `/statusz` serves: its mode, watches and counters, as a JSON object.

Promises: nothing here does work of its own. `WatchBook.store(store, name, resource)` hands a
loop the same `Store` with its list and watch of `resource` observed: each list (the start, and a
relist after 410 Gone: a resync) and each watch event only updates a few fields; every other call
goes straight through (the write-back keeps the bare store: it asks it for what its watch saw).
`ClaimWriterStatus()` reads those and the counters the loops keep anyway. The shape is stable
(every key always present, null where a loop does not run in this mode; see `deploy/README.md`):

- `mode`, `ready`;
- `watches`: per loop (`intake`, `gates`, `consumers`, `classes`; only those running in this mode)
  `resource`, `watching` (a watch is open now), `resourceVersion` (the last one seen: a list, an
  event or a bookmark), `lists` (1 + the relists), `lastListAt`, `watchesOpened`, `events`
  (bookmarks included) and `lastEventAt` (RFC 3339 UTC or null);
- `intake`: events published by kind (`pending`, `with-pod`, `deleted`, `deallocated`,
  `released-unseen` (deallocations found at a (re)list, see `consumers`), `external`, `foreign`,
  `deleting-in-use` (claims marked for deletion left alone while a consumer still holds them,
  kubernetes mode),
  `waiting`, `oversized` (pending claims too large for a ClaimEvent, refused with a reason),
  `finalizers-retrying` (now: deleted claims whose finalizer removal an API error cut short,
  tried again every few seconds)) and
  `conflicts` (its finalizer/annotation writes refused by a
  changed resourceVersion, then read again);
- `writeback`: `allocated` (allocations written, repeats of a decision included), `conflicts`
  (writes refused by a changed resourceVersion, then read and decided again), `unschedulable`
  (reasons written), `released`, `stale`, `foreign` (decisions found with another allocation
  written in their place, sent back to the allocator to adopt), `waiting`, `cleared` (decisions delivered
  again after their allocation was written and cleared since: not written again), `forbidden`
  (writes the API refused to the claim-writer itself, 401/403, tried again with a backoff: fix its
  RBAC or credentials), `refused` (allocations the API refused for good, 422: the reason is in the
  claim, the decision dead-lettered);
- `events`: Kubernetes Events `created`, `updated`, `dropped`, `failed` (null without a recorder);
- `classes`: DeviceClasses mirrored: `written`, `deleted`, `rejected` (null without the mirror);
- `gates`: `lifted` (scheduling gates removed; null without `gate-pods`);
- `consumers`: outcomes of `reservedFor` updates by name (null unless standalone records them);
- `deadLetters`: `total` and `byKind`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from gpudra_kube.resources import KubeObject, Resource
from gpudra_kube.store import EventType, ObjectList, Store, Transform, WatchEvent

WRITEBACK_COUNTS = (
    "allocated",
    "conflicts",
    "unschedulable",
    "released",
    "stale",
    "foreign",
    "waiting",
    "cleared",
    "forbidden",
    "refused",
)
INTAKE_COUNTS = (
    "pending",
    "with-pod",
    "deleted",
    "deallocated",
    "released-unseen",
    "external",
    "witnessed",
    "foreign",
    "waiting",
    "oversized",
    "deleting-in-use",
)
EVENT_COUNTS = ("created", "updated", "dropped", "failed")
CLASS_COUNTS = ("written", "deleted", "rejected")


def rfc3339(epoch: float | None) -> str | None:
    """`epoch` seconds as an RFC 3339 UTC time with milliseconds; None stays None."""
    if epoch is None:
        return None
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class WatchState:
    """One loop's watch, as its store saw it."""

    resource: str
    watching: int = 0
    resource_version: str = ""
    lists: int = 0
    last_list_at: float | None = None
    watches_opened: int = 0
    events: int = 0
    last_event_at: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "resource": self.resource,
            "watching": self.watching > 0,
            "resourceVersion": self.resource_version or None,
            "lists": self.lists,
            "lastListAt": rfc3339(self.last_list_at),
            "watchesOpened": self.watches_opened,
            "events": self.events,
            "lastEventAt": rfc3339(self.last_event_at),
        }


class WatchedStore:
    """A `Store` whose list and watch of one resource update a `WatchState` (see the module)."""

    def __init__(
        self, store: Store, resource: Resource, state: WatchState, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._resource = resource
        self._state = state
        self._clock = clock

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        listed = await self._store.list(resource, namespace, transform=transform)
        if resource == self._resource:
            self._state.lists += 1
            self._state.last_list_at = self._clock()
            self._state.resource_version = listed.resource_version
        return listed

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout: float = 300.0,
    ) -> AsyncIterator[WatchEvent]:
        stream = self._store.watch(
            resource, namespace, resource_version=resource_version, timeout=timeout
        )
        return self._observed(stream) if resource == self._resource else stream

    async def _observed(self, stream: AsyncIterator[WatchEvent]) -> AsyncIterator[WatchEvent]:
        state = self._state
        state.watches_opened += 1
        state.watching += 1
        try:
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for event in stream:
                    state.events += 1
                    state.last_event_at = self._clock()
                    if event.resource_version and event.type is not EventType.SYNCED:
                        state.resource_version = event.resource_version
                    yield event
        finally:
            state.watching -= 1

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> KubeObject:
        return await self._store.get(resource, name, namespace)

    async def create(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._store.create(resource, obj)

    async def replace(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._store.replace(resource, obj)

    async def replace_status(self, resource: Resource, obj: KubeObject) -> KubeObject:
        return await self._store.replace_status(resource, obj)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        await self._store.delete(resource, name, namespace)

    async def close(self) -> None:
        await self._store.close()


class WatchBook:
    """The watches of one claim-writer process, by loop name."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.watches: dict[str, WatchState] = {}
        self._clock = clock

    def store(self, store: Store, name: str, resource: Resource) -> Store:
        """`store` with the loop `name`'s list and watch of `resource` observed."""
        state = self.watches.setdefault(name, WatchState(resource.plural))
        return WatchedStore(store, resource, state, self._clock)

    def to_json(self) -> dict[str, object]:
        return {name: state.to_json() for name, state in sorted(self.watches.items())}


def counted(counts: Mapping[str, int] | None, keys: tuple[str, ...]) -> dict[str, int] | None:
    """`keys` (each, 0 when never counted) and any other key counted; None stays None."""
    if counts is None:
        return None
    out = {key: 0 for key in keys}
    out.update(counts)
    return out


@dataclass
class ClaimWriterStatus:
    """A `gpudra_service.Status` callable over the claim-writer's loops (None: not running)."""

    mode: str
    ready: Callable[[], bool]
    watches: WatchBook
    intake: Mapping[str, int]
    intake_conflicts: Callable[[], int]
    intake_retrying: Callable[[], int]
    writeback: Mapping[str, int]
    dead_letters: Mapping[str, int]
    events: Mapping[str, int] | None = None
    classes: Mapping[str, int] | None = None
    lifted: Callable[[], int] | None = None
    consumers: Mapping[str, int] | None = None

    def __call__(self) -> dict[str, object]:
        dead = dict(self.dead_letters)
        return {
            "mode": self.mode,
            "ready": self.ready(),
            "watches": self.watches.to_json(),
            "intake": {
                **(counted(self.intake, INTAKE_COUNTS) or {}),
                "conflicts": self.intake_conflicts(),
                "finalizers-retrying": self.intake_retrying(),
            },
            "writeback": counted(self.writeback, WRITEBACK_COUNTS),
            "events": counted(self.events, EVENT_COUNTS),
            "classes": counted(self.classes, CLASS_COUNTS),
            "gates": {"lifted": self.lifted()} if self.lifted is not None else None,
            "consumers": dict(self.consumers) if self.consumers is not None else None,
            "deadLetters": {"total": sum(dead.values()), "byKind": dead},
        }
