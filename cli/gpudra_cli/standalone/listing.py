"""The rows of `gpudra get slices|nodes|devices`, as plain data built from ResourceSlices and
claims (pure functions; `render` and `get` format them).

A device's `claim` is the claim whose allocation holds it (several, comma-separated, for a shared
device); a node's `ready` means the inventory published a pool for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpudra_cli.standalone.results import allocation_results, attribute

Row = dict[str, str]


def slice_rows(slices: Iterable[Mapping[str, Any]]) -> list[Row]:
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        out.append(
            {
                "NAME": str((s.get("metadata") or {}).get("name", "")),
                "NODE": str(spec.get("nodeName", "")),
                "DRIVER": str(spec.get("driver", "")),
                "POOL": str(pool.get("name", "")),
                "GENERATION": str(pool.get("generation", "")),
                "DEVICES": str(len(spec.get("devices") or [])),
                "COUNTER SETS": str(len(spec.get("sharedCounters") or [])),
            }
        )
    return out


def holders(claims: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    held: dict[tuple[str, str, str], list[str]] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        for r in allocation_results(claim):
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            held.setdefault(key, []).append(name)
    return held


def device_rows(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]
) -> list[Row]:
    held = holders(claims)
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = str((spec.get("pool") or {}).get("name", ""))
        driver = str(spec.get("driver", ""))
        for d in spec.get("devices") or []:
            memory = ((d.get("capacity") or {}).get("memory") or {}).get("value", "")
            taints = [str(t.get("key", "")) for t in d.get("taints") or []]
            out.append(
                {
                    "NODE": str(spec.get("nodeName", "")),
                    "DEVICE": str(d.get("name", "")),
                    "TYPE": str(attribute(d, "type") or ""),
                    "PRODUCT": str(attribute(d, "productName") or ""),
                    "MEMORY": str(memory),
                    "NVLINK": str(attribute(d, "nvlinkDomain") or ""),
                    "MIG PROFILE": str(attribute(d, "profile") or ""),
                    "TAINTS": ",".join(taints),
                    "CLAIM": ",".join(held.get((driver, pool, str(d.get("name", ""))), [])),
                }
            )
    return out


def node_rows(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    profiles: Mapping[str, str],
) -> list[Row]:
    devices = device_rows(slices, claims)
    nodes = sorted(set(profiles) | {d["NODE"] for d in devices})
    out = []
    for node in nodes:
        mine = [d for d in devices if d["NODE"] == node]
        gpus = [d for d in mine if d["TYPE"] == "gpu"]
        mig = [d for d in mine if d["TYPE"] == "mig"]
        products = sorted({d["PRODUCT"] for d in mine if d["PRODUCT"]})
        out.append(
            {
                "NODE": node,
                "PROFILE": profiles.get(node, ""),
                "READY": "yes" if mine else "no",
                "GPUS": str(len(gpus)),
                "MIG DEVICES": str(len(mig)),
                "ALLOCATED": str(sum(1 for d in mine if d["CLAIM"])),
                "PRODUCT": ", ".join(products),
            }
        )
    return out
