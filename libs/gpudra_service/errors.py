"""gpudra_service's one root exception."""

from __future__ import annotations


class ServiceError(Exception):
    """A service's runtime (settings, probes, telemetry) could not do its job."""


class SettingsError(ServiceError):
    """A flag or environment variable has an unusable value; the message names it."""
