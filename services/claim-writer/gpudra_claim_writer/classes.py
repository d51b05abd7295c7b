"""Kubernetes mode: the cluster's DeviceClasses mirrored into the `gpudra-deviceclasses` KV bucket.

The allocator reads DeviceClasses from that bucket (`gpudra_allocator.index.class_index`); in
standalone mode `gpudra apply` fills it, in Kubernetes mode this mirror does, so the allocator
sees the classes the cluster really has. The claim-writer runs it because it is the one service
that talks to the API server about claims (and its RBAC already reads classes for ownership).

Promises (`ClassMirror.run`):
- Follows `resource.k8s.io/v1` DeviceClasses with an informer (list, watch, resume from the last
  resourceVersion, relist on 410): an ADDED/MODIFIED class is written to the bucket under its name
  (value: the class JSON, `resourceVersion` dropped), a DELETED one is deleted from it.
- A value is written only when it changed since this process last wrote it (a relist or a
  status-free update writes nothing).
- After every (re)list (SYNCED) the bucket is made exactly the listed classes: keys of classes
  deleted while the mirror was not watching (or written by someone else) are removed. In
  Kubernetes mode the API server is the only source of classes.
- A class gpudra cannot parse (`gpudra_api.parse_device_class` rejects it, e.g. a CEL expression
  outside the DRA environment) is logged, counted in `rejected` and kept out of the bucket (an
  older valid copy is removed: it no longer says what the cluster means) — never a crash.
- A failed bucket write (NATS away) is retried with backoff until it succeeds; a permanent API
  error (e.g. RBAC forbids listing classes) is logged and the informer is restarted after
  `retry_permanent` seconds. `run` returns only when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from gpudra_api import ApiError, parse_device_class
from gpudra_bus import NATS_ERRORS
from gpudra_bus.kvlist import live_keys
from gpudra_kube.errors import KubePermanentError
from gpudra_kube.informer import informer
from gpudra_kube.resources import DEVICE_CLASSES, KubeObject
from gpudra_kube.store import EventType, Store

log = logging.getLogger(__name__)

T = TypeVar("T")


def mirrored_value(device_class: KubeObject) -> bytes:
    """The bucket value of a class: its JSON without `resourceVersion` (which changes on every
    write and means nothing to readers of the bucket), keys sorted so equal classes compare
    equal."""
    stored: dict[str, Any] = dict(device_class)
    meta = dict(stored.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    stored["metadata"] = meta
    stored.setdefault("kind", DEVICE_CLASSES.kind)
    stored.setdefault("apiVersion", DEVICE_CLASSES.api_version)
    return json.dumps(stored, separators=(",", ":"), sort_keys=True).encode()


class ClassMirror:
    """See the module docstring."""

    def __init__(
        self,
        source: Store,
        bucket: KeyValue,
        *,
        watch_timeout: float = 10.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        retry_permanent: float = 30.0,
    ) -> None:
        self._source = source
        self._kv = bucket
        self._watch_timeout = watch_timeout
        self._backoff = (backoff_initial, backoff_max)
        self._retry_permanent = retry_permanent
        self._written: dict[str, bytes] = {}
        self._known: set[str] = set()  # names of the classes the API has now
        self.counts: Counter[str] = Counter()
        self.synced = asyncio.Event()

    @property
    def rejected(self) -> int:
        return self.counts["rejected"]

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except KubePermanentError as exc:
                log.error(
                    "watching DeviceClasses failed (%s); the allocator keeps the classes it has; "
                    "retrying in %.0fs",
                    exc,
                    self._retry_permanent,
                )
                await asyncio.sleep(self._retry_permanent)

    async def _follow(self) -> None:
        events = informer(
            self._source,
            DEVICE_CLASSES,
            watch_timeout=self._watch_timeout,
            backoff_initial=self._backoff[0],
            backoff_max=self._backoff[1],
        )
        self._known = set()  # a new informer starts with a full list
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                # The informer reports a relist as the difference to what it had, so the names
                # seen so far (minus deletions) are exactly the classes the API has.
                if event.type is EventType.SYNCED:
                    await self._prune()
                    self.synced.set()
                elif event.type is EventType.DELETED:
                    self._known.discard(_name(event.object))
                    await self._remove(_name(event.object))
                elif event.type in (EventType.ADDED, EventType.MODIFIED):
                    self._known.add(_name(event.object))
                    await self._apply(event.object)

    async def _apply(self, device_class: KubeObject) -> None:
        name = _name(device_class)
        if not name:
            self.counts["rejected"] += 1
            log.error("a DeviceClass without metadata.name was ignored")
            return
        try:
            parse_device_class(device_class)
        except ApiError as exc:
            self.counts["rejected"] += 1
            log.error("DeviceClass %s is not usable by gpudra, left out: %s", name, exc)
            await self._remove(name)
            return
        value = mirrored_value(device_class)
        if self._written.get(name) == value:
            return
        await self._retrying(f"mirroring DeviceClass {name}", lambda: self._kv.put(name, value))
        self._written[name] = value
        self.counts["written"] += 1
        log.info("DeviceClass %s mirrored", name)

    async def _remove(self, name: str) -> None:
        if not name:
            return
        if await self._retrying(f"reading DeviceClass {name}", lambda: self._exists(name)):
            await self._retrying(f"removing DeviceClass {name}", lambda: self._kv.delete(name))
            self.counts["deleted"] += 1
            log.info("DeviceClass %s removed", name)
        self._written.pop(name, None)

    async def _exists(self, name: str) -> bool:
        try:
            entry = await self._kv.get(name)
        except nats.js.errors.KeyNotFoundError:  # also raised for a deleted key
            return False
        return entry.value is not None

    async def _prune(self) -> None:
        """Remove every key the (re)list did not deliver (see the module docstring)."""
        for key in sorted(set(await self._retrying("listing mirrored classes", self._keys))):
            if key not in self._known:
                await self._remove(key)

    async def _keys(self) -> list[str]:
        return await live_keys(self._kv)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                return await call()
            except NATS_ERRORS as exc:
                wait = min(self._backoff[1], self._backoff[0] * 2.0 ** min(attempt, 32))
                attempt += 1
                log.warning("%s failed (%s); retrying in %.2fs", what, exc, wait)
                await asyncio.sleep(wait)


def _name(obj: KubeObject) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
