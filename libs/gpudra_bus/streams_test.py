from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import nats.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType

from gpudra_bus import streams, subjects
from gpudra_bus.connection import Backoff, connect, disconnect
from gpudra_bus.errors import BusRetryableError, StreamConfigError
from gpudra_bus.streams import BucketSpec, StreamSpec
from gpudra_testing import NatsServer
from gpudra_testing.statusz import free_port


async def test_ensure_is_idempotent_and_concurrent(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    await asyncio.gather(*(streams.ensure_streams(js) for _ in range(3)))
    await streams.ensure_streams(js)
    names = {s.config.name for s in await js.streams_info()}
    assert {s.name for s in streams.STREAMS} <= names
    buckets = await streams.ensure_buckets(js)
    again = await streams.ensure_buckets(js)
    assert set(buckets) == set(again) == {b.name for b in streams.BUCKETS}
    assert "gpudra-claims" in buckets
    assert "gpudra-reservations" in buckets


async def test_inventory_keeps_last_value_per_node(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    for i in range(3):
        await js.publish(subjects.inventory("n1"), f"n1-{i}".encode())
    await js.publish(subjects.inventory("n2"), b"n2-0")
    info = await js.stream_info(streams.INVENTORY_STREAM)
    assert info.state.messages == 2
    last = await js.get_last_msg(streams.INVENTORY_STREAM, subjects.inventory("n1"))
    assert last.data == b"n1-2"


async def test_claims_stream_is_a_work_queue(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    info = await js.stream_info(streams.CLAIMS_STREAM)
    assert info.config.retention == RetentionPolicy.WORK_QUEUE
    await js.publish(subjects.claims("default", "c1"), b"x")
    sub = await js.pull_subscribe(subjects.all_of(subjects.Kind.CLAIMS), durable="alloc")
    (msg,) = await sub.fetch(1, timeout=10)
    await msg.ack_sync()
    info = await js.stream_info(streams.CLAIMS_STREAM)
    assert info.state.messages == 0
    await sub.unsubscribe()


async def test_changed_config_is_updated(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    spec = StreamSpec("T", ("t.>",), max_age=60.0)
    await streams.ensure_stream(js, spec)
    await streams.ensure_stream(js, StreamSpec("T", ("t.>",), max_age=120.0))
    assert (await js.stream_info("T")).config.max_age == 120.0
    await streams.ensure_bucket(js, BucketSpec("b1", history=1))
    kv = await streams.ensure_bucket(js, BucketSpec("b1", history=3))
    assert (await js.stream_info("KV_b1")).config.max_msgs_per_subject == 3
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(
            StreamSpec("W", ("w.>",), retention=RetentionPolicy.WORK_QUEUE), id="retention-change"
        ),
        pytest.param(StreamSpec("X", ("w.>",)), id="overlapping-subjects"),
        pytest.param(StreamSpec("bad.name", ("y.>",)), id="bad-name"),
    ],
)
async def test_unreconcilable_config_is_a_stream_config_error(
    fresh_nc: Client, changed: StreamSpec
) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_stream(js, StreamSpec("W", ("w.>",)))
    with pytest.raises(StreamConfigError):
        await streams.ensure_stream(js, changed)


async def test_bad_bucket_name_is_a_stream_config_error(fresh_nc: Client) -> None:
    with pytest.raises(StreamConfigError):
        await streams.ensure_bucket(fresh_nc.jetstream(), BucketSpec("bad name"))


async def test_a_bucket_kept_in_memory_is_not_silently_accepted(fresh_nc: Client) -> None:
    # Reservations and claims in a memory bucket are gone after a server restart; the spec says
    # file storage, which JetStream cannot change on an existing stream: refuse, as for streams.
    js = fresh_nc.jetstream()
    await js.create_key_value(KeyValueConfig(bucket="mem", storage=StorageType.MEMORY))
    with pytest.raises(StreamConfigError, match="mem"):
        await streams.ensure_bucket(js, BucketSpec("mem"))


@pytest.fixture
def cluster() -> Iterator[list[NatsServer]]:
    """Three JetStream servers in one cluster (what `deploy/kustomize` runs)."""
    ports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in ports)
    servers: list[NatsServer] = []
    try:
        for i, port in enumerate(ports):
            args: tuple[str, ...] = ("--server_name", f"n{i}", "--cluster_name", "gpudra")
            args += ("--cluster", f"nats://127.0.0.1:{port}", "--routes", routes)
            servers.append(NatsServer(extra_args=args).start())
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest_asyncio.fixture
async def cluster_nc(cluster: list[NatsServer]) -> AsyncIterator[Client]:
    nc = await connect(cluster[0].url, name="test", backoff=Backoff(0.01, 0.2), deadline=10)
    try:
        js = nc.jetstream()
        for _ in range(300):  # JetStream answers once the cluster has elected its meta leader
            with contextlib.suppress(nats.errors.Error):
                await js.account_info()
                break
            await asyncio.sleep(0.1)
        yield nc
    finally:
        await disconnect(nc, drain=False)


async def test_replicas_of_an_existing_bucket_follow_the_setting(cluster_nc: Client) -> None:
    # A deployment that starts with one replica (dev) and is raised to three: the streams follow,
    # and so must the buckets, or losing one server loses every reservation.
    js = cluster_nc.jetstream()
    await streams.ensure_bucket(js, BucketSpec("b1"), replicas=1)
    await streams.ensure_stream(js, StreamSpec("S1", ("s1.>",)), replicas=1)
    kv = await streams.ensure_bucket(js, BucketSpec("b1"), replicas=3)
    await streams.ensure_stream(js, StreamSpec("S1", ("s1.>",)), replicas=3)
    assert (await js.stream_info("S1")).config.num_replicas == 3
    assert (await js.stream_info("KV_b1")).config.num_replicas == 3
    for _ in range(10):  # the scaled-up stream elects a leader before it takes writes again
        with contextlib.suppress(nats.errors.TimeoutError):
            await kv.put("k", b"v")
            break
    assert (await kv.get("k")).value == b"v"


async def test_the_layout_waits_for_a_cluster_that_is_still_forming(
    cluster: list[NatsServer],
) -> None:
    # Right after the servers start, JetStream does not answer until the cluster has elected its
    # meta leader (seconds): every service starting with the cluster used to exit at once.
    nc = await connect(cluster[0].url, name="test", backoff=Backoff(0.01, 0.2), deadline=10)
    try:
        js = nc.jetstream()
        await streams.ensure_streams(js, replicas=3)
        buckets = await streams.ensure_buckets(js, replicas=3)
        assert set(buckets) == {b.name for b in streams.BUCKETS}
        assert (await js.stream_info(streams.STREAMS[0].name)).config.num_replicas == 3
    finally:
        await disconnect(nc, drain=False)


async def test_jetstream_that_never_answers_is_an_error_after_the_patience(
    fresh_nats_server: NatsServer,
) -> None:
    nc = await connect(fresh_nats_server.url, name="test", backoff=Backoff(0.01, 0.2), deadline=10)
    try:
        fresh_nats_server.kill()  # the client reconnects for ever; JetStream never answers
        with pytest.raises(BusRetryableError):
            await streams.ensure_streams(nc.jetstream(), patience=1.0)
    finally:
        await disconnect(nc, drain=False)
