"""The kubelet plugin's gRPC side assembled: DRA + health services on `<plugins-dir>/<driver>/
dra.sock`, then registration on `<registry-dir>/<driver>-reg.sock`.

Order matters: the DRA socket must answer before the kubelet learns of it through registration,
and on the way out registration goes first so the kubelet stops calling before the DRA socket goes.
"""

from __future__ import annotations

import logging

import grpc

from gpudra_kubelet_plugin.driver import DraServicerV1, DraServicerV1beta1
from gpudra_kubelet_plugin.health import HealthHub, HealthServicerV1, HealthServicerV1alpha1
from gpudra_kubelet_plugin.registration import SUPPORTED_VERSIONS, Registrar, RegistrationServicer
from gpudra_kubelet_plugin.settings import Settings
from gpudra_kubelet_plugin.sockets import remove_socket, start_unix_server
from gpudra_kubelet_plugin.state import DeviceState
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

    async def start(self) -> None:
        """Serve DRA and health, then register; a failure part-way stops what had started."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        await self.state.start()
        server = grpc.aio.server()
        v1_grpc.add_DRAPluginServicer_to_server(DraServicerV1(self.state), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicerV1beta1(self.state), server)
        h1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1(self.hub), server)
        h1a1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1alpha1(self.hub), server)
        self._server = server
        await start_unix_server(server, self.settings.dra_socket)
        log.info("DRA service for %s on %s", self.settings.driver_name, self.settings.dra_socket)
        await self.registrar.start()

    async def stop(self) -> None:
        await self.registrar.stop()
        if self._server is not None:
            await self._server.stop(self.settings.shutdown_grace)
            self._server = None
        remove_socket(self.settings.dra_socket)
