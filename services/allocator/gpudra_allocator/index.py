"""The allocator's view of the fleet: every ResourceSlice in the `gpudra-slices` bucket, in memory.

Promises: `start()` returns once every slice stored at that moment has been read; afterwards a KV
watch keeps the index current (new, changed and deleted slices). A value that is not a valid
resource.k8s.io/v1 ResourceSlice is logged and left out (it never stops the watch). `version`
grows on every change and `changed` is set, so waiting claims can be retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import nats.errors
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from gpudra_api import ApiError, ResourceSlice, parse_resource_slice
from gpudra_bus import translate

log = logging.getLogger(__name__)


class SliceIndex:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self.slices: dict[str, ResourceSlice] = {}
        self.version = 0
        self.changed = asyncio.Event()
        self.rejected = 0
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            watcher = await self._kv.watchall()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise translate(exc, "watching slices") from exc
        self._task = asyncio.create_task(self._follow(watcher), name="slice-index-watch")
        await self._synced.wait()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        try:
            async for entry in watcher:
                if entry is None:
                    self._synced.set()
                    continue
                if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                    if self.slices.pop(entry.key, None) is not None:
                        self._bump()
                    continue
                parsed = self._parse(entry.key, entry.value)
                if parsed is None:
                    if self.slices.pop(entry.key, None) is not None:
                        self._bump()
                    continue
                self.slices[entry.key] = parsed
                self._bump()
        finally:
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await watcher.stop()  # type: ignore[no-untyped-call]

    def _parse(self, key: str, value: bytes) -> ResourceSlice | None:
        try:
            return parse_resource_slice(json.loads(value))
        except (ValueError, ApiError) as exc:
            self.rejected += 1
            log.error("slice %s is not a valid ResourceSlice, ignored: %s", key, exc)
            return None

    def _bump(self) -> None:
        self.version += 1
        self.changed.set()
