"""What the real kubelet does with the plugin's answers, checked over the plugin's real sockets.

Each test names the kubelet (or container runtime) behaviour it stands for: the plugin's answer
is only right if the kubelet and the CDI runtime use it as gpudra means them to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpudra_kubelet_plugin.cdi import CdiWriter
from gpudra_kubelet_plugin.conftest import (
    DRIVER,
    KIND,
    NODE,
    Node,
    Running,
    make_claim,
    read_spec,
    ref,
    serving,
)
from gpudra_kubelet_plugin.fakekubelet import FakeKubelet, cdi_ids_for_container
from gpudra_kubelet_plugin.health import HealthHub
from gpudra_kubelet_plugin.plugin import KubeletPlugin
from gpudra_kubelet_plugin.state import DeviceState
from gpudra_testing.waiting import until


async def test_a_subrequests_device_is_named_by_its_parent_request(
    node: Node, running: Running
) -> None:
    # A prioritized-list claim's result names "<request>/<subrequest>"; a container can only
    # name the request ("gpu"), and the kubelet matches request names exactly, so the answer
    # must name the parent request (kubeletplugin's stripSubrequestNames does the same).
    _, kubelet = running
    results = [
        {"request": "gpu/small", "driver": DRIVER, "pool": NODE, "device": "gpu-1-mig-1-0"},
        {"request": "whole", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},
    ]
    claim = make_claim("prio", "uid-p", results)
    node.claims.put(claim)
    answer = (await kubelet.prepare([ref(claim)])).claims["uid-p"]
    assert answer.error == ""
    assert [list(d.request_names) for d in answer.devices] == [["gpu"], ["whole"]]
    assert cdi_ids_for_container(answer, "gpu") == [f"{KIND}=uid-p-gpu-1-mig-1-0"]
    beta = (await kubelet.prepare_v1beta1([ref(claim)])).claims["uid-p"]
    assert [list(d.request_names) for d in beta.devices] == [["gpu"], ["whole"]]


def cdi_required_version(spec: dict[str, Any]) -> str:
    """The lowest `cdiVersion` the CDI library (`MinimumRequiredVersion`, which containerd and
    CRI-O run on every spec they load) accepts for `spec`, for the fields gpudra may write; a
    spec that declares less is rejected ("the spec version must be at least ...")."""
    edits = [spec.get("containerEdits", {})] + [d["containerEdits"] for d in spec["devices"]]
    if any(e.get("additionalGIDs") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in spec["devices"]):
        return "0.6.0"
    if any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", [])) or any(
        d["name"][0].isdigit() for d in spec["devices"]
    ):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


@pytest.mark.parametrize(
    "base",
    [
        pytest.param({}, id="no-base-spec"),
        pytest.param({"additionalGIDs": [44]}, id="base-spec-with-additional-gids"),
    ],
)
async def test_a_claim_spec_declares_the_cdi_version_its_fields_need(
    node: Node, base: dict[str, Any]
) -> None:
    # The node's base spec (nvidia-ctk) may give containers extra groups (`additionalGIDs`, e.g.
    # for /dev/dri); a claim spec that carries them must say 0.7.0, and one without them stays
    # at 0.6.0, which older runtimes (CDI library before 0.7) still load.
    state = DeviceState(
        driver=DRIVER,
        node=NODE,
        claims=node.claims,
        lookup=node.table,
        control=node.table,
        cdi=CdiWriter(node.settings.cdi_dir, DRIVER, base),
        checkpoint=node.checkpoint(),
    )
    plugin = await node.plugin(state)
    async with serving(node, plugin) as kubelet:
        claim = make_claim("c", "uid-v", [("gpu", "gpu-0")])
        node.claims.put(claim)
        answer = (await kubelet.prepare([ref(claim)])).claims["uid-v"]
        assert answer.error == ""
    spec = read_spec(node, "uid-v")
    assert spec["containerEdits"].get("additionalGIDs", []) == base.get("additionalGIDs", [])
    assert spec["cdiVersion"] == cdi_required_version(spec)


async def test_devices_turn_unknown_for_the_kubelet_while_the_health_feed_is_down(
    node: Node,
) -> None:
    # The kubelet stamps each device of a report with its own time of receipt and ignores
    # last_updated_time (healthInfoCache.updateHealthInfo); its health timeout only fires for
    # devices a report leaves out. A plugin that keeps reporting a list it can no longer check
    # (NATS away) must itself say UNKNOWN once the timeout has passed.
    now = [1000.0]
    current = [True]
    plugin = await health_plugin(node, now, current)
    async with serving(node, plugin) as kubelet:
        stream = kubelet.watch_health("v1alpha1")
        try:
            first = await asyncio.wait_for(anext(stream), 10)
            assert {h for h, _ in first.values()} == {HEALTHY}
            current[0] = False
            now[0] += 10  # down, but not yet for the kubelet's 30 s
            down = await asyncio.wait_for(anext(stream), 10)
            assert {h for h, _ in down.values()} == {HEALTHY}
            now[0] += 25
            await asyncio.wait_for(until_message(stream, UNKNOWN), 10)
            current[0] = True
            await asyncio.wait_for(until_message(stream, HEALTHY), 10)
        finally:
            await stream.aclose()


HEALTHY, UNKNOWN = 1, 0


async def health_plugin(node: Node, now: list[float], current: list[bool]) -> KubeletPlugin:
    """The node's plugin (not started) with a health hub on the clock `now[0]` whose feed is
    current while `current[0]` holds, refreshing its reports every 20 ms."""
    hub = HealthHub(
        NODE,
        await node.table.devices(),
        clock=lambda: now[0],
        refresh_seconds=0.02,
        is_current=lambda: current[0],
    )
    return KubeletPlugin(node.settings, node.state(), hub)


async def until_message(stream: AsyncIterator[dict[str, tuple[int, str]]], health: int) -> None:
    """Read the stream until a message reports every device with `health`."""
    async for message in stream:
        if {h for h, _ in message.values()} == {health}:
            return


async def test_a_kubelet_that_reconnects_while_the_health_feed_is_down_gets_unknown(
    node: Node,
) -> None:
    # The kubelet drops a driver's health when its stream ends and reconnects 5 s later
    # (DRAPluginManager's wait.UntilWithContext); the new stream must not report devices
    # "healthy" again while the feed is still down.
    now = [1000.0]
    current = [True]
    plugin = await health_plugin(node, now, current)
    async with serving(node, plugin) as kubelet:
        stream = kubelet.watch_health("v1")
        try:
            await asyncio.wait_for(until_message(stream, HEALTHY), 10)
            current[0] = False
            now[0] += 35
            await asyncio.wait_for(until_message(stream, UNKNOWN), 10)
        finally:
            await stream.aclose()
        stream = kubelet.watch_health("v1")
        try:
            first = await asyncio.wait_for(anext(stream), 10)
            assert {h for h, _ in first.values()} == {UNKNOWN}
        finally:
            await stream.aclose()


async def test_a_restarted_kubelet_registers_the_plugin_again_on_the_same_socket(
    node: Node, running: Running
) -> None:
    # A kubelet that restarts re-reads plugins_registry (its plugin watcher walks the directory)
    # and runs GetInfo + NotifyRegistrationStatus again on the socket that is there: the plugin
    # answers it as the first time, without re-creating the socket, and serves the new kubelet.
    plugin, _ = running
    claim = make_claim("c", "uid-k", [("gpu", "gpu-0")])
    node.claims.put(claim)
    async with FakeKubelet(node.settings.registry_dir, DRIVER) as restarted:
        info = await restarted.register()
        assert info.endpoint == str(node.settings.dra_socket)
        assert restarted.service == "v1.DRAPlugin"
        assert (await restarted.prepare([ref(claim)])).claims["uid-k"].error == ""
    assert plugin.registration.registered.is_set()
    assert plugin.registrar.attempts == 1


async def test_a_refusal_followed_by_a_registration_keeps_the_socket(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    # A kubelet that restarts after refusing the plugin registers it on the socket that is
    # there. Re-creating the socket after the retry delay all the same would make the kubelet
    # deregister the driver (its ResourceSlices' wipe is scheduled, its health stream dropped)
    # and register it again, for nothing.
    caplog.set_level(logging.INFO, logger="gpudra_kubelet_plugin.registration")
    node.registration_retry = 2.0  # the restarted kubelet's registration comes well within it
    plugin = await node.plugin()
    await plugin.start()
    try:
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as refusing:
            await refusing.register(accept=False, error="kubelet going down")
        async with FakeKubelet(node.settings.registry_dir, DRIVER) as restarted:
            await restarted.register()
        await until(
            lambda: plugin.registrar.attempts > 1 or "meanwhile; keeping" in caplog.text,
            "the retry after the refusal to decide",
        )
        assert plugin.registrar.attempts == 1
        assert plugin.registration.registered.is_set()
    finally:
        await plugin.stop()


async def test_unprepare_undoes_what_was_prepared_after_the_claim_was_reallocated(
    node: Node, running: Running
) -> None:
    # NodeUnprepareResources carries only the claim's UID, namespace and name, and the kubelet
    # may call it after the claim was deallocated and allocated again under the same UID: what
    # is undone is what prepare did (the checkpoint), not what the claim says now.
    _, kubelet = running
    claim = make_claim("m", "uid-r", [("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    assert (await kubelet.prepare([ref(claim)])).claims["uid-r"].error == ""
    assert (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    node.claims.put(make_claim("m", "uid-r", [("gpu", "gpu-0")]))
    assert (await kubelet.unprepare([ref(claim)])).claims["uid-r"].error == ""
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert not node.cdi.spec_path("uid-r").exists()
    again = (await kubelet.prepare([ref(claim)])).claims["uid-r"]
    assert [d.device_name for d in again.devices] == ["gpu-0"]
