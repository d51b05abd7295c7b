"""Standalone mode's infrastructure: the embedded nats-server and a supervisor that runs each
gpudra service as its own process on one machine."""

from __future__ import annotations

from gpudra_standalone.errors import StandaloneError
from gpudra_standalone.nats_server import NatsServer, NatsServerError, find_nats_server_binary
from gpudra_standalone.supervisor import Child, ServiceSpec, Supervisor

__all__ = [
    "Child",
    "NatsServer",
    "NatsServerError",
    "ServiceSpec",
    "StandaloneError",
    "Supervisor",
    "find_nats_server_binary",
]
