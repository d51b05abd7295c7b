"""Placement errors, under the allocation root: a malformed gang is a malformed problem."""

from __future__ import annotations

from gpudra_alloc.errors import ProblemError


class GangError(ProblemError):
    """Permanent: a `gang` step is malformed (no pods, a pod without claims, a bad attribute)."""
