"""The Kubernetes adapter's exceptions: one root (`KubeError`), permanent and retryable apart.

Both backends (API server, NATS KV) raise the same types for the same situations, so service
code handles "conflict", "gone" or "not found" once. kubernetes-asyncio, aiohttp and nats-py
exceptions are translated where the backends call them (`raise ... from exc`).
"""

from __future__ import annotations


class KubeError(Exception):
    """Root of every error raised by gpudra_kube."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class KubePermanentError(KubeError):
    """Retrying the same request cannot succeed."""


class KubeRetryableError(KubeError):
    """A transient failure; the same request (or a re-read and retry) may succeed."""


class NotFoundError(KubePermanentError):
    """The object does not exist (HTTP 404)."""


class AlreadyExistsError(KubePermanentError):
    """Create of an object whose name is taken (HTTP 409, reason AlreadyExists)."""


class InvalidObjectError(KubePermanentError):
    """The server (or our own checks) rejected the object as malformed (HTTP 400/422)."""


class ForbiddenError(KubePermanentError):
    """Authentication or authorisation failed (HTTP 401/403)."""


class ConflictError(KubeRetryableError):
    """Optimistic concurrency failed: the object changed since it was read (HTTP 409).

    Re-read, re-decide and write again; never overwrite blindly.
    """


class GoneError(KubeRetryableError):
    """The requested resourceVersion is too old (HTTP 410): relist, then watch again."""


class UnavailableError(KubeRetryableError):
    """The backend is unreachable, overloaded or failed internally (5xx, 429, I/O errors).

    `retry_after`: the seconds the server asked to wait before trying again (its `Retry-After`
    on a 429 or 503), None when it said nothing; waiting less only earns another refusal."""

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class AlreadyAllocatedError(KubePermanentError):
    """The claim already carries a different allocation; re-decide instead of overwriting it."""
