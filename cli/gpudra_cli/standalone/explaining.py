"""`gpudra explain claim`: the allocation search run again, here, on what the system holds now.

The problem handed to `gpudra_alloc.solve` (the allocation-problem contract) is the cluster's
DeviceClasses, every published ResourceSlice, the claim's spec, and the devices every *other*
claim holds; so the answer says whether the claim fits now and, when it does not, how many devices
each stage of the search removed on the closest node. It is an explanation, not a decision:
nothing is reserved or written.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpudra_alloc import FEATURE_NAMES, STAGES, solve
from gpudra_cli.standalone.errors import ManifestError
from gpudra_cli.standalone.results import allocation_results


def load_classes(path: Path) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: cannot read DeviceClasses: {exc}") from exc
    classes = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DeviceClass"]
    if not classes:
        raise ManifestError(f"{path}: no DeviceClass in the file")
    return classes


def problem(
    claim: Mapping[str, Any],
    others: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    uid = (claim.get("metadata") or {}).get("uid")
    held = []
    for other in others:
        if (other.get("metadata") or {}).get("uid") == uid:
            continue
        for r in allocation_results(other):
            held.append({k: r.get(k) for k in ("driver", "pool", "device")})
    bare = {k: copy.deepcopy(v) for k, v in claim.items() if k != "status"}
    return {
        "classes": list(classes),
        "slices": list(slices),
        "claims": [bare],
        "allocatedDevices": held,
        "features": sorted(FEATURE_NAMES),
    }


def explain_lines(claim: Mapping[str, Any], answer: Mapping[str, Any]) -> list[str]:
    meta = claim.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    current = allocation_results(claim)
    lines = []
    if current:
        pools = sorted({str(r.get("pool")) for r in current})
        lines.append(f"{key} is allocated on {', '.join(pools)} ({len(current)} devices).")
    outcome = answer.get("outcome")
    if outcome == "allocated":
        devices = [
            f"{r.get('pool')}/{r.get('device')}"
            for result in answer.get("results") or []
            for r in (result.get("devices") or {}).get("results") or []
        ]
        lines.append(
            f"Searching now (its own devices free, every other claim's held), it fits on "
            f"{answer.get('node')}: {', '.join(devices)}."
        )
        return lines
    if outcome != "unschedulable":
        lines.append(f"The search could not run: {answer.get('error', outcome)}")
        return lines
    why = answer.get("explanation") or {}
    closest = why.get("closest") or {}
    lines.append(
        f"It does not fit now: {why.get('nodesTried', 0)} node(s) tried; closest "
        f"{why.get('node') or 'none'} placed {closest.get('devicesAllocated', 0)} of "
        f"{closest.get('devicesRequested', 0)} devices."
    )
    if why.get("reason"):
        lines.append(f"Reason: {why['reason']}")
    for c in why.get("claims") or []:
        for r in c.get("requests") or []:
            removed = r.get("removed") or {}
            stages = ", ".join(f"{s} {removed[s]}" for s in STAGES if removed.get(s))
            lines.append(
                f"  request {r.get('request')}: wants {r.get('requested')}, node has "
                f"{r.get('devices')} devices, {r.get('candidates')} candidates"
                + (f"; removed by {stages}" if stages else "")
            )
    return lines


def explain(
    claim: Mapping[str, Any],
    others: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
) -> list[str]:
    return explain_lines(claim, solve(problem(claim, others, slices, classes)))
