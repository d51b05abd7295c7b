"""The allocator's view of shared objects: a KV bucket of v1 JSON objects, parsed, in memory.

`KvIndex` promises: `start()` returns once every object stored at that moment has been read;
afterwards a KV watch keeps `objects` current (new, changed and deleted keys). A value that does
not parse as the expected kind is logged, counted and left out — it never stops the watch.
`version` grows on every change and `changed` is set, so waiting claims can be retried; each of
`listeners` is called too (the worker's warm-up is told so).
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


class KvIndex(Generic[T]):
    def __init__(self, kv: KeyValue, parse: Callable[[Any], T], what: str) -> None:
        self._kv = kv
        self._parse_object = parse
        self._what = what
        self.objects: dict[str, T] = {}
        self.version = 0
        self.changed = asyncio.Event()
        self.rejected = 0
        self.listeners: list[Callable[[], None]] = []
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def slices(self) -> dict[str, T]:
        """The objects by key (named for the slice index, its main use)."""
        return self.objects

    async def start(self) -> None:
        try:
            watcher = await self._kv.watchall()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise translate(exc, f"watching {self._what}") from exc
        self._task = asyncio.create_task(self._follow(watcher), name=f"{self._what}-watch")
        await self._synced.wait()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done(task)

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        try:
            async for entry in watcher:
                if entry is None:
                    self._synced.set()
                    continue
                parsed = None
                if entry.operation not in (KV_DEL, KV_PURGE) and entry.value:
                    parsed = self._parse(entry.key, entry.value)
                if parsed is None:
                    if self.objects.pop(entry.key, None) is not None:
                        self._bump()
                    continue
                self.objects[entry.key] = parsed
                self._bump()
        finally:
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await watcher.stop()  # type: ignore[no-untyped-call]

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
