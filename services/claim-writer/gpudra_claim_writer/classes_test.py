"""The DeviceClass mirror against the HTTP-level fake API and a real nats-server bucket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats.js.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gpudra_api import parse_device_class
from gpudra_bus.connection import connect, disconnect
from gpudra_bus.streams import BucketSpec, ensure_bucket
from gpudra_claim_writer.classes import ClassMirror, mirrored_value
from gpudra_claim_writer.conftest import cancel_and_wait
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import DEVICE_CLASSES
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.kvkeys import bucket_keys


def device_class(
    name: str, expression: str = 'device.driver == "gpu.nvidia.com"'
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


@pytest_asyncio.fixture
async def bucket(nats_url: str) -> AsyncIterator[KeyValue]:
    nc: Client = await connect(nats_url, name="classes-test", deadline=5)
    try:
        yield await ensure_bucket(nc.jetstream(), BucketSpec(f"t{uuid.uuid4().hex[:8]}-classes"))
    finally:
        await disconnect(nc)


@contextlib.asynccontextmanager
async def running(mirror: ClassMirror) -> AsyncIterator[None]:
    task = asyncio.create_task(mirror.run())
    try:
        await asyncio.wait_for(mirror.synced.wait(), 20)
        yield
    finally:
        await cancel_and_wait(task)


async def mirrored(bucket: KeyValue) -> dict[str, dict[str, Any]]:
    out = {}
    for name in await _keys(bucket):
        try:
            entry = await bucket.get(name)
        except nats.js.errors.KeyNotFoundError:  # deleted since it was listed
            continue
        assert entry.value is not None
        out[name] = json.loads(entry.value)
    return out


async def _keys(bucket: KeyValue) -> list[str]:
    # Not nats-py's `keys()`: its listing has no time bound and may answer no keys for a bucket
    # that has some (see gpudra_bus.kvlist); several checks here read the bucket only once.
    return await bucket_keys(bucket)


async def eventually(check: Callable[[], Any], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if await check():
                return
        except AssertionError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            assert await check()
        await asyncio.sleep(0.05)


async def test_created_class_reaches_the_bucket_and_deleted_disappears(
    api: tuple[FakeKubeApi, ApiStore], bucket: KeyValue
) -> None:
    fake, store = api
    await store.create(DEVICE_CLASSES, device_class("listed.example.com"))
    mirror = ClassMirror(store, bucket, watch_timeout=1.0)
    async with running(mirror):
        assert set(await mirrored(bucket)) == {"listed.example.com"}
        await store.create(DEVICE_CLASSES, device_class("watched.example.com"))

        async def both() -> bool:
            return set(await mirrored(bucket)) == {"listed.example.com", "watched.example.com"}

        await eventually(both)
        value = json.loads((await bucket.get("watched.example.com")).value or b"{}")
        assert "resourceVersion" not in value["metadata"]
        # What the allocator's class index does with the value.
        assert parse_device_class(value).name == "watched.example.com"

        await store.delete(DEVICE_CLASSES, "listed.example.com")

        async def one() -> bool:
            return set(await mirrored(bucket)) == {"watched.example.com"}

        await eventually(one)
        updated = device_class("watched.example.com", 'device.driver == "other.example.com"')
        current = await store.get(DEVICE_CLASSES, "watched.example.com")
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await store.replace(DEVICE_CLASSES, updated)

        async def changed() -> bool:
            entry = await bucket.get("watched.example.com")
            spec = json.loads(entry.value or b"{}")["spec"]
            return "other.example.com" in spec["selectors"][0]["cel"]["expression"]

        await eventually(changed)
    assert mirror.counts["written"] == 3
    assert mirror.counts["deleted"] == 1
    assert fake.objects(DEVICE_CLASSES)  # the mirror never writes to the API


@pytest.mark.parametrize(
    "bad_spec",
    [
        pytest.param({"selectors": [{}]}, id="selector-without-cel"),
        pytest.param({"config": [{"requests": ["r"]}]}, id="config-without-opaque"),
        pytest.param(
            {"selectors": [{"cel": {"expression": "x" * 20_000}}]}, id="expression-too-long"
        ),
    ],
)
async def test_invalid_class_is_logged_and_skipped_never_a_crash(
    api: tuple[FakeKubeApi, ApiStore],
    bucket: KeyValue,
    bad_spec: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, store = api
    await store.create(DEVICE_CLASSES, device_class("bad.example.com"))
    mirror = ClassMirror(store, bucket, watch_timeout=1.0)
    async with running(mirror):
        assert set(await mirrored(bucket)) == {"bad.example.com"}
        # Written by "someone else" past validation, as an older or newer API server might.
        with caplog.at_level(logging.ERROR, logger="gpudra_claim_writer.classes"):
            await fake.put(DEVICE_CLASSES, {**device_class("bad.example.com"), "spec": bad_spec})
            await store.create(DEVICE_CLASSES, device_class("good.example.com"))

            async def only_good() -> bool:
                return set(await mirrored(bucket)) == {"good.example.com"}

            await eventually(only_good)
    assert mirror.rejected == 1
    assert "bad.example.com is not usable by gpudra" in caplog.text


async def test_relist_after_410_and_stale_keys_are_pruned(
    api: tuple[FakeKubeApi, ApiStore], bucket: KeyValue
) -> None:
    fake, store = api
    # Left over from a run that missed this class's deletion.
    await bucket.put("stale.example.com", mirrored_value(device_class("stale.example.com")))
    await store.create(DEVICE_CLASSES, device_class("kept.example.com"))
    mirror = ClassMirror(store, bucket, watch_timeout=0.5)
    async with running(mirror):
        assert set(await mirrored(bucket)) == {"kept.example.com"}
        mirror.synced.clear()
        fake.compact()
        await fake.close_watches()
        # Changed while the watch is down: the relist must deliver both.
        await fake.put(DEVICE_CLASSES, device_class("new.example.com"))
        fake.compact()
        await store.delete(DEVICE_CLASSES, "kept.example.com")
        fake.compact()
        await asyncio.wait_for(mirror.synced.wait(), 20)

        async def relisted() -> bool:
            return set(await mirrored(bucket)) == {"new.example.com"}

        await eventually(relisted)
    assert mirror.counts["deleted"] == 2


async def test_forbidden_list_is_retried_not_fatal(
    api: tuple[FakeKubeApi, ApiStore], bucket: KeyValue
) -> None:
    fake, store = api
    await store.create(DEVICE_CLASSES, device_class("late.example.com"))
    fake.inject_error(403, reason="Forbidden", method="GET", path_contains="deviceclasses")
    mirror = ClassMirror(store, bucket, watch_timeout=1.0, retry_permanent=0.5)
    async with running(mirror):
        assert set(await mirrored(bucket)) == {"late.example.com"}
        # RBAC withdrawn mid-run, the class deleted meanwhile: after the retry's fresh list the
        # class must go, although no DELETED event was ever seen.
        mirror.synced.clear()
        fake.inject_error(403, reason="Forbidden", method="GET", path_contains="watch=")
        await fake.close_watches()
        await store.delete(DEVICE_CLASSES, "late.example.com")
        await asyncio.wait_for(mirror.synced.wait(), 20)

        async def empty() -> bool:
            return await mirrored(bucket) == {}

        await eventually(empty)
