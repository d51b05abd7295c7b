"""The text of `gpudra describe claim`: kubectl-describe-like sections built from the stored claim,
the devices it holds (with their slice attributes) and its history on the bus."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpudra_cli.standalone.events import Event
from gpudra_cli.standalone.results import DeviceKey, allocation_results, asks, attribute, row_of


def describe_claim(
    claim: Mapping[str, Any],
    index: Mapping[DeviceKey, Mapping[str, Any]],
    events: Sequence[Event],
) -> list[str]:
    meta = claim.get("metadata") or {}
    row = row_of(claim, index)
    lines = [
        f"Name:         {meta.get('name')}",
        f"Namespace:    {meta.get('namespace')}",
        f"UID:          {meta.get('uid')}",
        f"Created:      {meta.get('creationTimestamp', '')}",
        f"Asks for:     {asks(claim)}",
        f"State:        {row.state}",
    ]
    annotations = meta.get("annotations") or {}
    if annotations:
        lines.append("Annotations:")
        lines += [f"  {k}: {v}" for k, v in sorted(annotations.items())]
    if meta.get("finalizers"):
        lines.append(f"Finalizers:   {', '.join(meta['finalizers'])}")
    consumers = [
        f"{r.get('resource', '?')}/{r.get('name', '?')}"
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if isinstance(r, dict)
    ]
    lines.append(f"Reserved for: {', '.join(consumers) if consumers else '<none>'}")
    results = allocation_results(claim)
    if results:
        lines.append(f"Allocation:   node {row.node}")
        for r in results:
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            device = index.get(key, {})
            memory = ((device.get("capacity") or {}).get("memory") or {}).get("value", "?")
            details = [
                f"request {r.get('request')}",
                str(attribute(device, "productName") or "unknown device"),
                f"memory {memory}",
            ]
            for label, attr in (("nvlink", "nvlinkDomain"), ("MIG", "profile")):
                value = attribute(device, attr)
                if value is not None:
                    details.append(f"{label} {value}")
            lines.append(f"  {key[1]}/{key[2]}: {', '.join(details)}")
    elif row.reason:
        lines.append(f"Why not:      {row.reason}")
        lines.append("              (`gpudra explain claim` shows the per-request breakdown)")
    lines.append("Events:")
    if not events:
        lines.append("  <none>")
    for e in events:
        lines.append(f"  {e.time:<13} {e.source:<14} {e.what}")
    return lines
