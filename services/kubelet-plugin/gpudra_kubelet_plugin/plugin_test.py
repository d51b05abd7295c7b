"""The plugin driven by a fake kubelet over its real Unix sockets: registration, stale sockets,
health streaming, wire names, rolling updates."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import stat
from typing import Literal

import pytest

from gpudra_kubelet_plugin.conftest import (
    DRIVER,
    GPU1,
    Node,
    Running,
    make_claim,
    ref,
)
from gpudra_kubelet_plugin.errors import SocketError
from gpudra_kubelet_plugin.fakekubelet import FakeKubelet, wait_for_socket
from gpudra_kubelet_plugin.health import HealthEvent
from gpudra_kubelet_plugin.registration import SUPPORTED_VERSIONS
from kubeletpb.dra.v1 import api_pb2 as v1


async def test_registration_handshake(node: Node, running: Running) -> None:
    plugin, kubelet = running
    info = kubelet.info
    assert info is not None
    assert (info.type, info.name, info.endpoint) == (
        "DRAPlugin",
        DRIVER,
        str(node.settings.dra_socket),
    )
    assert list(info.supported_versions) == list(SUPPORTED_VERSIONS)
    assert info.supported_versions[0] == "v1.DRAPlugin"
    assert kubelet.service == "v1.DRAPlugin"
    await asyncio.wait_for(plugin.registration.registered.wait(), 5)
    for path in (node.settings.registration_socket, node.settings.dra_socket):
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600, path


async def test_refused_registration_is_retried_with_a_new_socket(node: Node) -> None:
    node.registration_retry = 0.05
    plugin = await node.plugin()
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register(accept=False, error="version skew")
            assert plugin.registration.last_error == "version skew"
            for _ in range(200):
                if plugin.registrar.attempts == 2:
                    break
                await asyncio.sleep(0.01)
            assert plugin.registrar.attempts == 2
            await kubelet.register()
            assert plugin.registration.registered.is_set()
    finally:
        await plugin.stop()
    assert not node.settings.registration_socket.exists()
    assert not node.settings.dra_socket.exists()


async def test_stale_socket_is_replaced_but_other_files_are_not(node: Node) -> None:
    path = node.settings.registration_socket
    path.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays: a stale socket, as after a crash
    plugin = await node.plugin()
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
    finally:
        await plugin.stop()
    node.settings.dra_socket.parent.mkdir(parents=True, exist_ok=True)
    node.settings.dra_socket.write_text("not a socket")
    plugin = await node.plugin()
    with pytest.raises(SocketError, match="not a socket"):
        await plugin.start()  # stops what it had started on the way out
    assert node.settings.dra_socket.read_text() == "not a socket"
    assert not node.settings.registration_socket.exists()


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
async def test_health_stream_reports_an_injected_xid(
    running: Running, version: Literal["v1", "v1alpha1"]
) -> None:
    plugin, kubelet = running
    stream = kubelet.watch_health(version)
    try:
        first = await asyncio.wait_for(anext(stream), 5)
        assert set(first) == {
            "gpu-0",
            "gpu-1",
            "gpu-1-mig-1-0",
            "gpu-1-mig-3g-40gb-4",
            "gpu-1-mig-4g-40gb-0",
        }
        assert {h for h, _ in first.values()} == {1}  # HEALTHY
        await plugin.hub.update(
            HealthEvent("XID", True, "XID 79: fell off the bus", device_uuid=GPU1)
        )
        second = await asyncio.wait_for(anext(stream), 5)
        unhealthy = {name for name, (h, _) in second.items() if h == 2}
        assert unhealthy == {
            "gpu-1",
            "gpu-1-mig-1-0",
            "gpu-1-mig-3g-40gb-4",
            "gpu-1-mig-4g-40gb-0",
        }
        assert second["gpu-1"][1] == "XID 79: fell off the bus"
        assert second["gpu-0"] == (1, "")
    finally:
        await stream.aclose()


def test_wire_names_match_the_kubelet() -> None:
    from kubeletpb.drahealth.v1 import api_pb2 as h1
    from kubeletpb.drahealth.v1alpha1 import api_pb2 as h1a1
    from kubeletpb.pluginregistration.v1 import api_pb2 as reg

    assert v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == (
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert (
        reg.DESCRIPTOR.services_by_name["Registration"].full_name
        == "pluginregistration.Registration"
    )
    assert h1.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == "v1.DRAResourceHealth"
    assert h1a1.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == (
        "v1alpha1.DRAResourceHealth"
    )
    assert v1.Device.DESCRIPTOR.fields_by_name["share_id"].number == 5


async def test_rolling_update_two_instances_share_the_node(node: Node) -> None:
    """Old and new pod serve side by side; the kubelet may use either for any call."""
    claim = make_claim("c", "uid-r", [("gpu", "gpu-0"), ("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    old = await node.plugin(settings=dataclasses.replace(node.settings, pod_uid="old-pod"))
    new = await node.plugin(settings=dataclasses.replace(node.settings, pod_uid="new-pod"))
    await old.start()
    await new.start()
    try:
        assert old.settings.registration_socket != new.settings.registration_socket
        assert old.settings.dra_socket != new.settings.dra_socket
        async with (
            FakeKubelet(node.settings.registry_dir, DRIVER) as to_old,
            FakeKubelet(node.settings.registry_dir, DRIVER) as to_new,
        ):
            to_old.registration_socket = old.settings.registration_socket
            to_new.registration_socket = new.settings.registration_socket
            await to_old.register()
            await to_new.register()
            first = await to_old.prepare([ref(claim)])
            assert first.claims["uid-r"].error == ""
            assert await to_new.prepare([ref(claim)]) == first  # the stored answer, via the file
            assert (await to_new.unprepare([ref(claim)])).claims["uid-r"].error == ""
            assert node.cdi.claim_uids() == set()
            assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
            assert (await to_old.unprepare([ref(claim)])).claims["uid-r"].error == ""
            assert node.checkpoint().load().claims == {}
    finally:
        await old.stop()
        assert new.settings.registration_socket.exists()  # the old pod leaves the new one's alone
        await new.stop()


async def test_a_removed_registration_socket_is_created_again(node: Node) -> None:
    """The kubelet deregisters a driver whose registration socket goes away (a cleanup of the
    registry directory, a kubelet reinstall) and registers it again only for a new socket."""
    node.socket_check = 0.05
    claim = make_claim("c", "uid-s", [("gpu", "gpu-0")])
    node.claims.put(claim)
    plugin = await node.plugin()
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
        node.settings.registration_socket.unlink()
        await wait_for_socket(node.settings.registration_socket, timeout=10)
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
            assert (await kubelet.prepare([ref(claim)])).claims["uid-s"].error == ""
        assert plugin.registrar.attempts == 2
    finally:
        await plugin.stop()
    assert not node.settings.registration_socket.exists()


async def test_a_removed_dra_socket_is_served_again_and_registered_anew(node: Node) -> None:
    """Without its DRA socket file the kubelet cannot reach the plugin; the plugin serves on a new
    one and re-creates its registration socket, so the kubelet connects to the new one."""
    node.socket_check = 0.05
    claim = make_claim("c", "uid-d", [("gpu", "gpu-0")])
    node.claims.put(claim)
    plugin = await node.plugin()
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
        node.settings.dra_socket.unlink()
        await wait_for_socket(node.settings.dra_socket, timeout=10)
        async with asyncio.timeout(10):
            while plugin.registrar.attempts < 2:
                await asyncio.sleep(0.01)
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
            assert (await kubelet.prepare([ref(claim)])).claims["uid-d"].error == ""
    finally:
        await plugin.stop()
    assert not node.settings.dra_socket.exists()
    assert not node.settings.registration_socket.exists()


async def test_a_socket_taken_over_by_another_instance_is_left_to_it(node: Node) -> None:
    """Fixed socket names (no pod UID): a second instance replaces the first one's sockets. The
    first must not take them back (the two would replace each other for ever); when it stops and
    removes the files on its way out, the second one serves on new ones."""
    node.socket_check = 0.05
    first = await node.plugin()
    second = await node.plugin()
    await first.start()
    await second.start()
    try:
        for _ in range(10):
            await asyncio.sleep(0.05)
        assert first.registrar.attempts == 1
        await first.stop()
        await wait_for_socket(node.settings.dra_socket, timeout=10)
        async with asyncio.timeout(10):
            while second.registrar.attempts < 2 or not node.settings.registration_socket.exists():
                await asyncio.sleep(0.01)
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as kubelet:
            await kubelet.register()
        assert second.registration.registered.is_set()
    finally:
        await first.stop()
        await second.stop()


async def test_health_of_a_mig_device_the_plugin_made_is_reported_until_it_is_destroyed(
    node: Node, running: Running
) -> None:
    plugin, kubelet = running
    placement = "gpu-1-mig-3g-40gb-4"
    stream = kubelet.watch_health("v1")
    try:
        await asyncio.wait_for(anext(stream), 5)
        claim = make_claim("m", "uid-h", [("mig", placement)])
        node.claims.put(claim)
        assert (await kubelet.prepare([ref(claim)])).claims["uid-h"].error == ""
        made = await node.table.device(placement)
        # The node-agent reports the MIG device by its UUID, which did not exist at start.
        changed = await plugin.hub.update(
            HealthEvent("XID", True, "XID 94: contained ECC error", device_uuid=made.uuid)
        )
        assert changed == [placement]
        health = await asyncio.wait_for(anext(stream), 5)
        assert health[placement] == (2, "XID 94: contained ECC error")  # UNHEALTHY
        assert {n for n, (h, _) in health.items() if h == 2} == {placement}
        assert (await kubelet.unprepare([ref(claim)])).claims["uid-h"].error == ""
        # The condition was the destroyed device's, not the placement's: it goes with it.
        health = await asyncio.wait_for(anext(stream), 5)
        assert health[placement] == (1, "")
        assert await plugin.hub.update(HealthEvent("XID", True, device_uuid=made.uuid)) == []
    finally:
        await stream.aclose()
