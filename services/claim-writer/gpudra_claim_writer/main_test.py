"""The claim-writer process wiring (`serve`), per mode, against a real nats-server and (kubernetes
mode) the HTTP-level fake API: the DeviceClass mirror and the Events writer run in kubernetes mode,
the consumers loop in standalone mode — each reached through the service, not built by hand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest

from gpudra_bus import (
    DEVICE_CLASSES_BUCKET,
    Publisher,
)
from gpudra_claim_writer.conftest import decide, kube_settings, new_claim, serving
from gpudra_claim_writer.errors import ClaimWriterError
from gpudra_claim_writer.main import FATAL, serve
from gpudra_claim_writer.settings import Settings
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.errors import InvalidObjectError
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import DEVICE_CLASSES, EVENTS, PODS, RESOURCE_CLAIMS
from gpudra_kube.store import Store
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        with contextlib.suppress(nats.js.errors.Error, KeyError):
            result = await check()
            if result:
                return result
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_kubernetes_mode_mirrors_classes_and_records_events(
    fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        settings = kube_settings(fresh_nats_server.url, fake, tmp_path)
        api: Store = await ApiStore.from_kubeconfig(settings.kubeconfig)
        try:
            async with serving(settings) as nc:
                await api.create(
                    DEVICE_CLASSES,
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "DeviceClass",
                        "metadata": {"name": "cluster.example.com"},
                        "spec": {},
                    },
                )

                async def mirrored() -> bool:
                    kv = await nc.jetstream().key_value(DEVICE_CLASSES_BUCKET)
                    return (await kv.get("cluster.example.com")).value is not None

                await until(mirrored)
                created = await api.create(RESOURCE_CLAIMS, new_claim("big"))
                await decide(Publisher(nc), created, reason="needs 8 GPUs in one NVLink domain")

                async def warned() -> list[dict[str, Any]]:
                    return [e for e in fake.objects(EVENTS) if e["reason"] == "FailedAllocation"]

                [event] = await until(warned)
                assert event["regarding"]["uid"] == created["metadata"]["uid"]
                assert event["note"] == "needs 8 GPUs in one NVLink domain"
        finally:
            await api.close()


async def test_standalone_mode_records_consumers_and_releases_after_the_last(
    fresh_nats_server: NatsServer,
) -> None:
    settings = Settings(
        nats_url=fresh_nats_server.url,
        health_host="127.0.0.1",
        health_port=0,
        watch_timeout=1.0,
        gate_pods=False,
    )
    async with serving(settings) as nc:
        store = KvStore(nc)

        async def buckets_ready() -> bool:
            try:
                await store.list(PODS)
            except InvalidObjectError:  # the service has not created the buckets yet
                return False
            return True

        await until(buckets_ready)
        created = await store.create(RESOURCE_CLAIMS, new_claim("shared"))
        await store.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "main", "image": "busybox"}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": "shared"}],
                },
            },
        )
        await decide(Publisher(nc), created)

        async def reserved() -> list[str]:
            current = await store.get(RESOURCE_CLAIMS, "shared", "default")
            return [r["name"] for r in (current.get("status") or {}).get("reservedFor") or []]

        assert await until(reserved) == ["trainer"]
        await store.delete(PODS, "trainer", "default")

        async def released() -> bool:
            status = (await store.get(RESOURCE_CLAIMS, "shared", "default")).get("status") or {}
            return "reservedFor" not in status and "allocation" not in status

        await until(released)


async def test_a_loop_that_ends_on_its_own_stops_the_service_with_an_error(
    fresh_nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that returns without an error (a watch generator that just ended) used to stop
    the service with exit code 0 after one "stopping" line: nothing said which loop or why."""

    async def ends(self: Writeback) -> None:
        return None

    ends.__qualname__ = Writeback.run.__qualname__
    monkeypatch.setattr(Writeback, "run", ends)
    settings = Settings(
        nats_url=fresh_nats_server.url, health_host="127.0.0.1", health_port=0, gate_pods=False
    )
    with pytest.raises(ClaimWriterError, match=r"loop Writeback\.run ended on its own"):
        await asyncio.wait_for(serve(settings, asyncio.Event()), 60)
    assert ClaimWriterError in FATAL
