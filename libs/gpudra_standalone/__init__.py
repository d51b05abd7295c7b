"""Standalone mode's infrastructure: the embedded nats-server and a supervisor that runs each
gpudra service as its own process on one machine, the OTLP trace collector, and the kubelet's side
of the DRA plugin protocol (register, prepare, unprepare)."""

from __future__ import annotations

from gpudra_standalone.errors import StandaloneError
from gpudra_standalone.kubelet import (
    ClaimRef,
    KubeletClient,
    KubeletError,
    PreparedDevice,
    PrepareResult,
)
from gpudra_standalone.nats_server import NatsServer, NatsServerError, find_nats_server_binary
from gpudra_standalone.supervisor import Child, ServiceSpec, Supervisor
from gpudra_standalone.traces import Span, TraceCollector, render_tree

__all__ = [
    "Child",
    "ClaimRef",
    "KubeletClient",
    "KubeletError",
    "NatsServer",
    "NatsServerError",
    "PrepareResult",
    "PreparedDevice",
    "ServiceSpec",
    "Span",
    "StandaloneError",
    "Supervisor",
    "TraceCollector",
    "find_nats_server_binary",
    "render_tree",
]
