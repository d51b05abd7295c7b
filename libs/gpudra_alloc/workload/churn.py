"""A seeded day of arrivals and departures over a simulated fleet, as a contract `steps` problem.

Arrivals follow a Poisson process whose rate offers `load` times the fleet's GPU capacity (in
GPU-minutes, by the shapes' nominal GPU counts and mean durations); durations are exponential
around each shape's mean, cut to [5 min, 3 x mean]. Each arrival is one `allocate` step (one pod),
or one `gang` step (several pods, all or nothing); each departure is a `release` step naming the
claims. `stepTimes` (a top-level list, one entry per step, ignored by the allocator) says when
each step happens, in minutes since the start of the day. At equal times releases come first. The
same `ChurnConfig` always gives the same document.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.workload.claims import CLIQUE_ATTRIBUTE, SHAPES, device_classes, resource_claim
from gpudra_alloc.workload.errors import WorkloadError
from gpudra_alloc.workload.fleet import Fleet, build_fleet


@dataclass(frozen=True)
class GangShape:
    key: str
    pods: int
    pod_shape: str
    match_attribute: str | None
    mean_minutes: float


GANGS: dict[str, GangShape] = {
    g.key: g
    for g in (
        GangShape("gang-4x4-clique", 4, "gpu-4-nvl", CLIQUE_ATTRIBUTE, 240),
        GangShape("gang-2x8", 2, "gpu-8-nvl", None, 360),
    )
}

DEFAULT_MIX: dict[str, float] = {
    "gang-2x8": 0.02,
    "gang-4x4-clique": 0.02,
    "gpu-1": 0.22,
    "gpu-2": 0.12,
    "gpu-4-nvl": 0.10,
    "gpu-8-nvl": 0.10,
    "h100-plus": 0.10,
    "mem-150": 0.08,
    "mig": 0.24,
}


@dataclass(frozen=True)
class ChurnConfig:
    seed: int = 1
    hours: float = 24.0
    load: float = 1.3
    fleet: Fleet = field(default_factory=Fleet)
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    policy: str = "topology"
    # "shuffled": nodes listed in a seeded random order, as a scheduler's node list comes in no
    # useful order (a name-sorted list would make first-fit pack by name by accident); "sorted".
    node_order: str = "shuffled"

    def __post_init__(self) -> None:
        if self.node_order not in ("shuffled", "sorted"):
            raise WorkloadError("node_order must be shuffled or sorted")
        if not self.hours > 0:
            raise WorkloadError("hours must be positive")
        if not self.load > 0:
            raise WorkloadError("load must be positive")
        unknown = set(self.mix) - set(SHAPES) - set(GANGS)
        if unknown:
            raise WorkloadError(f"unknown shape(s) in mix: {sorted(unknown)}")
        if any(w < 0 for w in self.mix.values()) or not sum(self.mix.values()) > 0:
            raise WorkloadError("mix weights must be non-negative and not all zero")


def _gpu_minutes(key: str) -> float:
    if key in GANGS:
        gang = GANGS[key]
        return gang.pods * SHAPES[gang.pod_shape].gpus * gang.mean_minutes
    shape = SHAPES[key]
    return shape.gpus * shape.mean_minutes


def _mean_minutes(key: str) -> float:
    return GANGS[key].mean_minutes if key in GANGS else SHAPES[key].mean_minutes


def churn_problem(config: ChurnConfig) -> dict[str, Any]:
    """The whole day as one allocation problem (contract `steps`)."""
    fleet = build_fleet(config.fleet)
    rng = random.Random(config.seed)
    keys = sorted(k for k, w in config.mix.items() if w > 0)
    weights = [config.mix[k] for k in keys]
    total = sum(weights)
    mean_demand = sum(config.mix[k] / total * _gpu_minutes(k) for k in keys)
    minutes = config.hours * 60
    rate = config.load * fleet.gpus / mean_demand  # arrivals per minute

    events: list[tuple[float, int, int, dict[str, Any]]] = []
    t = rng.expovariate(rate)
    n = 0
    while t < minutes:
        key = rng.choices(keys, weights)[0]
        mean = _mean_minutes(key)
        duration = min(max(rng.expovariate(1 / mean), 5.0), 3 * mean)
        name = f"c{n:05d}-{key}"
        at = round(t, 2)
        end = round(t + duration, 2)
        if key in GANGS:
            gang = GANGS[key]
            names = [f"{name}-p{p}" for p in range(gang.pods)]
            body: dict[str, Any] = {
                "name": name,
                "pods": [[resource_claim(gang.pod_shape, pod)] for pod in names],
            }
            if gang.match_attribute:
                body["matchAttribute"] = gang.match_attribute
            events.append((at, 1, n, {"gang": body}))
        else:
            names = [name]
            events.append((at, 1, n, {"allocate": [resource_claim(key, name)]}))
        if end < minutes:
            events.append((end, 0, n, {"release": [f"default/{c}" for c in names]}))
        n += 1
        t += rng.expovariate(rate)
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    nodes = list(fleet.nodes)
    if config.node_order == "shuffled":
        random.Random(config.seed).shuffle(nodes)
    return {
        "id": f"churn-seed{config.seed}-load{config.load:g}",
        "policy": config.policy,
        "classes": device_classes(),
        "slices": fleet.slices,
        "nodes": nodes,
        "steps": [e[3] for e in events],
        "stepTimes": [e[0] for e in events],
    }
