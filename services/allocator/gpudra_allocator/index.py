"""The allocator's view of shared objects: a KV bucket of v1 JSON objects, parsed, in memory.

`KvIndex` promises: `start()` returns once every object stored at that moment has been read;
afterwards a KV watch keeps `objects` current (new, changed and deleted keys). A value that does
not parse as the expected kind is logged, counted and left out — it never stops the watch.
`version` grows on every change and `changed` is set, so waiting claims can be retried; each of
`listeners` is called too (the worker's warm-up is told so).
A watch that fails or ends (a NATS error, the watcher stopped under it) is opened again, with
backoff from `RETRY_FIRST` to `RETRY_MAX` seconds (counted in `rewatches`, logged): the index never
stops following the bucket while the service runs. The new watch replays every key; a key whose
KV revision is the one already held keeps its parsed object (the engine's incremental rebuild
compares slices by identity, so an unchanged slice must stay the same object), and keys missing
from the replay were deleted meanwhile and are dropped.
Two instances: the ResourceSlices (`gpudra-slices`, written by the inventory) and the DeviceClasses
applied in standalone mode (`gpudra-deviceclasses`, written by `gpudra apply`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import nats.errors
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from gpudra_api import (
    ApiError,
    DeviceClass,
    ResourceSlice,
    parse_device_class,
    parse_resource_slice,
)
from gpudra_bus import translate
from gpudra_service import cancel_until_done

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_FIRST = 0.5  # seconds before the first new watch after a failed one
RETRY_MAX = 10.0
_WATCH_ERRORS = (nats.errors.Error, OSError, TimeoutError)


class KvIndex(Generic[T]):
    def __init__(self, kv: KeyValue, parse: Callable[[Any], T], what: str) -> None:
        self._kv = kv
        self._parse_object = parse
        self._what = what
        self.objects: dict[str, T] = {}
        self.version = 0
        self.changed = asyncio.Event()
        self.rejected = 0
        self.rewatches = 0
        self.listeners: list[Callable[[], None]] = []
        self._revisions: dict[str, int] = {}  # KV revision of each key's current value
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def slices(self) -> dict[str, T]:
        """The objects by key (named for the slice index, its main use)."""
        return self.objects

    async def start(self) -> None:
        try:
            watcher = await self._kv.watchall()
        except _WATCH_ERRORS as exc:
            raise translate(exc, f"watching {self._what}") from exc
        self._task = asyncio.create_task(self._supervise(watcher), name=f"{self._what}-watch")
        await self._synced.wait()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done(task)

    async def _supervise(self, watcher: KeyValue.KeyWatcher) -> None:
        """Follow `watcher`; when it fails or ends, watch again (backoff) until cancelled."""
        delay = RETRY_FIRST
        while True:
            try:
                synced = await self._follow(watcher)
                log.warning("%s watch ended; watching again", self._what)
            except _WATCH_ERRORS as exc:
                synced = False
                log.warning("%s watch failed (%s); watching again", self._what, exc)
            except Exception:  # a bug must not leave the index silently stale: log, go on
                synced = False
                log.exception("%s watch broke; watching again", self._what)
            delay = RETRY_FIRST if synced else min(delay * 2, RETRY_MAX)
            while True:
                await asyncio.sleep(delay)
                try:
                    watcher = await self._kv.watchall()
                    break
                except _WATCH_ERRORS as exc:
                    log.warning("watching %s again failed (%s)", self._what, exc)
                    delay = min(delay * 2, RETRY_MAX)
            self.rewatches += 1

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> bool:
        """Apply `watcher`'s entries until it ends; whether it got past its replay of the bucket
        (the keys it did not replay are dropped then: deleted while no watch ran)."""
        replayed: set[str] | None = set()
        try:
            async for entry in watcher:
                if entry is None:
                    if replayed is not None:
                        for key in set(self.objects) - replayed:
                            self._drop(key)
                        replayed = None
                    self._synced.set()
                    continue
                if replayed is not None:
                    replayed.add(entry.key)
                parsed = None
                if entry.operation not in (KV_DEL, KV_PURGE) and entry.value:
                    if self._revisions.get(entry.key) == entry.revision:
                        continue  # the value held already (a new watch replays it)
                    parsed = self._parse(entry.key, entry.value)
                if parsed is None:
                    self._drop(entry.key)
                    continue
                self.objects[entry.key] = parsed
                self._revisions[entry.key] = entry.revision
                self._bump()
            return replayed is None
        finally:
            with contextlib.suppress(*_WATCH_ERRORS):
                await watcher.stop()  # type: ignore[no-untyped-call]

    def _drop(self, key: str) -> None:
        self._revisions.pop(key, None)
        if self.objects.pop(key, None) is not None:
            self._bump()

    def _parse(self, key: str, value: bytes) -> T | None:
        try:
            return self._parse_object(json.loads(value))
        except (ValueError, ApiError) as exc:
            self.rejected += 1
            log.error("%s %s is not valid, ignored: %s", self._what, key, exc)
            return None

    def _bump(self) -> None:
        self.version += 1
        self.changed.set()
        for listener in self.listeners:
            listener()


def slice_index(kv: KeyValue) -> KvIndex[ResourceSlice]:
    return KvIndex(kv, parse_resource_slice, "slice")


def class_index(kv: KeyValue) -> KvIndex[DeviceClass]:
    return KvIndex(kv, parse_device_class, "device class")
