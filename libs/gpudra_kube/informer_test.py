from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpudra_bus.connection import connect, disconnect
from gpudra_bus.streams import BucketSpec, ensure_bucket
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.informer import informer, metadata_only
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS, Resource
from gpudra_kube.store import EventType, ObjectList, Transform, WatchEvent
from gpudra_testing.claims import claim
from gpudra_testing.kubeapi import FakeKubeApi


@pytest.fixture
def store(api_store: ApiStore) -> ApiStore:
    """This module tests the API backend only (conftest's `store` is both backends)."""
    return api_store


class Events:
    """Runs an informer in the background and collects (type, name) pairs."""

    def __init__(self, stream: AsyncIterator[WatchEvent]) -> None:
        self.seen: list[tuple[str, str]] = []
        self._stream = stream
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for ev in self._stream:
            self.seen.append((ev.type.value, ev.object.get("metadata", {}).get("name", "")))

    async def wait_for(self, n: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        async with asyncio.timeout(timeout):
            while len(self.seen) < n:
                await asyncio.sleep(0.01)
        return self.seen

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._stream.aclose()  # type: ignore[attr-defined]


async def test_list_then_watch_then_resume(store: ApiStore, kube_api: FakeKubeApi) -> None:
    await store.create(RESOURCE_CLAIMS, claim("a"))
    events = Events(informer(store, RESOURCE_CLAIMS, "default", watch_timeout=30))
    try:
        assert await events.wait_for(2) == [("ADDED", "a"), ("SYNCED", "")]
        await store.create(RESOURCE_CLAIMS, claim("b"))
        await events.wait_for(3)
        # The watch breaks; changes made meanwhile arrive once, without a relist.
        await kube_api.close_watches()
        await store.create(RESOURCE_CLAIMS, claim("c"))
        await store.delete(RESOURCE_CLAIMS, "a", "default")
        assert await events.wait_for(5) == [
            ("ADDED", "a"),
            ("SYNCED", ""),
            ("ADDED", "b"),
            ("ADDED", "c"),
            ("DELETED", "a"),
        ]
        lists = [p for m, p in kube_api.requests if m == "GET" and p.endswith("resourceclaims")]
        assert len(lists) >= 3  # one list, then watches: the resumed watch did not relist
        # Nothing more came of the resume (no event twice): the next event is the next change.
        await store.create(RESOURCE_CLAIMS, claim("d"))
        assert (await events.wait_for(6))[5:] == [("ADDED", "d")]
    finally:
        await events.stop()


async def test_relist_after_gone_reports_missed_deletes(
    store: ApiStore, kube_api: FakeKubeApi
) -> None:
    for name in ("a", "b", "d"):
        await store.create(RESOURCE_CLAIMS, claim(name))
    # Long bookmark interval: the informer's version stays behind while we compact.
    kube_api.bookmark_interval = 30
    events = Events(
        informer(store, RESOURCE_CLAIMS, watch_timeout=30, backoff_initial=0.01, backoff_max=0.05)
    )
    try:
        await events.wait_for(4)
        # The watch breaks and cannot be re-opened until we are done changing things.
        kube_api.inject_error(503, reason="ServiceUnavailable", path_contains="watch=", times=10**6)
        await kube_api.close_watches()
        # Changes while no watch is open, then history is gone: the informer must relist.
        await store.delete(RESOURCE_CLAIMS, "a", "default")
        b = await store.get(RESOURCE_CLAIMS, "b", "default")
        b["metadata"]["labels"] = {"x": "y"}
        await store.replace(RESOURCE_CLAIMS, b)
        await store.create(RESOURCE_CLAIMS, claim("c"))
        await store.delete(RESOURCE_CLAIMS, "d", "default")
        await store.create(RESOURCE_CLAIMS, claim("d"))  # same name, new UID
        kube_api.compact()
        kube_api.clear_faults()
        seen = await events.wait_for(10)
        assert sorted(seen[4:9]) == sorted(
            [("ADDED", "c"), ("MODIFIED", "b"), ("DELETED", "a"), ("DELETED", "d"), ("ADDED", "d")]
        )
        assert seen[4:9].index(("DELETED", "d")) < seen[4:9].index(("ADDED", "d"))
        assert seen[9] == ("SYNCED", "")
    finally:
        await events.stop()


async def test_retries_through_server_errors(store: ApiStore, kube_api: FakeKubeApi) -> None:
    kube_api.inject_error(503, reason="ServiceUnavailable", method="GET", times=3)
    await store.create(RESOURCE_CLAIMS, claim("a"))
    events = Events(informer(store, RESOURCE_CLAIMS, backoff_initial=0.01))
    try:
        assert await events.wait_for(2) == [(EventType.ADDED.value, "a"), ("SYNCED", "")]
    finally:
        await events.stop()


async def test_a_deletion_without_the_object_carries_the_last_known_one(nats_url: str) -> None:
    """A KV tombstone written by plain tools (`nats kv del`) carries no object: the store can
    rebuild only the name. The informer knows the object it deletes, and hands that on, so a
    consumer that keys objects by UID (the claim-writer's intake: it tells the allocator which
    claim's devices to free) is not left with a deletion it cannot place."""
    nc = await connect(nats_url, name="informer-stub-test", deadline=5)
    try:
        bucket = f"t-{uuid.uuid4().hex[:8]}-claims"
        kv = await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
        store = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        created = await store.create(RESOURCE_CLAIMS, claim("a"))
        stream = informer(store, RESOURCE_CLAIMS, "default", watch_timeout=30)
        seen: list[WatchEvent] = []

        async def follow() -> None:
            async for event in stream:
                seen.append(event)

        task = asyncio.create_task(follow())
        try:
            async with asyncio.timeout(5):
                while len(seen) < 2:
                    await asyncio.sleep(0.01)
                await kv.delete("default.a")
                while len(seen) < 3:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await disconnect(nc)
    deleted = seen[2]
    assert deleted.type is EventType.DELETED
    assert deleted.object["metadata"]["uid"] == created["metadata"]["uid"]
    assert deleted.object["metadata"]["name"] == "a"
    assert int(deleted.resource_version) > int(created["metadata"]["resourceVersion"])


async def test_a_throttled_watch_waits_as_long_as_the_server_asks(
    store: ApiStore, kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """429 Too Many Requests with `Retry-After` (API priority and fairness; a server shutting
    down): the informer waits at least that long, whatever its own backoff (10 ms here), and
    then goes on without losing a change."""
    await store.create(RESOURCE_CLAIMS, claim("a"))
    kube_api.inject_error(429, reason="TooManyRequests", path_contains="watch=", retry_after=1)
    caplog.set_level("WARNING", logger="gpudra_kube.informer")
    events = Events(
        informer(store, RESOURCE_CLAIMS, watch_timeout=30, backoff_initial=0.01, backoff_max=0.05)
    )
    try:
        await events.wait_for(2)
        await store.create(RESOURCE_CLAIMS, claim("b"))
        assert await events.wait_for(3, timeout=10) == [
            ("ADDED", "a"),
            ("SYNCED", ""),
            ("ADDED", "b"),
        ]
    finally:
        await events.stop()
    [retry] = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert isinstance(retry.args, tuple)
    wait = retry.args[-1]  # the seconds the informer slept
    assert isinstance(wait, float)
    assert 1.0 <= wait <= 60.0


async def test_a_transform_slims_what_the_informer_holds_and_yields(
    store: ApiStore, kube_api: FakeKubeApi
) -> None:
    """With thousands of Nodes a consumer that needs their names and UIDs must not hold every
    Node's status: objects are slimmed as they arrive, by the list and by the watch alike, and
    a relist still tells changes and deletions apart."""
    seen: list[WatchEvent] = []

    async def collect(n: int) -> None:
        async with asyncio.timeout(5):
            while len(seen) < n:
                seen.append(await anext(events))

    big = claim("a")
    big["metadata"]["labels"] = {"x": "y" * 1000}
    await store.create(RESOURCE_CLAIMS, big)
    kube_api.bookmark_interval = 30
    events = informer(
        store, RESOURCE_CLAIMS, watch_timeout=30, backoff_initial=0.01, transform=metadata_only
    )
    try:
        await collect(2)
        await store.create(RESOURCE_CLAIMS, claim("b"))
        await collect(3)
        assert [(e.type, sorted(e.object["metadata"])) for e in seen if e.object] == [
            (EventType.ADDED, ["name", "namespace", "resourceVersion", "uid"]),
            (EventType.ADDED, ["name", "namespace", "resourceVersion", "uid"]),
        ]
        assert all("spec" not in e.object for e in seen)
        # History gone: the relist compares slim objects and still finds what changed.
        await kube_api.close_watches()
        kube_api.inject_error(503, reason="ServiceUnavailable", path_contains="watch=", times=10**6)
        await store.delete(RESOURCE_CLAIMS, "b", "default")
        a = await store.get(RESOURCE_CLAIMS, "a", "default")
        a["metadata"]["labels"] = {"x": "z"}
        await store.replace(RESOURCE_CLAIMS, a)
        kube_api.compact()
        kube_api.clear_faults()
        await collect(6)
        assert sorted((e.type.value, e.object["metadata"]["name"]) for e in seen[3:5]) == [
            ("DELETED", "b"),
            ("MODIFIED", "a"),
        ]
        assert seen[5].type is EventType.SYNCED
    finally:
        await events.aclose()  # type: ignore[attr-defined]


class _Listed(dict):  # type: ignore[type-arg]
    """A listed object a weak reference can follow (a plain dict cannot be referenced weakly)."""


class _ListOnly:
    """A store whose list hands out two fresh objects (`listed`: weak references to them) and
    whose watch stays open (`watching` set) until the test ends."""

    def __init__(self) -> None:
        self.listed: list[weakref.ref[_Listed]] = []
        self.watching = asyncio.Event()

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        items = []
        for name in ("a", "b"):
            obj = _Listed(claim(name))
            obj["metadata"].update(uid=f"uid-{name}", resourceVersion="5")
            items.append(obj)
        self.listed = [weakref.ref(o) for o in items]
        # As a `Store` does: each object as the transform leaves it.
        return ObjectList([transform(o) if transform else o for o in items], "5")

    async def watch(self, *args: object, **kwargs: object) -> AsyncIterator[WatchEvent]:
        self.watching.set()
        await asyncio.Event().wait()
        yield WatchEvent(EventType.BOOKMARK, {}, "")  # never: an async generator that waits


async def test_with_a_transform_the_listed_objects_are_not_held() -> None:
    """A transform slims what the informer holds only if nothing else keeps the list's objects:
    once it is watching, every whole object it listed has been let go."""
    store = _ListOnly()
    async with watching_after_sync(store, transform=metadata_only):
        gc.collect()
        assert [ref() for ref in store.listed] == [None, None]


@contextlib.asynccontextmanager
async def watching_after_sync(store: _ListOnly, **options: Any) -> AsyncIterator[None]:
    """An informer of `store`'s two claims, past its list (ADDED, ADDED, SYNCED) and watching;
    stopped on the way out."""
    events = informer(store, RESOURCE_CLAIMS, **options)  # type: ignore[arg-type]
    watching = None
    try:
        kinds = [(await anext(events)).type for _ in range(3)]
        assert kinds == [EventType.ADDED, EventType.ADDED, EventType.SYNCED]
        watching = asyncio.ensure_future(anext(events))
        await asyncio.wait_for(store.watching.wait(), 10)
        yield
    finally:
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        await events.aclose()  # type: ignore[attr-defined]


class _ClosesAtOnce(_ListOnly):
    """A store whose every watch ends at once with nothing in it (a proxy closing watches)."""

    def __init__(self) -> None:
        super().__init__()
        self.watches = 0

    async def watch(self, *args: object, **kwargs: object) -> AsyncIterator[WatchEvent]:
        self.watches += 1
        self.watching.set()
        await asyncio.sleep(0)  # as a request would; without it the old loop never let go
        nothing: list[WatchEvent] = []
        for event in nothing:
            yield event


async def test_a_watch_that_ends_at_once_with_nothing_is_backed_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opened again at once, such watches hammered the API server in a tight loop; now the next
    one waits for the backoff (an hour here: a second watch while it waits is the old loop)."""
    # (the package's `informer` is the function: the module is reached through importlib)
    informer_module = importlib.import_module("gpudra_kube.informer")
    monkeypatch.setattr(informer_module, "SHORT_WATCH", 60.0)  # however slow this machine is
    store = _ClosesAtOnce()
    async with watching_after_sync(store, backoff_initial=3600.0):
        await asyncio.sleep(0.2)  # the old loop watched thousands of times meanwhile
        assert store.watches == 1
