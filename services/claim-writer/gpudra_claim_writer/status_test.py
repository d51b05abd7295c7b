"""`/statusz` of a running claim-writer, read over real HTTP from the service's own `serve`
wiring, against a real nats-server and (kubernetes mode) the HTTP-level fake API: the shape per
mode, watches that report their resourceVersion and lists, counters that follow the loops."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from gpudra_bus import Publisher, subjects
from gpudra_claim_writer.conftest import decide, kube_settings, new_claim, serving
from gpudra_claim_writer.settings import Settings
from gpudra_claim_writer.status import rfc3339
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS
from gpudra_kube.store import Store
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.statusz import free_port, until_status

TOP = {"mode", "ready", "watches", "intake", "writeback", "events", "classes", "gates"}
TOP |= {"consumers", "deadLetters"}
WATCH = {"resource", "watching", "resourceVersion", "lists", "lastListAt", "watchesOpened"}
WATCH |= {"events", "lastEventAt"}


@contextlib.asynccontextmanager
async def service(settings: Settings) -> AsyncIterator[Client]:
    """`serving`, once the service says it is ready."""
    async with serving(settings) as nc:
        await until_status(settings.health_port, lambda s: bool(s["ready"]))
        yield nc


async def test_standalone_mode_reports_its_watches_and_writes(
    fresh_nats_server: NatsServer,
) -> None:
    settings = Settings(
        nats_url=fresh_nats_server.url,
        health_host="127.0.0.1",
        health_port=free_port(),
        watch_timeout=1.0,
    )
    async with service(settings) as nc:
        port = settings.health_port
        status = await until_status(port, lambda s: True)
        assert set(status) == TOP
        assert status["mode"] == "standalone"
        assert set(status["watches"]) == {"intake", "gates", "consumers"}
        for name, resource in [("intake", "resourceclaims"), ("gates", "pods")]:
            watch = status["watches"][name]
            assert set(watch) == WATCH, name
            assert watch["resource"] == resource
            assert watch["lists"] == 1
            assert watch["lastListAt"] is not None
        assert status["events"] is None
        assert status["classes"] is None
        assert status["gates"] == {"lifted": 0}
        assert status["writeback"]["allocated"] == 0
        assert status["writeback"]["conflicts"] == 0
        assert status["intake"]["conflicts"] == 0
        assert status["intake"]["finalizers-retrying"] == 0
        assert status["deadLetters"] == {"total": 0, "byKind": {}}

        store = KvStore(nc)
        created = await store.create(RESOURCE_CLAIMS, new_claim("one"))
        version = created["metadata"]["resourceVersion"]
        status = await until_status(port, lambda s: s["intake"]["pending"] == 1)
        intake = status["watches"]["intake"]
        assert intake["watching"] is True
        assert intake["events"] >= 1
        assert int(intake["resourceVersion"]) >= int(version)
        assert intake["lastEventAt"] is not None

        await decide(Publisher(nc), created)
        await nc.jetstream().publish(subjects.allocations("default", "junk"), b"\x00junk")
        status = await until_status(
            port,
            lambda s: s["writeback"]["allocated"] == 1 and s["deadLetters"]["total"] == 1,
        )
        assert status["deadLetters"]["byKind"] == {"allocations": 1}
        written = await store.get(RESOURCE_CLAIMS, "one", "default")
        assert int(status["watches"]["intake"]["resourceVersion"]) <= int(
            written["metadata"]["resourceVersion"]
        )


async def test_kubernetes_mode_counts_classes_mirrored_and_events_recorded(
    fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        settings = kube_settings(fresh_nats_server.url, fake, tmp_path, health_port=free_port())
        api: Store = await ApiStore.from_kubeconfig(settings.kubeconfig)
        try:
            async with service(settings) as nc:
                port = settings.health_port
                status = await until_status(port, lambda s: True)
                assert status["mode"] == "kubernetes"
                assert set(status["watches"]) == {"intake", "classes"}
                assert status["gates"] is None
                assert status["consumers"] is None
                await api.create(
                    DEVICE_CLASSES,
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "DeviceClass",
                        "metadata": {"name": "cluster.example.com"},
                        "spec": {},
                    },
                )
                status = await until_status(port, lambda s: s["classes"]["written"] == 1)
                assert status["watches"]["classes"]["resource"] == "deviceclasses"
                created = await api.create(RESOURCE_CLAIMS, new_claim("big"))
                # The reason's write is refused once as if the claim had changed: read again.
                fake.inject_error(
                    409, reason="Conflict", method="PUT", path_contains="/resourceclaims/big"
                )
                await decide(Publisher(nc), created, reason="needs 8 GPUs in one NVLink domain")
                status = await until_status(
                    port,
                    lambda s: s["writeback"]["unschedulable"] == 1 and s["events"]["created"] == 1,
                )
                assert status["writeback"]["conflicts"] == 1
                assert status["events"]["dropped"] == 0
                # Bookmarks move the watch's version on without any change.
                before = status["watches"]["intake"]["events"]
                await until_status(port, lambda s: s["watches"]["intake"]["events"] > before)
        finally:
            await api.close()


async def test_a_relist_after_410_gone_shows_as_a_second_list(
    fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=60.0) as fake:
        settings = kube_settings(
            fresh_nats_server.url,
            fake,
            tmp_path,
            health_port=free_port(),
            watch_timeout=30.0,
            mirror_classes=False,
        )
        api: Store = await ApiStore.from_kubeconfig(settings.kubeconfig)
        try:
            async with service(settings):
                port = settings.health_port
                await api.create(RESOURCE_CLAIMS, new_claim("a"))
                seen = await until_status(port, lambda s: s["intake"]["pending"] == 1)
                assert seen["watches"]["intake"]["lists"] == 1
                assert seen["watches"]["intake"]["watchesOpened"] == 1
                # A change the claim watch never sees, then history forgotten: the watch's
                # next start is from a version that is gone, so the informer lists again.
                await api.create(
                    DEVICE_CLASSES,
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "DeviceClass",
                        "metadata": {"name": "other.example.com"},
                        "spec": {},
                    },
                )
                fake.compact()
                await fake.close_watches()
                status = await until_status(
                    port,
                    lambda s: s["watches"]["intake"]["lists"] == 2
                    and s["watches"]["intake"]["watching"],
                )
                intake = status["watches"]["intake"]
                assert intake["watchesOpened"] >= 2
                assert int(intake["resourceVersion"]) > int(
                    seen["watches"]["intake"]["resourceVersion"]
                )
                assert status["intake"]["pending"] == 1  # the relist repeated nothing
        finally:
            await api.close()


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        pytest.param(None, None, id="never"),
        pytest.param(0.0, "1970-01-01T00:00:00.000Z", id="epoch"),
        pytest.param(1_700_000_000.25, "2023-11-14T22:13:20.250Z", id="milliseconds"),
    ],
)
def test_rfc3339(epoch: float | None, text: str | None) -> None:
    assert rfc3339(epoch) == text
