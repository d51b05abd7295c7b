"""Reading allocation-problem documents (the JSON contract) into model objects.

Everything a problem carries is validated here; a malformed problem raises `ProblemError` (or
the model's `ValidationError`), which the contract answers with an `error` outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.errors import ProblemError
from gpudra_alloc.features import Features
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import (
    DeviceClass,
    Node,
    Quantity,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

POLICIES = ("first-fit", "topology")


@dataclass
class Step:
    allocate: list[Any] | None = None  # ResourceClaim JSON, parsed when the step runs
    release: list[str] | None = None
    gang: dict[str, Any] | None = None  # a gang (docs/PLACEMENT.md), parsed when the step runs


@dataclass
class Problem:
    id: Any
    policy: str
    features: Features
    node: Node | None
    nodes: list[Node] | None
    classes: list[DeviceClass]
    slices: list[ResourceSlice]
    claims: list[ResourceClaim] | None
    steps: list[Step] | None
    state: AllocatedState = field(default_factory=AllocatedState)
    # minutes since the start, one per step; benchmarks read it, the allocator ignores it
    step_times: list[float] | None = None


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProblemError(f"{key}: must be a list")
    return value


def _node(data: Any, where: str) -> Node:
    if isinstance(data, str):
        return Node(data)
    if not isinstance(data, dict):
        raise ProblemError(f"{where}: must be an object with name and labels")
    return Node.from_json(data, where)


def _device_id(data: Any, where: str) -> DeviceID:
    if not isinstance(data, dict):
        raise ProblemError(f"{where}: must be an object with driver, pool, device")
    parts = [data.get(k) for k in ("driver", "pool", "device")]
    texts = [p for p in parts if isinstance(p, str) and p]
    if len(texts) != 3:
        raise ProblemError(f"{where}: driver, pool and device must be non-empty strings")
    return DeviceID(texts[0], texts[1], texts[2])


def parse_problem(doc: Any, default_policy: str) -> Problem:
    if not isinstance(doc, dict):
        raise ProblemError("a problem must be a JSON object")
    policy = doc.get("policy", default_policy)
    if policy not in POLICIES:
        raise ProblemError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if "features" in doc:
        names = _list(doc, "features")
        if not all(isinstance(n, str) for n in names):
            raise ProblemError("features: must be a list of strings")
        features = Features.from_names(names)
    else:
        features = Features()
    node = _node(doc["node"], "node") if doc.get("node") is not None else None
    nodes = None
    if doc.get("nodes") is not None:
        nodes = [_node(n, f"nodes[{i}]") for i, n in enumerate(_list(doc, "nodes"))]
    classes = [parse_device_class(c) for c in _list(doc, "classes")]
    slices = [parse_resource_slice(s) for s in _list(doc, "slices")]
    has_claims, has_steps = "claims" in doc, "steps" in doc
    if has_claims == has_steps:
        raise ProblemError("a problem carries exactly one of claims and steps")
    claims = [parse_resource_claim(c) for c in _list(doc, "claims")] if has_claims else None
    steps = _steps(_list(doc, "steps")) if has_steps else None
    step_times = _step_times(doc, steps)
    state = AllocatedState()
    for i, d in enumerate(_list(doc, "allocatedDevices")):
        state.devices.add(_device_id(d, f"allocatedDevices[{i}]"))
    for i, d in enumerate(_list(doc, "allocatedSharedDevices")):
        share = d.get("shareID") if isinstance(d, dict) else None
        if not isinstance(share, str) or not share:
            raise ProblemError(f"allocatedSharedDevices[{i}]: shareID must be a non-empty string")
        state.add_share(_device_id(d, f"allocatedSharedDevices[{i}]"), share)
    for i, d in enumerate(_list(doc, "allocatedCapacity")):
        device = _device_id(d, f"allocatedCapacity[{i}]")
        capacity = d.get("capacity")
        if not isinstance(capacity, dict):
            raise ProblemError(f"allocatedCapacity[{i}]: capacity must be an object")
        try:
            consumed = {str(k): Quantity.parse(v) for k, v in capacity.items()}
        except (ValueError, TypeError) as exc:
            raise ProblemError(f"allocatedCapacity[{i}]: {exc}") from exc
        state.add_capacity(device, consumed)
    return Problem(
        doc.get("id"),
        policy,
        features,
        node,
        nodes,
        classes,
        slices,
        claims,
        steps,
        state,
        step_times,
    )


def _step_times(doc: dict[str, Any], steps: list[Step] | None) -> list[float] | None:
    if doc.get("stepTimes") is None:
        return None
    if steps is None:
        raise ProblemError("stepTimes: only a steps problem carries step times")
    times = _list(doc, "stepTimes")
    if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in times):
        raise ProblemError("stepTimes: must be a list of numbers")
    if len(times) != len(steps):
        raise ProblemError(f"stepTimes: {len(times)} entries for {len(steps)} steps")
    return [float(t) for t in times]


def _steps(raw: list[Any]) -> list[Step]:
    steps = []
    for i, step in enumerate(raw):
        if not isinstance(step, dict) or len(step) != 1:
            raise ProblemError(
                f'steps[{i}]: must be {{"allocate": [...]}}, {{"release": [...]}} '
                'or {"gang": {...}}'
            )
        if "allocate" in step:
            claims = step["allocate"]
            if not isinstance(claims, list):
                raise ProblemError(f"steps[{i}].allocate: must be a list of ResourceClaims")
            steps.append(Step(allocate=claims))
        elif "release" in step:
            names = step["release"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ProblemError(f"steps[{i}].release: must be a list of namespace/name")
            steps.append(Step(release=list(names)))
        elif "gang" in step:
            gang = step["gang"]
            if not isinstance(gang, dict):
                raise ProblemError(f"steps[{i}].gang: must be an object with name and pods")
            steps.append(Step(gang=gang))
        else:
            raise ProblemError(f"steps[{i}]: unknown step {next(iter(step))!r}")
    return steps
