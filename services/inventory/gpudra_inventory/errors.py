"""The inventory service's exceptions: one root, permanent and retryable kept apart."""

from __future__ import annotations


class InventoryError(Exception):
    """Root of every error the inventory service raises itself."""


class InventoryPermanentError(InventoryError):
    """Retrying the same input fails the same way."""


class InventoryRetryableError(InventoryError):
    """A transient condition; the same call may succeed later."""


class SettingsError(InventoryPermanentError, ValueError):
    """A setting (flag or environment variable) has a value the service cannot use."""
