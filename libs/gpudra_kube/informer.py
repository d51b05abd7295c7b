"""A watch that never misses a change: list, watch from the list's version, resume, relist.

`informer(store, resource)` is an endless async iterator of `WatchEvent`s with these promises:
- it starts with a list and yields every object as ADDED, then SYNCED (a marker: "you have seen
  the whole state"); after that it yields each change once, in order;
- when a watch ends (timeout, dropped connection, backend restart) it resumes from the last
  resourceVersion it saw — bookmarks included — so nothing is replayed or skipped;
- on `GoneError` (410: that version is no longer available) it relists and yields the difference
  to what it had: ADDED for new objects, MODIFIED for changed ones, DELETED (with the last known
  object) for those that vanished meanwhile — DELETED then ADDED for a name whose UID changed —
  then SYNCED again — a consumer never needs to care
  whether a relist happened;
- a DELETED event whose object has no UID (a KV tombstone written by plain tools carries only
  the key) is yielded with the last known object instead, so consumers keyed by UID can place it;
- retryable errors are retried forever with backoff, waiting at least as long as a throttling
  server asks (`Retry-After`, up to `RETRY_AFTER_MAX`); permanent ones (forbidden, bad
  resource) end the iteration with the error;
- a watch that ends without an error but at once and with nothing in it (under `SHORT_WATCH`
  seconds, or half its own `watch_timeout` if that is shorter; not even a bookmark: a proxy or
  server closing every watch) is backed off like an error, as client-go's reflector does with
  its "very short watch", instead of being opened again in a tight loop against the API server
  (a quiet watch that ran to its timeout is opened again at once, as before).
BOOKMARK events are consumed here, never yielded.

`transform` (client-go's `SetTransform`): applied to every object as it arrives, before it is
kept or yielded — by the store's `list` as each page arrives, so that a (re)list holds at most a
page of whole objects, and here to each watched object. With thousands of objects of which a
consumer needs little (a Node's name and UID, not its status and images), the informer then holds
only that, and needs little more while it relists. It must keep the metadata the informer reads:
`name`, `namespace`, `uid` and `resourceVersion` (`metadata_only` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from gpudra_bus import Backoff
from gpudra_kube.errors import GoneError, KubeRetryableError, UnavailableError
from gpudra_kube.resources import KubeObject, Resource, key_of, resource_version_of
from gpudra_kube.store import EventType, Store, Transform, WatchEvent

log = logging.getLogger(__name__)

SHORT_WATCH = 1.0  # seconds: a watch that ends sooner with no event is backed off (client-go's)

RETRY_AFTER_MAX = 60.0  # seconds: the longest a server's Retry-After is honoured


def _uid(obj: KubeObject) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


def metadata_only(obj: KubeObject) -> KubeObject:
    """A `transform` that keeps an object's identity only: kind, apiVersion and its metadata's
    name, namespace, uid, resourceVersion and deletionTimestamp."""
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
    return {
        **{k: obj[k] for k in ("kind", "apiVersion") if k in obj},
        "metadata": {k: meta[k] for k in kept if k in meta},
    }


async def informer(
    store: Store,
    resource: Resource,
    namespace: str | None = None,
    *,
    watch_timeout: float = 300.0,
    backoff_initial: float = 0.05,
    backoff_max: float = 5.0,
    transform: Transform | None = None,
) -> AsyncIterator[WatchEvent]:
    """See the module docstring."""
    known: dict[tuple[str, str], KubeObject] = {}
    version = ""
    attempt = 0
    while True:
        try:
            if not version:
                # The store transforms page by page: a relist never holds every whole object.
                # (Asked only with a transform, so that a wrapping `Store` written before
                # `transform` keeps working for informers without one.)
                listed = await (
                    store.list(resource, namespace, transform=transform)
                    if transform is not None
                    else store.list(resource, namespace)
                )
                fresh = {key_of(o): o for o in listed.items}
                listed_version = listed.resource_version
                del listed  # only `fresh` is kept while it watches
                for key, obj in fresh.items():
                    old = known.get(key)
                    if old is not None and _uid(old) != _uid(obj):
                        # Deleted and re-created under the same name while we were not looking.
                        yield WatchEvent(EventType.DELETED, old, resource_version_of(old))
                        old = None
                    if old is None:
                        yield WatchEvent(EventType.ADDED, obj, resource_version_of(obj))
                    elif resource_version_of(old) != resource_version_of(obj):
                        yield WatchEvent(EventType.MODIFIED, obj, resource_version_of(obj))
                for key in sorted(known.keys() - fresh.keys()):
                    gone = known[key]
                    yield WatchEvent(EventType.DELETED, gone, resource_version_of(gone))
                known = fresh
                version = listed_version
                yield WatchEvent(EventType.SYNCED, {}, version)
            stream = store.watch(
                resource, namespace, resource_version=version, timeout=watch_timeout
            )
            opened, heard = asyncio.get_running_loop().time(), False
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for event in stream:
                    attempt, heard = 0, True
                    if event.resource_version:
                        version = event.resource_version
                    if event.type is EventType.BOOKMARK:
                        continue
                    if transform is not None:
                        event = WatchEvent(
                            event.type, transform(event.object), event.resource_version
                        )
                    key = key_of(event.object)
                    if event.type is EventType.DELETED:
                        last = known.pop(key, None)
                        if last is not None and not _uid(event.object):
                            # A tombstone without the object (a plain KV delete): only the
                            # name could be rebuilt; the object it deletes is the one known.
                            event = WatchEvent(EventType.DELETED, last, event.resource_version)
                    else:
                        known[key] = event.object
                    yield event
            lasted = asyncio.get_running_loop().time() - opened
            if not heard and lasted < min(SHORT_WATCH, watch_timeout / 2):
                wait = Backoff(backoff_initial, backoff_max).delay(attempt)
                attempt += 1
                log.warning(
                    "watch of %s ended after %.2fs with nothing in it; watching again in %.2fs",
                    resource.plural,
                    lasted,
                    wait,
                )
                await asyncio.sleep(wait)
        except GoneError as exc:
            log.info("watch of %s: %s; relisting", resource.plural, exc)
            version = ""
        except KubeRetryableError as exc:
            wait = Backoff(backoff_initial, backoff_max).delay(attempt)
            if isinstance(exc, UnavailableError) and exc.retry_after:
                wait = max(wait, min(exc.retry_after, RETRY_AFTER_MAX))
            attempt += 1
            log.warning("watch of %s failed (%s); retrying in %.2fs", resource.plural, exc, wait)
            await asyncio.sleep(wait)
