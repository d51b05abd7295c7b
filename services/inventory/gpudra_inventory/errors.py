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


class NotLeaderError(InventoryRetryableError):
    """This replica may not write now: its lease lapsed, or another process wrote a slice since
    this one last read it (re-read the bucket under a valid lease, then write again)."""


__all__ = [
    "InventoryError",
    "InventoryPermanentError",
    "InventoryRetryableError",
    "NotLeaderError",
    "SettingsError",
]
