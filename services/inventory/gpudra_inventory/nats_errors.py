"""How the inventory tells NATS failures apart: which exceptions mean NATS did not do what was
asked (`NATS_ERRORS`), and which of those say a revision-checked KV write lost to another
writer (`wrong_revision`). One definition for the lease, the slice writer and the service."""

from __future__ import annotations

import nats.errors
import nats.js.errors

__all__ = ["NATS_ERRORS", "wrong_revision"]

NATS_ERRORS = (nats.errors.Error, OSError, TimeoutError)
# JetStream's "wrong last sequence" answers to a revision-checked publish.
_WRONG_LAST = (10071, 10164)


def wrong_revision(exc: BaseException) -> bool:
    """True when `exc` says the key's revision was not the one the write was checked against."""
    return isinstance(exc, nats.js.errors.KeyWrongLastSequenceError) or (
        isinstance(exc, nats.js.errors.APIError) and exc.err_code in _WRONG_LAST
    )
