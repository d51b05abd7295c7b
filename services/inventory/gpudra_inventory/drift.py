"""The fleet's software version drift: which driver and CUDA versions run where, who is odd.

`summarize` is pure: for each of driver and CUDA driver version, the count of nodes per version,
the most common version (ties broken by the higher version string, so the answer is stable) and
the nodes that run anything else ("outliers"), sorted. Nodes that report no version are listed as
`unknown`, never as outliers. The result is a plain JSON object, published on `gpudra.drift` as a
`google.protobuf.Struct` (a protobuf with a schema header like every gpudra message).

`DriftPublisher.publish(inventories)` publishes the summary of `inventories` (the caller, the
leader, calls it after every change) when it differs from the last one it published or tried to;
a failed publish is logged and not retried: the summary is recomputed on the next change, and
losing one is harmless.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from google.protobuf.struct_pb2 import Struct
from nats.aio.client import Client

from gpudra_bus import BusError, Codec, subjects, tracing
from gpudra_inventory.nats_errors import NATS_ERRORS
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)

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


class DriftPublisher:
    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._last: dict[str, Any] | None = None

    async def publish(self, inventories: Mapping[str, pb.NodeInventory]) -> None:
        summary = summarize(inventories)
        if summary == self._last:
            return
        self._last = summary
        data, headers = DRIFT_SUMMARY.encode(to_struct(summary))
        try:
            with tracing.publish_span(subjects.DRIFT, size=len(data)):
                await self._nc.publish(subjects.DRIFT, data, headers=tracing.inject(headers))
        except NATS_ERRORS as exc:
            # The summary is recomputed on the next change; losing one is harmless.
            log.warning("drift summary not published: %s", exc)
        except BusError as exc:
            log.warning("drift summary not published: %s", exc)
