from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from gpudra_standalone.kubelet import ClaimRef, KubeletClient, KubeletError
from kubeletpb.dra.v1 import api_pb2 as dra
from kubeletpb.dra.v1 import api_pb2_grpc as dra_grpc
from kubeletpb.pluginregistration.v1 import api_pb2 as reg
from kubeletpb.pluginregistration.v1 import api_pb2_grpc as reg_grpc

DRIVER = "gpu.example.com"


@dataclass
class Plugin(reg_grpc.RegistrationServicer, dra_grpc.DRAPluginServicer):
    """A minimal DRA plugin on real Unix sockets: prepares every claim with one device."""

    endpoint: str
    name: str = DRIVER
    kind: str = "DRAPlugin"
    versions: tuple[str, ...] = ("v1.DRAPlugin",)
    statuses: list[reg.RegistrationStatus] = field(default_factory=list)
    unprepared: list[str] = field(default_factory=list)

    async def GetInfo(self, request: Any, context: Any) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=self.kind,
            name=self.name,
            endpoint=self.endpoint,
            supported_versions=list(self.versions),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append(request)
        return reg.RegistrationStatusResponse()

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        out = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            if claim.name == "broken":
                out.claims[claim.uid].error = "no such claim"
                continue
            out.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["gpu"],
                    pool_name="node-a",
                    device_name="gpu-0",
                    cdi_device_ids=[f"{DRIVER}/gpu=claim-{claim.uid}"],
                )
            )
        return out

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        out = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self.unprepared.append(claim.uid)
            out.claims[claim.uid].error = ""
        return out


@pytest_asyncio.fixture
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Path, Plugin, grpc.aio.Server]]:
    registry = tmp_path / "registry"
    registry.mkdir()
    plugin = Plugin(endpoint=str(tmp_path / "dra.sock"))
    server = grpc.aio.server()
    reg_grpc.add_RegistrationServicer_to_server(plugin, server)
    dra_grpc.add_DRAPluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix:{registry / (DRIVER + '-reg.sock')}")
    server.add_insecure_port(f"unix:{plugin.endpoint}")
    await server.start()
    yield registry, plugin, server
    await server.stop(None)


async def test_register_then_prepare_and_unprepare(
    serving: tuple[Path, Plugin, grpc.aio.Server],
) -> None:
    registry, plugin, _ = serving
    async with KubeletClient(registry, DRIVER, timeout=5) as kubelet:
        info = await kubelet.register()
        assert info.endpoint == plugin.endpoint
        assert [s.plugin_registered for s in plugin.statuses] == [True]
        answer = await kubelet.prepare(
            [ClaimRef("u1", "default", "one"), ClaimRef("u2", "default", "broken")]
        )
        assert answer["u1"].error == ""
        assert [d.cdi_ids for d in answer["u1"].devices] == [(f"{DRIVER}/gpu=claim-u1",)]
        assert answer["u2"].error == "no such claim"
        assert await kubelet.unprepare([ClaimRef("u1", "default", "one")]) == {"u1": ""}
        assert plugin.unprepared == ["u1"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"kind": "CSIPlugin"}, "is not DRAPlugin", id="wrong-type"),
        pytest.param({"name": "other.example.com"}, "differs from", id="wrong-name"),
        pytest.param({"versions": ("v1beta1.DRAPlugin",)}, "v1.DRAPlugin not among", id="old"),
    ],
)
async def test_a_plugin_the_kubelet_would_refuse_is_told_why(
    serving: tuple[Path, Plugin, grpc.aio.Server], change: dict[str, Any], message: str
) -> None:
    registry, plugin, _ = serving
    for key, value in change.items():
        setattr(plugin, key, value)
    async with KubeletClient(registry, DRIVER, timeout=5) as kubelet:
        with pytest.raises(KubeletError, match=message):
            await kubelet.register()
    assert [s.plugin_registered for s in plugin.statuses] == [False]
    assert message in plugin.statuses[0].error


async def test_missing_socket_and_unregistered_calls_are_clear_errors(tmp_path: Path) -> None:
    async with KubeletClient(tmp_path, DRIVER, timeout=0.1) as kubelet:
        with pytest.raises(KubeletError, match="no plugin registration socket"):
            await kubelet.register()
        with pytest.raises(KubeletError, match="not registered"):
            await kubelet.prepare([ClaimRef("u", "default", "c")])


async def test_a_plugin_that_went_away_is_a_kubelet_error(
    serving: tuple[Path, Plugin, grpc.aio.Server],
) -> None:
    registry, _, server = serving
    async with KubeletClient(registry, DRIVER, timeout=2) as kubelet:
        await kubelet.register()
        await server.stop(None)
        with pytest.raises(KubeletError, match="NodePrepareResources on .* failed"):
            await kubelet.prepare([ClaimRef("u", "default", "c")])
