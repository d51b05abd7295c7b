"""gpudra_claim_writer: the claim-writer service (`python -m gpudra_claim_writer`).

Watches ResourceClaims (API server or standalone KV), publishes claim events, writes the
allocator's decisions back into claim status and lifts pods' scheduling gate.
"""

from __future__ import annotations

from gpudra_claim_writer.settings import Settings

__all__ = ["Settings"]
