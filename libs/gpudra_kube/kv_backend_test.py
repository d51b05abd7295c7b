from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_bus.connection import Backoff, connect, disconnect
from gpudra_bus.kvwatch import WATCH_HEARTBEAT
from gpudra_bus.streams import BucketSpec, ensure_bucket, ensure_buckets
from gpudra_kube.errors import (
    AlreadyExistsError,
    ConflictError,
    GoneError,
    InvalidObjectError,
    NotFoundError,
    UnavailableError,
)
from gpudra_kube.informer import informer
from gpudra_kube.kv_backend import BUCKETS, KvStore, object_key
from gpudra_kube.resources import (
    DEVICE_CLASSES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)
from gpudra_kube.store import EventType, WatchEvent
from gpudra_testing import NatsServer
from gpudra_testing.claims import ALLOCATION, claim
from gpudra_testing.kvkeys import BucketReads


@contextlib.asynccontextmanager
async def claims_store(
    nats_url: str, bucket: str
) -> AsyncIterator[tuple[Client, KeyValue, KvStore]]:
    """A client, a claims bucket `bucket` and a `KvStore` of it; disconnected on the way out."""
    nc = await connect(nats_url, name="t", deadline=5)
    try:
        kv = await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
        yield nc, kv, KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
    finally:
        await disconnect(nc)


@pytest.mark.parametrize(
    ("resource", "name", "namespace", "key"),
    [
        pytest.param(RESOURCE_CLAIMS, "c1", "default", "default.c1", id="namespaced"),
        pytest.param(RESOURCE_CLAIMS, "job.v2", "ml", "ml.job.v2", id="dotted-name"),
        pytest.param(
            RESOURCE_SLICES, "n1.example.com-gpu-0", None, "n1.example.com-gpu-0", id="cluster"
        ),
    ],
)
def test_object_key(resource: Resource, name: str, namespace: str | None, key: str) -> None:
    assert object_key(resource, name, namespace) == key


@pytest.mark.parametrize(
    ("resource", "name", "namespace"),
    [
        pytest.param(RESOURCE_CLAIMS, "c1", None, id="namespaced-without-namespace"),
        pytest.param(RESOURCE_CLAIMS, ">", "default", id="wildcard-name"),
        pytest.param(RESOURCE_CLAIMS, "c1", "*", id="wildcard-namespace"),
        pytest.param(RESOURCE_CLAIMS, "c1", "a.b", id="dotted-namespace"),
        pytest.param(RESOURCE_SLICES, "Upper", None, id="uppercase"),
        pytest.param(RESOURCE_SLICES, "", None, id="empty"),
        pytest.param(RESOURCE_SLICES, "a b", None, id="space"),
    ],
)
def test_object_key_rejects_bad_names(resource: Resource, name: str, namespace: str | None) -> None:
    with pytest.raises(InvalidObjectError):
        object_key(resource, name, namespace)


async def test_claims_are_plain_v1_json_under_namespace_dot_name(nats_url: str) -> None:
    bucket = "t-kv-layout"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        created = await store.create(RESOURCE_CLAIMS, claim("train.job-0", namespace="ml"))
        entry = await kv.get("ml.train.job-0")
        stored = json.loads(entry.value or b"")
        assert stored["kind"] == "ResourceClaim"
        assert "resourceVersion" not in stored["metadata"]  # the KV revision is the version
        assert str(entry.revision) == created["metadata"]["resourceVersion"]
        # A tombstone written by plain KV tools still reads as "deleted".
        await kv.delete("ml.train.job-0")
        with pytest.raises(NotFoundError):
            await store.get(RESOURCE_CLAIMS, "train.job-0", "ml")
        with pytest.raises(InvalidObjectError):
            await store.get(DEVICE_CLASSES, "x")  # no bucket configured for it
        await store.create(RESOURCE_CLAIMS, claim("other", namespace="ml"))
        with pytest.raises(InvalidObjectError):
            await store.list(RESOURCE_CLAIMS, "*")  # not a namespace: no wildcard listing


