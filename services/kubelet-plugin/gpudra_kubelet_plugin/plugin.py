"""The kubelet plugin's gRPC side assembled: DRA + health services on `<plugins-dir>/<driver>/
dra.sock`, then registration on `<registry-dir>/<driver>-reg.sock`.

Order matters: the DRA socket must answer before the kubelet learns of it through registration,
and on the way out registration goes first so the kubelet stops calling before the DRA socket goes.

The socket files are checked every `socket_check` seconds. When the kubelet sees the registration
socket go (a cleanup of the registry directory, say) it deregisters the driver, and without the
DRA socket file it cannot connect: a removed DRA socket is served anew, and then (as for a removed
registration socket) the registration socket is re-created, so the kubelet registers the plugin
again and connects afresh. A path that exists is left alone, even if another instance's socket now
lies there (fixed socket names, no pod UID): taking it back would make two instances replace each
other's sockets for ever.
"""

from __future__ import annotations

import asyncio
import logging
import os

import grpc

from gpudra_kubelet_plugin.driver import DraServicerV1, DraServicerV1beta1
from gpudra_kubelet_plugin.errors import KubeletPluginError
from gpudra_kubelet_plugin.health import HealthHub, HealthServicerV1, HealthServicerV1alpha1
from gpudra_kubelet_plugin.registration import SUPPORTED_VERSIONS, Registrar, RegistrationServicer
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.sockets import remove_socket, start_unix_server
from gpudra_kubelet_plugin.state import DeviceState
from gpudra_service import cancel_until_done
from kubeletpb.dra.v1 import api_pb2_grpc as v1_grpc
from kubeletpb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kubeletpb.drahealth.v1 import api_pb2_grpc as h1_grpc
from kubeletpb.drahealth.v1alpha1 import api_pb2_grpc as h1a1_grpc

log = logging.getLogger(__name__)


class KubeletPlugin:
    """Starts and stops the plugin's two gRPC servers around a prepared `DeviceState`."""

    def __init__(self, settings: Settings, state: DeviceState, hub: HealthHub) -> None:
        self.settings = settings
        self.state = state
        self.hub = hub
        # MIG devices that dynamic MIG makes or destroys change what the health stream reports.
        state.on_devices_changed(hub.sync)
        self.registration = RegistrationServicer(
            settings.driver_name, settings.dra_socket, SUPPORTED_VERSIONS
        )
        self.registrar = Registrar(
            settings.registration_socket,
            self.registration,
            settings.registration_retry,
            grace=settings.shutdown_grace,
        )
        self._server: grpc.aio.Server | None = None
        self._watch_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Serve DRA and health, then register; a failure part-way stops what had started."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        await self.state.start()
        await self._serve_dra()
        await self.registrar.start()
        self._watch_task = asyncio.create_task(self._watch_sockets(), name="socket-check")

    async def _serve_dra(self) -> None:
        # The old server goes first: gRPC unlinks a Unix socket's path when it stops listening,
        # which would remove the new server's socket file.
        await self._stop_dra()
        server = grpc.aio.server()
        v1_grpc.add_DRAPluginServicer_to_server(DraServicerV1(self.state), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicerV1beta1(self.state), server)
        h1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1(self.hub), server)
        h1a1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1alpha1(self.hub), server)
        self._server = server
        await start_unix_server(server, self.settings.dra_socket)
        log.info("DRA service for %s on %s", self.settings.driver_name, self.settings.dra_socket)

    async def _stop_dra(self) -> None:
        if self._server is not None:
            await self._server.stop(self.settings.shutdown_grace)
            self._server = None

    async def _watch_sockets(self) -> None:
        dra, registration = self.settings.dra_socket, self.settings.registration_socket
        while True:
            await asyncio.sleep(self.settings.socket_check)
            try:
                if not os.path.lexists(dra):
                    log.warning("DRA socket %s was removed; serving on a new one", dra)
                    await self._serve_dra()
                    await self.registrar.serve_again("the DRA socket was re-created")
                elif not os.path.lexists(registration):
                    await self.registrar.serve_again(
                        f"registration socket {registration} was removed"
                    )
            except KubeletPluginError as exc:
                log.error("cannot re-create the plugin's sockets (trying again): %s", exc)

    async def stop(self) -> None:
        if self._watch_task is not None:
            await cancel_until_done(self._watch_task)
            self._watch_task = None
        await self.registrar.stop()
        await self._stop_dra()
        remove_socket(self.settings.dra_socket)
