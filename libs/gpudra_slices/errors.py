"""gpudra_slices' exceptions. Slicing is a pure function of its input, so nothing here is worth
retrying: every error is permanent and names the node and device at fault."""

from __future__ import annotations


class SliceError(Exception):
    """Root of every error gpudra_slices raises."""


class InvalidInventoryError(SliceError):
    """The NodeInventory cannot be published as valid ResourceSlices (bad node or device name, an
    attribute Kubernetes would reject)."""
