"""The allocator service's exceptions: one root, permanent and retryable kept apart.

`SettingsError` is a bad flag or environment value (the service exits with a readable line);
`ReservationConflict` says another replica changed a pool's reservations first (re-decide).
"""

from __future__ import annotations

# The shared runtime's settings error (a `gpudra_service.ServiceError`), re-exported as the
# allocator's own so `except SettingsError` catches what the loader raises.
from gpudra_service.errors import SettingsError


class AllocatorError(Exception):
    """Root of every error the allocator service raises itself."""


class AllocatorPermanentError(AllocatorError):
    """Retrying the same input fails the same way."""


class AllocatorRetryableError(AllocatorError):
    """A transient condition; the same call may succeed later."""


class BadClaimError(AllocatorPermanentError):
    """A claim event carries a claim that cannot be allocated as given (invalid JSON or spec)."""


class ReservationConflict(AllocatorRetryableError):
    """Another replica reserved or changed the same pool first; decide again on fresh state."""


__all__ = [
    "AllocatorError",
    "AllocatorPermanentError",
    "AllocatorRetryableError",
    "BadClaimError",
    "ReservationConflict",
    "SettingsError",
]
