"""How the inventory tells NATS failures apart: which exceptions mean NATS did not do what was
asked (`NATS_ERRORS`), and which of those say a revision-checked KV write lost to another
writer (`wrong_revision`, defined once for every service in `gpudra_bus`). One definition for the
lease, the slice writer and the service."""

from __future__ import annotations

import nats.errors

from gpudra_bus import wrong_revision

__all__ = ["NATS_ERRORS", "wrong_revision"]

NATS_ERRORS = (nats.errors.Error, OSError, TimeoutError)
