"""Registration with the kubelet's plugin watcher.

The kubelet notices `<registry-dir>/<driver>-reg.sock`, calls `GetInfo` (answered with type
`DRAPlugin`, the driver name, the DRA socket and the services served, `v1.DRAPlugin` first), and
reports the outcome with `NotifyRegistrationStatus`. When it refuses, the plugin logs the reason and,
after `retry_delay` seconds, re-creates the registration socket: the plugin watcher only retries on
a new socket file, so that is how a plugin asks again (`serve_again`, which the plugin also uses
when a socket of its own was removed; see `plugin`). A registration accepted within the delay (a
restarted kubelet re-reads the registry directory) keeps the socket.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc.aio import ServicerContext as Ctx

from gpudra_kubelet_plugin.errors import KubeletPluginError
from gpudra_kubelet_plugin.sockets import remove_socket, start_unix_server
from gpudra_service import cancel_until_done
from kubeletpb.pluginregistration.v1 import api_pb2 as reg
from kubeletpb.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
HEALTH_V1 = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
SUPPORTED_VERSIONS = (DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1, HEALTH_V1)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """`pluginregistration.Registration`: answers GetInfo, records the kubelet's verdict."""

    def __init__(self, driver: str, endpoint: Path, versions: Sequence[str]) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.versions = tuple(versions)
        self.registered = asyncio.Event()
        self.refused = asyncio.Event()
        self.last_error = ""

    async def GetInfo(
        self, request: reg.InfoRequest, context: Ctx[reg.InfoRequest, reg.PluginInfo]
    ) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=self.versions,
        )

    async def NotifyRegistrationStatus(
        self,
        request: reg.RegistrationStatus,
        context: Ctx[reg.RegistrationStatus, reg.RegistrationStatusResponse],
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("kubelet registered driver %s", self.driver)
            self.last_error = ""
            self.refused.clear()
            self.registered.set()
        else:
            log.error("kubelet refused driver %s: %s", self.driver, request.error)
            self.last_error = request.error
            self.registered.clear()
            self.refused.set()
        return reg.RegistrationStatusResponse()


class Registrar:
    """Serves the registration socket and re-creates it after a refusal."""

    def __init__(
        self,
        socket_path: Path,
        servicer: RegistrationServicer,
        retry_delay: float,
        grace: float = 1.0,
    ) -> None:
        self.socket_path = socket_path
        self.servicer = servicer
        self.retry_delay = retry_delay
        self.grace = grace
        self.attempts = 0
        self._server: grpc.aio.Server | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._reserving = asyncio.Lock()

    async def start(self) -> None:
        await self._serve()
        self._retry_task = asyncio.create_task(self._retry_loop(), name="registration-retry")

    async def stop(self) -> None:
        if self._retry_task is not None:
            await cancel_until_done(self._retry_task)
            self._retry_task = None
        await self._unserve()

    async def serve_again(self, why: str) -> None:
        """Re-create the registration socket, so the kubelet registers the plugin anew."""
        async with self._reserving:
            log.info("re-registering driver %s: %s", self.servicer.driver, why)
            self.servicer.registered.clear()  # until the kubelet confirms again (readiness)
            await self._unserve()
            await self._serve()

    async def _serve(self) -> None:
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self.servicer, server)
        await start_unix_server(server, self.socket_path)
        self._server = server
        self.attempts += 1
        log.info("registration socket %s ready (attempt %d)", self.socket_path, self.attempts)

    async def _unserve(self) -> None:
        if self._server is not None:
            await self._server.stop(self.grace)
            self._server = None
        remove_socket(self.socket_path)

    async def _retry_loop(self) -> None:
        while True:
            await self.servicer.refused.wait()
            await asyncio.sleep(self.retry_delay)
            if not self.servicer.refused.is_set():
                # Accepted since (a restarted kubelet re-read the registry directory): a new
                # socket would make the kubelet deregister the driver and register it again.
                log.info(
                    "kubelet registered driver %s meanwhile; keeping registration socket %s",
                    self.servicer.driver,
                    self.socket_path,
                )
                continue
            self.servicer.refused.clear()
            try:
                await self.serve_again("the kubelet refused the registration")
            except KubeletPluginError as exc:
                # The socket is gone now: the plugin's socket check creates it again later.
                log.error("cannot re-create registration socket %s: %s", self.socket_path, exc)
