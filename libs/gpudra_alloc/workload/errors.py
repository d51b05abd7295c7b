"""Workload errors: a bad generator setting is permanent, under the allocation root."""

from __future__ import annotations

from gpudra_alloc.errors import AllocationError


class WorkloadError(AllocationError):
    """Permanent: a workload setting is invalid (unknown machine type, negative count, ...)."""
