"""How the inventory tells NATS failures apart: which exceptions mean NATS did not do what was
asked (`NATS_ERRORS`), and which of those say a revision-checked KV write lost to another
writer (`wrong_revision`, defined once for every service in `gpudra_bus`). One definition for the
lease, the slice writer and the service."""

from __future__ import annotations

from gpudra_bus import NATS_ERRORS, wrong_revision

__all__ = ["NATS_ERRORS", "wrong_revision"]