async def test_informer_on_kv_survives_a_nats_outage(fresh_nats_server: NatsServer) -> None:
    nc = await connect(
        fresh_nats_server.url, name="t", deadline=5, backoff=Backoff(initial=0.01, maximum=0.2)
    )
    events = informer(
        KvStore(nc, request_timeout=1.0), RESOURCE_CLAIMS, watch_timeout=0.5, backoff_initial=0.05
    )
    try:
        await ensure_buckets(nc.jetstream())
        store = KvStore(nc, buckets=BUCKETS, request_timeout=0.5)
        await store.create(RESOURCE_CLAIMS, claim("a"))
        seen = [(e.type, e.object.get("metadata", {}).get("name")) async for e in _take(events, 2)]
        assert seen == [(EventType.ADDED, "a"), (EventType.SYNCED, None)]
        await asyncio.to_thread(fresh_nats_server.kill)
        with pytest.raises(UnavailableError):
            await store.create(RESOURCE_CLAIMS, claim("lost"))
        await asyncio.to_thread(fresh_nats_server.restart)
        for _ in range(200):
            if nc.is_connected:
                break
            await asyncio.sleep(0.05)
        for _ in range(50):  # JetStream may need a moment after the reconnect: retryable
            try:
                await store.create(RESOURCE_CLAIMS, claim("b"))
                break
            except UnavailableError:
                await asyncio.sleep(0.1)
        (after,) = [e async for e in _take(events, 1, timeout=10)]
        assert (after.type, after.object["metadata"]["name"]) == (EventType.ADDED, "b")
    finally:
        await events.aclose()  # type: ignore[attr-defined]
        await disconnect(nc, drain=False)


async def _take(
    stream: AsyncIterator[WatchEvent], n: int, timeout: float = 5.0
) -> AsyncIterator[WatchEvent]:
    for _ in range(n):
        with contextlib.suppress(StopAsyncIteration):
            yield await asyncio.wait_for(anext(stream), timeout)


async def test_listing_an_empty_namespace_does_not_wait(nats_url: str) -> None:
    # The list consumer may already stand past the other namespaces' entries when asked; that
    # once made such lists wait for their timeout (about one in three).
    nc = await connect(nats_url, name="t", deadline=5)
    try:
        buckets = {}
        for i in range(15):
            bucket = f"t-empty-ns-{i}"
            await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
            buckets[bucket] = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket}, request_timeout=0.5)
            await buckets[bucket].create(RESOURCE_CLAIMS, claim("a", namespace="default"))
            await buckets[bucket].create(RESOURCE_CLAIMS, claim("b", namespace="other"))
        for store in buckets.values():
            assert (await store.list(RESOURCE_CLAIMS, "nobody-here")).items == []
    finally:
        await disconnect(nc)


