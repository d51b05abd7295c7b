"""Allocation errors: one root, `AllocationError`.

`AllocationInputError` is Kubernetes' "fatal" allocation error: invalid input (an unknown class,
a disabled feature in use, a constraint that cannot hold for "All" devices) or a CEL expression
that fails at run time. The same input fails the same way, so it is permanent for that input; a
claim that merely does not fit is not an error at all (the allocator returns no result).

`CelRuntimeError`, the run-time case, is the one whose input includes what drivers publish: a
selector that fails on a device (`device.attributes[...].foo` on a device without `foo`, no
`has()` guard) may pass once the driver republishes its slice, or once the class is fixed. A
caller that retries (the allocator service, like kube-scheduler, which retries such a pod with
backoff) catches it before `AllocationInputError`; everything else about the claim was valid.
"""

from __future__ import annotations


class AllocationError(Exception):
    """Root of every error raised by `gpudra_alloc`."""


class AllocationInputError(AllocationError):
    """Permanent: the input cannot be allocated as given; a person must change it."""


class CelRuntimeError(AllocationInputError):
    """A CEL selector (a claim's or a class's) failed at run time on one device.

    Permanent for these slices and classes; a republished slice or a changed class may clear it,
    so a retrying caller waits for those to change instead of refusing the claim for good."""


class ProblemError(AllocationError):
    """Permanent: an allocation-problem document (the JSON contract) is malformed."""
