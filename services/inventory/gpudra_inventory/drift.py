"""The fleet's software version drift: which driver and CUDA versions run where, who is odd.

`summarize` is pure: for each of driver and CUDA driver version, the count of nodes per version,
the most common version (ties broken by the higher version string, so the answer is stable) and
the nodes that run anything else ("outliers"), sorted. Nodes that report no version are listed as
`unknown`, never as outliers. The result is a plain JSON object, published on `gpudra.drift` as a
`google.protobuf.Struct` (a protobuf with a schema header like every gpudra message).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from google.protobuf.struct_pb2 import Struct

from gpudra_bus import Codec
from gpudrapb.v1 import inventory_pb2 as pb

DRIFT_SUMMARY: Codec[Struct] = Codec(Struct)


def _one(versions: Mapping[str, str]) -> dict[str, Any]:
    known = {node: v for node, v in versions.items() if v}
    counts = Counter(known.values())
    majority = max(counts, key=lambda v: (counts[v], v)) if counts else ""
    return {
        "versions": dict(sorted(counts.items())),
        "majority": majority,
        "outliers": {node: v for node, v in sorted(known.items()) if v != majority},
        "unknown": sorted(node for node, v in versions.items() if not v),
    }


def summarize(inventories: Mapping[str, pb.NodeInventory]) -> dict[str, Any]:
    drivers = {node: inv.versions.driver for node, inv in inventories.items()}
    cuda = {node: inv.versions.cuda_driver for node, inv in inventories.items()}
    return {"nodes": len(inventories), "driver": _one(drivers), "cudaDriver": _one(cuda)}


def to_struct(summary: Mapping[str, Any]) -> Struct:
    out = Struct()
    out.update(summary)
    return out
