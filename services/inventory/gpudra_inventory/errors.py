"""The inventory service's exceptions: one root, permanent and retryable kept apart.

Settings errors are the shared runtime's (`gpudra_service.errors.SettingsError`, a
`ServiceError`), re-exported here so `except SettingsError` catches what the loader raises.
"""

from __future__ import annotations

from gpudra_service.errors import SettingsError


class InventoryError(Exception):
    """Root of every error the inventory service raises itself."""


class InventoryPermanentError(InventoryError):
    """Retrying the same input fails the same way."""


class InventoryRetryableError(InventoryError):
    """A transient condition; the same call may succeed later."""


__all__ = ["InventoryError", "InventoryPermanentError", "InventoryRetryableError", "SettingsError"]
