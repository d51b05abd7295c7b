"""The claim-writer service's exceptions: one root, permanent and retryable kept apart."""

from __future__ import annotations


class ClaimWriterError(Exception):
    """Root of every error the claim-writer service raises itself."""


class ClaimWriterPermanentError(ClaimWriterError):
    """Retrying the same input fails the same way."""


class ClaimWriterRetryableError(ClaimWriterError):
    """A transient condition; the same call may succeed later."""


class SettingsError(ClaimWriterPermanentError, ValueError):
    """A setting (flag or environment variable) has a value the service cannot use."""
