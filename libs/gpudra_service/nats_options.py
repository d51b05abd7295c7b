"""NATS connection options (credentials, TLS) from a service's common settings."""

from __future__ import annotations

import ssl
from typing import Any

from gpudra_service.errors import SettingsError
from gpudra_service.settings import CommonSettings


def nats_options(settings: CommonSettings) -> dict[str, Any]:
    """Keyword arguments for `nats.connect` / `gpudra_bus.connect`: credentials file and an mTLS
    context. An unreadable certificate or key is a `SettingsError` naming the file."""
    options: dict[str, Any] = {}
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_tls_ca or settings.nats_tls_cert:
        try:
            context = ssl.create_default_context(cafile=settings.nats_tls_ca or None)
            if settings.nats_tls_cert:
                context.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"NATS TLS files: {exc}") from exc
        options["tls"] = context
    return options
