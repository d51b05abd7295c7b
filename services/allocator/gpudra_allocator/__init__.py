"""gpudra_allocator: the allocator service (`python -m gpudra_allocator`).

Consumes claim events, decides with `gpudra_alloc`, reserves the devices in the shared
reservation bucket (compare-and-set, safe with several replicas) and announces the decision.
"""

from __future__ import annotations

from gpudra_allocator.settings import Settings

__all__ = ["Settings"]
