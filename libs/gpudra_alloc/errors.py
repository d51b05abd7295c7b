"""Allocation errors: one root, `AllocationError`.

`AllocationInputError` is Kubernetes' "fatal" allocation error: invalid input (an unknown class,
a disabled feature in use, a constraint that cannot hold for "All" devices) or a CEL expression
that fails at run time. The same input fails the same way, so it is permanent; a claim that
merely does not fit is not an error at all (the allocator returns no result).
"""

from __future__ import annotations


class AllocationError(Exception):
    """Root of every error raised by `gpudra_alloc`."""


class AllocationInputError(AllocationError):
    """Permanent: the input cannot be allocated as given; a person must change it."""


class ProblemError(AllocationError):
    """Permanent: an allocation-problem document (the JSON contract) is malformed."""
