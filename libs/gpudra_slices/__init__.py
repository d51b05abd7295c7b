"""gpudra_slices: a node's inventory as resource.k8s.io/v1 ResourceSlices (one pool per node).

The inventory service publishes what `build_slices` returns; `gpudra slices` prints the same thing.
Attribute names are those of docs/DEVICES.md; MIG partitioning uses KEP-4815 shared counters.
"""

from __future__ import annotations

from gpudra_slices.builder import (
    API_VERSION,
    DEFAULT_DRIVER,
    SliceOptions,
    build_slices,
    counter_set_name,
    placement_device_name,
)
from gpudra_slices.errors import InvalidInventoryError, SliceError

__all__ = [
    "API_VERSION",
    "DEFAULT_DRIVER",
    "InvalidInventoryError",
    "SliceError",
    "SliceOptions",
    "build_slices",
    "counter_set_name",
    "placement_device_name",
]
