"""A stand-in for the kubelet's side of the conversation, over the plugin's real Unix sockets.

It does what the kubelet does, in the same order: find `<registry-dir>/<driver>-reg.sock`, call
`GetInfo`, check the plugin type and pick the newest DRA service it knows, report the verdict with
`NotifyRegistrationStatus`, then call `NodePrepareResources` / `NodeUnprepareResources` /
`NodeWatchResources` on the endpoint the plugin named. For tests here and end-to-end tests in
`tests/`; it is not a kubelet (no pod lifecycle, no retries).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import grpc

from kubeletpb.dra.v1 import api_pb2 as v1
from kubeletpb.dra.v1 import api_pb2_grpc as v1_grpc
from kubeletpb.dra.v1beta1 import api_pb2 as v1beta1
from kubeletpb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kubeletpb.drahealth.v1 import api_pb2 as h1
from kubeletpb.drahealth.v1 import api_pb2_grpc as h1_grpc
from kubeletpb.drahealth.v1alpha1 import api_pb2 as h1a1
from kubeletpb.drahealth.v1alpha1 import api_pb2_grpc as h1a1_grpc
from kubeletpb.pluginregistration.v1 import api_pb2 as reg
from kubeletpb.pluginregistration.v1 import api_pb2_grpc as reg_grpc

KNOWN_DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclasses.dataclass(frozen=True)
class ClaimName:
    uid: str
    namespace: str
    name: str


def cdi_ids_for_container(answer: v1.NodePrepareResourceResponse, request: str = "") -> list[str]:
    """The CDI IDs the kubelet hands a container whose `resources.claims[]` entry names
    `request` ("" for the whole claim): the kubelet's `ClaimInfo.cdiDevicesAsList`, an exact
    match on the device's request names; a device without request names serves every request."""
    return [
        cdi_id
        for device in answer.devices
        if not request or not device.request_names or request in device.request_names
        for cdi_id in device.cdi_device_ids
    ]


async def wait_for_socket(path: Path, timeout: float = 5.0) -> None:
    """Wait until `path` exists, as the kubelet's plugin watcher would notice it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not path.exists():
        if loop.time() > deadline:
            raise TimeoutError(f"no socket at {path} after {timeout}s")
        await asyncio.sleep(0.01)


class FakeKubelet:
    """Registers one DRA driver and calls it; `async with` closes its channels."""

    def __init__(self, registry_dir: Path, driver: str) -> None:
        self.registration_socket = registry_dir / f"{driver}-reg.sock"
        self.driver = driver
        self.info: reg.PluginInfo | None = None
        self.service = ""
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> FakeKubelet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    async def register(self, accept: bool = True, error: str = "") -> reg.PluginInfo:
        """The registration handshake; with `accept=False`, refuse the plugin with `error`."""
        await wait_for_socket(self.registration_socket)
        async with grpc.aio.insecure_channel(f"unix:{self.registration_socket}") as channel:
            stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(channel))
            info = await stub.GetInfo(reg.InfoRequest())
            problem = self._check(info)
            if problem:
                accept, error = False, problem
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=accept, error=error)
            )
        if problem:
            raise RuntimeError(problem)
        if accept:
            self.info = info
            self.service = next(v for v in info.supported_versions if v in KNOWN_DRA_SERVICES)
            await self.close()
            self._channel = grpc.aio.insecure_channel(f"unix:{info.endpoint}")
        return info

    def _check(self, info: reg.PluginInfo) -> str:
        if info.type != "DRAPlugin":
            return f"plugin type {info.type!r} is not DRAPlugin"
        if info.name != self.driver:
            return f"plugin name {info.name!r} differs from the socket's driver {self.driver!r}"
        if not any(v in KNOWN_DRA_SERVICES for v in info.supported_versions):
            return f"no supported DRA service in {list(info.supported_versions)}"
        return ""

    @property
    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            raise RuntimeError("not registered")
        return self._channel

    async def prepare(self, claims: Sequence[ClaimName]) -> v1.NodePrepareResourcesResponse:
        stub = cast("v1_grpc.DRAPluginAsyncStub", v1_grpc.DRAPluginStub(self.channel))
        return await stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[v1.Claim(**_fields(c)) for c in claims]),
            timeout=10,
        )

    async def unprepare(self, claims: Sequence[ClaimName]) -> v1.NodeUnprepareResourcesResponse:
        stub = cast("v1_grpc.DRAPluginAsyncStub", v1_grpc.DRAPluginStub(self.channel))
        return await stub.NodeUnprepareResources(
            v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(**_fields(c)) for c in claims]),
            timeout=10,
        )

    async def prepare_v1beta1(
        self, claims: Sequence[ClaimName]
    ) -> v1beta1.NodePrepareResourcesResponse:
        stub = cast("v1beta1_grpc.DRAPluginAsyncStub", v1beta1_grpc.DRAPluginStub(self.channel))
        return await stub.NodePrepareResources(
            v1beta1.NodePrepareResourcesRequest(
                claims=[v1beta1.Claim(**_fields(c)) for c in claims]
            ),
            timeout=10,
        )

    async def unprepare_v1beta1(
        self, claims: Sequence[ClaimName]
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        stub = cast("v1beta1_grpc.DRAPluginAsyncStub", v1beta1_grpc.DRAPluginStub(self.channel))
        return await stub.NodeUnprepareResources(
            v1beta1.NodeUnprepareResourcesRequest(
                claims=[v1beta1.Claim(**_fields(c)) for c in claims]
            ),
            timeout=10,
        )

    async def watch_health(
        self, version: Literal["v1", "v1alpha1"] = "v1alpha1"
    ) -> AsyncGenerator[dict[str, tuple[int, str]], None]:
        """Each stream message as {device name: (health enum value, message)}."""
        call: grpc.aio.UnaryStreamCall[Any, Any]
        if version == "v1":
            stub = cast(
                "h1_grpc.DRAResourceHealthAsyncStub", h1_grpc.DRAResourceHealthStub(self.channel)
            )
            call = stub.NodeWatchResources(h1.NodeWatchResourcesRequest())
        else:
            stub_a1 = cast(
                "h1a1_grpc.DRAResourceHealthAsyncStub",
                h1a1_grpc.DRAResourceHealthStub(self.channel),
            )
            call = stub_a1.NodeWatchResources(h1a1.NodeWatchResourcesRequest())
        try:
            async for response in call:
                yield {d.device.device_name: (int(d.health), d.message) for d in response.devices}
        finally:
            call.cancel()


def _fields(claim: ClaimName) -> dict[str, str]:
    return {"uid": claim.uid, "namespace": claim.namespace, "name": claim.name}
