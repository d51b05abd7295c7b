"""The claim-writer service's exceptions: one root, permanent and retryable kept apart.

Settings errors are the shared runtime's (`gpudra_service.errors.SettingsError`, a
`ServiceError`), re-exported here so `except SettingsError` catches what the loader raises.
"""

from __future__ import annotations

from gpudra_service.errors import SettingsError


class ClaimWriterError(Exception):
    """Root of every error the claim-writer service raises itself."""


class ClaimWriterPermanentError(ClaimWriterError):
    """Retrying the same input fails the same way."""


class ClaimWriterRetryableError(ClaimWriterError):
    """A transient condition; the same call may succeed later."""


__all__ = [
    "ClaimWriterError",
    "ClaimWriterPermanentError",
    "ClaimWriterRetryableError",
    "SettingsError",
]
