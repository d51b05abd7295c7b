"""NATS connection options (credentials, TLS) from a service's common settings.

The TLS files are read again when they change: cert-manager renews a service's certificate (and
may roll the CA) in place, in the mounted Secret, while the service keeps running; a context read
once at start would present an expired certificate, or distrust the server's renewed one, at the
first reconnection after that. `nats_options` therefore also gives a `disconnected_cb` that
re-reads the files into the same context when their content changed, before nats-py reconnects
(connections already open keep the certificate they were opened with, as TLS does), and an
`error_cb` that does the same after each connection attempt that failed with a socket or TLS
error: the kubelet updates a mounted Secret up to a minute or more after cert-manager renewed
it, so the files may change while the attempts are failing (a server already restarted with the
renewed CA), and nats-py calls `disconnected_cb` only once per disconnection. A change that does
not load (a half-written file) leaves the context as it was; the next failure tries again.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpudra_service.errors import SettingsError
from gpudra_service.settings import CommonSettings

log = logging.getLogger(__name__)


class TlsFiles:
    """A client TLS context and the files it was read from; `refresh` reads them again if their
    content changed."""

    def __init__(self, ca: str, cert: str, key: str) -> None:
        self.ca, self.cert, self.key = ca, cert, key
        self.reloads = 0
        self._seen = self._digest()
        try:
            self.context = ssl.create_default_context(cafile=ca or None)
            if cert:
                self.context.load_cert_chain(cert, key or None)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"NATS TLS files: {exc}") from exc

    def _digest(self) -> str:
        digest = hashlib.sha256()
        for name in (self.ca, self.cert, self.key):
            if name:
                try:
                    digest.update(Path(name).read_bytes())
                except OSError:
                    digest.update(b"\0missing")
            digest.update(b"\0")
        return digest.hexdigest()

    def refresh(self) -> bool:
        """Read the files into the context again if they changed; whether it did."""
        now = self._digest()
        if now == self._seen:
            return False
        try:
            if self.ca:
                self.context.load_verify_locations(cafile=self.ca)
            if self.cert:
                self.context.load_cert_chain(self.cert, self.key or None)
        except (OSError, ssl.SSLError) as exc:
            log.warning("NATS TLS files changed but do not load (%s); keeping the old ones", exc)
            return False
        self._seen = now
        self.reloads += 1
        log.info("NATS TLS files changed: reloaded for the next connection")
        return True

    def on_disconnected(self) -> Callable[[], Awaitable[None]]:
        """A nats-py `disconnected_cb` that refreshes the files before it reconnects."""

        async def refresh() -> None:
            self.refresh()

        return refresh

    def on_error(self) -> Callable[[Exception], Awaitable[None]]:
        """A nats-py `error_cb` that refreshes the files after an attempt failed on the socket or
        in the TLS handshake (`ssl.SSLError` is an `OSError`); other errors (a slow consumer,
        ...) do not read files."""

        async def refresh(exc: Exception) -> None:
            if isinstance(exc, OSError):
                self.refresh()

        return refresh


def nats_options(settings: CommonSettings) -> dict[str, Any]:
    """Keyword arguments for `nats.connect` / `gpudra_bus.connect`: credentials file, and an mTLS
    context with the `disconnected_cb` and `error_cb` that keep it current (module docstring). An
    unreadable certificate or key is a `SettingsError` naming the file."""
    options: dict[str, Any] = {}
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_tls_ca or settings.nats_tls_cert:
        files = TlsFiles(settings.nats_tls_ca, settings.nats_tls_cert, settings.nats_tls_key)
        options["tls"] = files.context
        options["disconnected_cb"] = files.on_disconnected()
        options["error_cb"] = files.on_error()
    return options
