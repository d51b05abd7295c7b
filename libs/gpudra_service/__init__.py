"""What every gpudra service process shares: settings from flags and environment, the HTTP probe
server, OpenTelemetry setup, and the skeleton that runs a service until SIGTERM. Services stay thin: their own fields, wiring and loop."""

from __future__ import annotations

from gpudra_service.errors import ServiceError, SettingsError
from gpudra_service.health import HealthServer, alive_while_open
from gpudra_service.nats_options import nats_options
from gpudra_service.runtime import cancel_until_done, run_service, until_stopped
from gpudra_service.settings import (
    SHARED_ENV,
    TRACE_EXPORTERS,
    CommonSettings,
    build_parser,
    doc,
    env_names,
    flag_name,
    load,
)
from gpudra_service.telemetry import setup_tracing

__all__ = [
    "SHARED_ENV",
    "TRACE_EXPORTERS",
    "CommonSettings",
    "HealthServer",
    "alive_while_open",
    "ServiceError",
    "SettingsError",
    "build_parser",
    "cancel_until_done",
    "doc",
    "env_names",
    "flag_name",
    "load",
    "nats_options",
    "run_service",
    "setup_tracing",
    "until_stopped",
]