@pytest.mark.parametrize(
    ("meanwhile", "error"),
    [
        pytest.param("nothing", None, id="current-version-one-round-trip"),
        pytest.param("update", ConflictError, id="changed-by-another-store"),
        pytest.param("delete", NotFoundError, id="deleted-by-another-store"),
    ],
)
async def test_update_of_a_version_read_lately_skips_the_read(
    nats_url: str, meanwhile: str, error: type[Exception] | None
) -> None:
    nc = await connect(nats_url, name="t", deadline=5)
    spy = await connect(nats_url, name="spy", deadline=5)
    try:
        bucket = f"t-kv-recent-{meanwhile}"
        await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
        store = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        other = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        await store.create(RESOURCE_CLAIMS, claim("c1"))
        read = await store.get(RESOURCE_CLAIMS, "c1", "default")
        if meanwhile == "update":
            theirs = await other.get(RESOURCE_CLAIMS, "c1", "default")
            theirs["metadata"]["labels"] = {"by": "other"}
            await other.replace(RESOURCE_CLAIMS, theirs)
        elif meanwhile == "delete":
            await other.delete(RESOURCE_CLAIMS, "c1", "default")
        reads = await BucketReads.of(spy, bucket)
        read["metadata"]["labels"] = {"by": "us"}
        read["status"] = {"allocation": {"ignored": True}}  # replace never writes status
        if error is not None:
            with pytest.raises(error):
                await store.replace(RESOURCE_CLAIMS, read)
            return
        written = await store.replace(RESOURCE_CLAIMS, read)
        assert await reads.so_far() == [], "the version just read was read again"
        assert written["metadata"]["labels"] == {"by": "us"}
        assert "status" not in written
        # The memo follows the store's own writes: the next update needs no read either.
        written["status"] = {"allocation": ALLOCATION}
        stored = await store.replace_status(RESOURCE_CLAIMS, written)
        assert await reads.so_far() == []
        fresh = await other.get(RESOURCE_CLAIMS, "c1", "default")
        assert fresh["status"] == {"allocation": ALLOCATION}
        assert fresh["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    finally:
        await disconnect(spy, drain=False)  # it only counts: reads left queued hold a drain
        await disconnect(nc)


@pytest.mark.parametrize(
    ("before", "error", "reads_wanted"),
    [
        pytest.param("never-used", None, 0, id="new-name-one-round-trip"),
        pytest.param("exists", AlreadyExistsError, 1, id="existing-refused"),
        pytest.param("deleted", None, 1, id="re-created-over-tombstone"),
        pytest.param("purged", None, 1, id="re-created-over-purge"),
    ],
)
async def test_create_reads_only_when_the_name_was_used(
    nats_url: str, before: str, error: type[Exception] | None, reads_wanted: int
) -> None:
    nc = await connect(nats_url, name="t", deadline=5)
    spy = await connect(nats_url, name="spy", deadline=5)
    try:
        bucket = f"t-kv-create-{before}"
        kv = await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
        store = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        if before != "never-used":
            await store.create(RESOURCE_CLAIMS, claim("c1"))
        if before == "deleted":
            await store.delete(RESOURCE_CLAIMS, "c1", "default")
        elif before == "purged":
            await kv.purge("default.c1")
        reads = await BucketReads.of(spy, bucket)
        if error is not None:
            with pytest.raises(error):
                await store.create(RESOURCE_CLAIMS, claim("c1"))
        else:
            created = await store.create(RESOURCE_CLAIMS, claim("c1"))
            stored = await store.get(RESOURCE_CLAIMS, "c1", "default")
            assert stored["metadata"]["uid"] == created["metadata"]["uid"]
            assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
            reads_wanted += 1  # the get above
        assert len(await reads.so_far()) == reads_wanted
    finally:
        await disconnect(spy, drain=False)  # it only counts: reads left queued hold a drain
        await disconnect(nc)


async def test_seen_at_answers_watched_and_written_revisions_only(nats_url: str) -> None:
    bucket = "t-kv-seen-at"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        other = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        first = await other.create(RESOURCE_CLAIMS, claim("c1"))
        v1 = first["metadata"]["resourceVersion"]
        assert store.seen_at(RESOURCE_CLAIMS, "c1", "default", v1) is None  # never seen here
        events = store.watch(RESOURCE_CLAIMS, "default", resource_version="0")
        seen = await anext(events)
        assert seen.object["metadata"]["resourceVersion"] == v1
        known = store.seen_at(RESOURCE_CLAIMS, "c1", "default", v1)
        assert known == seen.object
        assert known is not seen.object  # a copy of its own for the caller
        first["metadata"]["labels"] = {"v": "2"}
        second = await store.replace(RESOURCE_CLAIMS, first)
        v2 = second["metadata"]["resourceVersion"]
        # A watch delivering the revision this store wrote keeps it.
        again = store.watch(RESOURCE_CLAIMS, "default", resource_version="0")
        assert (await anext(again)).object["metadata"]["resourceVersion"] == v2
        await again.aclose()  # type: ignore[attr-defined]
        assert store.seen_at(RESOURCE_CLAIMS, "c1", "default", v1) is None
        now = store.seen_at(RESOURCE_CLAIMS, "c1", "default", v2)
        assert now is not None
        assert now["metadata"]["labels"] == {"v": "2"}
        await events.aclose()  # type: ignore[attr-defined]


async def _stream_messages(nc: Client, bucket: str) -> int:
    info = await nc.jetstream().stream_info(f"KV_{bucket}")
    return int(info.state.messages)


async def test_compact_removes_deleted_objects_after_their_grace(nats_url: str) -> None:
    # Every tombstone kept the deleted object's JSON for ever, and every list read them all.
    bucket = "t-kv-compact"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        await store.create(RESOURCE_CLAIMS, claim("live"))
        for name in ("gone-1", "gone-2", "purged"):
            await store.create(RESOURCE_CLAIMS, claim(name))
        await store.delete(RESOURCE_CLAIMS, "gone-1", "default")
        await kv.delete("default.gone-2")  # a plain KV tombstone, without the object
        await kv.purge("default.purged")  # a purge marker
        assert await _stream_messages(nc, bucket) == 4
        assert await store.compact(RESOURCE_CLAIMS, grace=3600) == 0  # all too young
        assert await _stream_messages(nc, bucket) == 4
        assert await store.compact(RESOURCE_CLAIMS, grace=0) == 3
        # The live claim and the mark of what was compacted are all that is left.
        assert await _stream_messages(nc, bucket) == 2
        assert await store.compact(RESOURCE_CLAIMS, grace=0) == 0  # idempotent
        for namespace in ("default", None):
            listed = await store.list(RESOURCE_CLAIMS, namespace)
            assert [o["metadata"]["name"] for o in listed.items] == ["live"]
        again = await store.create(RESOURCE_CLAIMS, claim("gone-1"))
        assert (await store.get(RESOURCE_CLAIMS, "gone-1", "default")) == again
        with pytest.raises(NotFoundError):
            await store.get(RESOURCE_CLAIMS, "gone-2", "default")


async def test_compact_leaves_a_key_written_after_its_scan(nats_url: str) -> None:
    # Two processes may compact at once, and a name may be re-created meanwhile: a purge goes
    # only up to the tombstone's revision, never takes the re-created object.
    bucket = "t-kv-compact-race"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        other = KvStore(nc, buckets={RESOURCE_CLAIMS: bucket})
        names = [f"c{i}" for i in range(40)]
        for name in names:
            await store.create(RESOURCE_CLAIMS, claim(name))
            await store.delete(RESOURCE_CLAIMS, name, "default")

        async def recreate() -> None:
            for name in names[::2]:
                await other.create(RESOURCE_CLAIMS, claim(name))

        await asyncio.gather(
            store.compact(RESOURCE_CLAIMS, grace=0),
            other.compact(RESOURCE_CLAIMS, grace=0),
            recreate(),
        )
        await store.compact(RESOURCE_CLAIMS, grace=0)
        listed = await store.list(RESOURCE_CLAIMS)
        assert sorted(o["metadata"]["name"] for o in listed.items) == sorted(names[::2])
        assert await _stream_messages(nc, bucket) == len(names[::2]) + 1


async def test_watch_from_before_a_compaction_is_gone(nats_url: str) -> None:
    # A watch from a version older than a removed tombstone would miss that DELETED event: it
    # must get 410 Gone (as from an API server) so that the informer relists.
    bucket = "t-kv-compact-gone"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        await store.create(RESOURCE_CLAIMS, claim("a"))
        old = (await store.list(RESOURCE_CLAIMS)).resource_version
        await store.delete(RESOURCE_CLAIMS, "a", "default")
        assert await store.compact(RESOURCE_CLAIMS, grace=0) == 1
        for namespace in ("default", None):
            with pytest.raises(GoneError):
                await anext(store.watch(RESOURCE_CLAIMS, namespace, resource_version=old))
        # From the start ("0") nothing known can be missed: it replays what is left.
        current = (await store.list(RESOURCE_CLAIMS)).resource_version
        await store.create(RESOURCE_CLAIMS, claim("b"))
        for version in ("0", current):
            stream = store.watch(RESOURCE_CLAIMS, None, resource_version=version, timeout=1)
            seen = [(e.type, e.object["metadata"]["name"]) async for e in stream]
            assert seen == [(EventType.ADDED, "b")]


async def test_a_current_watch_sees_deletes_and_compactions_pass_it_by(nats_url: str) -> None:
    # A watch that is current gets each DELETED with the object (its UID) before the tombstone
    # can go; a compaction meanwhile, of this bucket's other keys, is not an event.
    bucket = "t-kv-compact-watch"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        old = await store.create(RESOURCE_CLAIMS, claim("old", namespace="other"))
        await store.delete(RESOURCE_CLAIMS, "old", "other")
        version = (await store.list(RESOURCE_CLAIMS)).resource_version
        a = await store.create(RESOURCE_CLAIMS, claim("a"))
        events = store.watch(RESOURCE_CLAIMS, None, resource_version=version, timeout=10)
        try:
            first = await asyncio.wait_for(anext(events), 10)
            assert (first.type, first.object["metadata"]["uid"]) == (
                EventType.ADDED,
                a["metadata"]["uid"],
            )
            assert old["metadata"]["uid"]
            assert await store.compact(RESOURCE_CLAIMS, grace=0) == 1
            await store.delete(RESOURCE_CLAIMS, "a", "default")
            gone = await asyncio.wait_for(anext(events), 10)
            assert (gone.type, gone.object["metadata"]["uid"]) == (
                EventType.DELETED,
                a["metadata"]["uid"],
            )
        finally:
            await events.aclose()  # type: ignore[attr-defined]


async def test_collect_deleted_compacts_each_bucket_until_cancelled(nats_url: str) -> None:
    nc = await connect(nats_url, name="t", deadline=5)
    try:
        buckets = {RESOURCE_CLAIMS: "t-kv-collect-claims", PODS: "t-kv-collect-pods"}
        for bucket in buckets.values():
            await ensure_bucket(nc.jetstream(), BucketSpec(bucket))
        store = KvStore(nc, buckets=buckets)
        await store.create(RESOURCE_CLAIMS, claim("c1"))
        await store.delete(RESOURCE_CLAIMS, "c1", "default")
        await store.create(PODS, pod("p1"))
        await store.delete(PODS, "p1", "default")
        task = asyncio.create_task(
            store.collect_deleted([RESOURCE_CLAIMS, PODS], grace=0, interval=0.05)
        )
        try:
            for _ in range(200):
                left = [await _stream_messages(nc, b) for b in buckets.values()]
                if left == [1, 1]:  # only the marks of compaction
                    break
                await asyncio.sleep(0.05)
            assert left == [1, 1]
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await disconnect(nc)


def pod(name: str, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def test_watch_asks_for_heartbeats_that_resume_it_soon_after_a_restart(
    nats_url: str,
) -> None:
    # A restarted server has lost the watch's consumer; nats-py resets it after two heartbeat
    # intervals without one (its 5 s default: up to 20 s quiet; bench/kv_watch_resume.py).
    bucket = "t-kv-watch-heartbeat"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        await store.create(RESOURCE_CLAIMS, claim("a"))
        events = store.watch(RESOURCE_CLAIMS, None, resource_version="0", timeout=10)
        try:
            first = await asyncio.wait_for(anext(events), 10)
            assert first.object["metadata"]["name"] == "a"
            consumers = await nc.jetstream().consumers_info(f"KV_{bucket}")
            assert [c.config.idle_heartbeat for c in consumers] == [WATCH_HEARTBEAT]
        finally:
            await events.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("garbage", [b"not json", b"[1, 2]", b'{"spec": {}}'], ids=str)
async def test_a_value_that_is_no_object_reads_as_deleted(nats_url: str, garbage: bytes) -> None:
    """A value written over a claim by plain KV tools that is not a JSON object with metadata
    (the store checks no schema) reads as a deletion everywhere: lists leave it out, get says
    404, a watch says DELETED, and create may take the name again. Before, every list and watch
    of the bucket failed on it for good, stalling every loop that reads claims."""
    bucket = f"t-kv-garbage-{len(garbage)}"
    async with claims_store(nats_url, bucket) as (nc, kv, store):
        await store.create(RESOURCE_CLAIMS, claim("good"))
        bad = await store.create(RESOURCE_CLAIMS, claim("bad"))
        version = (await store.list(RESOURCE_CLAIMS)).resource_version
        await kv.put("default.bad", garbage)
        listed = await store.list(RESOURCE_CLAIMS)
        assert [c["metadata"]["name"] for c in listed.items] == ["good"]
        with pytest.raises(NotFoundError):
            await store.get(RESOURCE_CLAIMS, "bad", "default")
        stream = store.watch(RESOURCE_CLAIMS, None, resource_version=version, timeout=1)
        seen = [(e.type, e.object["metadata"]["name"]) async for e in stream]
        assert seen == [(EventType.DELETED, "bad")]
        again = await store.create(RESOURCE_CLAIMS, claim("bad"))
        assert again["metadata"]["uid"] != bad["metadata"]["uid"]
        listed = await store.list(RESOURCE_CLAIMS)
        assert sorted(c["metadata"]["name"] for c in listed.items) == ["bad", "good"]
