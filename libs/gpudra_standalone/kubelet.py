"""The kubelet's side of the DRA plugin protocol, for standalone mode: register a plugin through
its registration socket and prepare / unprepare claims on the endpoint it names.

It follows the kubelet's order: wait for `<registry-dir>/<driver>-reg.sock`, `GetInfo`, check the
plugin type, name and that it offers `v1.DRAPlugin`, report the verdict with
`NotifyRegistrationStatus`, then call `NodePrepareResources` / `NodeUnprepareResources` over the
plugin's Unix socket. Promises: every gRPC failure becomes a `KubeletError` that names the socket
and the call (never a raw `grpc.RpcError`); a refused plugin is told why before the error is raised.
It is not a kubelet: no pod lifecycle, no retries, no health watch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import grpc

from gpudra_standalone.errors import StandaloneError
from kubeletpb.dra.v1 import api_pb2 as dra
from kubeletpb.dra.v1 import api_pb2_grpc as dra_grpc
from kubeletpb.pluginregistration.v1 import api_pb2 as reg
from kubeletpb.pluginregistration.v1 import api_pb2_grpc as reg_grpc

DRA_SERVICE = "v1.DRAPlugin"


class KubeletError(StandaloneError):
    """Registering or calling a DRA plugin failed."""


@dataclass(frozen=True)
class ClaimRef:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its devices, or the plugin's error for it."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


async def wait_for_socket(path: Path, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not path.exists():
        if loop.time() > deadline:
            raise KubeletError(f"no plugin registration socket at {path} after {timeout:.0f}s")
        await asyncio.sleep(0.02)


@dataclass
class KubeletClient:
    """One registered DRA driver on one node; `async with` closes the channel."""

    registry_dir: Path
    driver: str
    timeout: float = 10.0
    endpoint: str = ""
    _channel: grpc.aio.Channel | None = field(default=None, repr=False)

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}-reg.sock"

    async def __aenter__(self) -> KubeletClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    async def register(self) -> reg.PluginInfo:
        """The registration handshake; a plugin the kubelet would refuse is refused here too."""
        path = self.registration_socket
        await wait_for_socket(path, self.timeout)
        try:
            async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
                stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(channel))
                info = await stub.GetInfo(reg.InfoRequest(), timeout=self.timeout)
                problem = refusal(info, self.driver)
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=not problem, error=problem),
                    timeout=self.timeout,
                )
        except grpc.RpcError as exc:
            raise KubeletError(f"registration on {path} failed: {_describe(exc)}") from exc
        if problem:
            raise KubeletError(f"plugin on {path} refused: {problem}")
        await self.close()
        self.endpoint = info.endpoint
        self._channel = grpc.aio.insecure_channel(f"unix:{info.endpoint}")
        return info

    def _stub(self) -> dra_grpc.DRAPluginAsyncStub:
        if self._channel is None:
            raise KubeletError(f"driver {self.driver} is not registered")
        return cast("dra_grpc.DRAPluginAsyncStub", dra_grpc.DRAPluginStub(self._channel))

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """`NodePrepareResources`; the answer by claim UID."""
        request = dra.NodePrepareResourcesRequest(claims=[_claim(c) for c in claims])
        try:
            response = await self._stub().NodePrepareResources(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise KubeletError(
                f"NodePrepareResources on {self.endpoint} failed: {_describe(exc)}"
            ) from exc
        return {uid: _result(r) for uid, r in response.claims.items()}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """`NodeUnprepareResources`; the error by claim UID (empty: done)."""
        request = dra.NodeUnprepareResourcesRequest(claims=[_claim(c) for c in claims])
        try:
            response = await self._stub().NodeUnprepareResources(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise KubeletError(
                f"NodeUnprepareResources on {self.endpoint} failed: {_describe(exc)}"
            ) from exc
        return {uid: r.error for uid, r in response.claims.items()}


def refusal(info: reg.PluginInfo, driver: str) -> str:
    """Why the kubelet would refuse this plugin (empty: it would accept it)."""
    if info.type != "DRAPlugin":
        return f"plugin type {info.type!r} is not DRAPlugin"
    if info.name != driver:
        return f"plugin name {info.name!r} differs from the socket's driver {driver!r}"
    if DRA_SERVICE not in info.supported_versions:
        return f"{DRA_SERVICE} not among the supported services {list(info.supported_versions)}"
    if not info.endpoint:
        return "no DRA endpoint given"
    return ""


def _claim(ref: ClaimRef) -> dra.Claim:
    return dra.Claim(uid=ref.uid, namespace=ref.namespace, name=ref.name)


def _result(response: dra.NodePrepareResourceResponse) -> PrepareResult:
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                requests=tuple(d.request_names),
                pool=d.pool_name,
                device=d.device_name,
                cdi_ids=tuple(d.cdi_device_ids),
            )
            for d in response.devices
        ),
        error=response.error,
    )


def _describe(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
    details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    return f"{code.name if code else 'error'}: {details}"
