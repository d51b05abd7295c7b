"""Replaying a `steps` day as a scheduler lives it: pods that do not fit wait and are retried.

The contract runs each step once; a real scheduler keeps an unschedulable pod pending and tries
again when capacity frees up. `Replay` does that for one policy: an `allocate` (one pod) or
`gang` step is placed at once or queued; a `release` step frees the named claims and then
retries the queue in arrival order. A pod that failed everywhere can only fit on a node whose
state changed since (placements only take capacity away elsewhere), so a pending pod is retried
on the released nodes only (on all nodes when a topology reserve is set and the release made a
large NVLink domain whole again, since the reserve may have held the pod back elsewhere); a pending gang is retried on all nodes, whenever a release frees at
least as many devices as its smallest pod needs. A `release` of a pod still pending withdraws it
(its job gave up). Every placement goes through the same search as the contract. Before each
attempt the topology chooser is told how many pending pods need a whole large NVLink domain
(`large_pods_waiting`: each pod of a gang counts, so a gang of 2 x 8 GPUs waits for two).

`node_choice` says how the `first-fit` policy picks a node. "first" (the default): the first node
in list order where the search succeeds, which is first-fit bin packing across nodes. "random":
stock kube-scheduler's choice, a reference for benchmarks and not an allocator policy: the
search on every node (Kubernetes' device choice on each), then a node drawn uniformly among the
feasible ones with the highest DRA score (`gang.kube_pick`), from a `random.Random(seed)` so a
replay is reproducible; each pod of a gang the same way, one after the other. Retrying a pending
pod on the released nodes only stays exact: the nodes it fits are all among them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.errors import ProblemError
from gpudra_alloc.placement.choose import LARGE_DOMAIN, NEAR_WHOLE, Chooser
from gpudra_alloc.placement.gang import Gang, kube_pick, parse_gang, place_gang
from gpudra_alloc.placement.topology import result_devices
from gpudra_alloc.placement.waiting import large_pods, pod_devices
from gpudra_alloc.state import DeviceID
from gpudra_alloc.validate import validate_allocation
from gpudra_api import (
    AllocationResult,
    Node,
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

SHAPE_LABEL = "gpudra.io/shape"
NODE_CHOICES = ("first", "random")


@dataclass
class PodRecord:
    """One arrival (a pod or a gang) and what became of it."""

    key: str
    shape: str
    claims: list[ResourceClaim]
    arrived_step: int
    arrived_at: float
    gang: Gang | None = None
    placed_step: int | None = None
    placed_at: float | None = None
    released_at: float | None = None
    nodes: list[str] = field(default_factory=list)
    results: list[AllocationResult] = field(default_factory=list)
    withdrawn: bool = False


@dataclass
class Replay:
    allocator: Allocator
    nodes: list[Node]
    policy: str
    times: list[float]
    reserve: int = 0
    reserve_floor: int = 0
    # check every placement with `validate_allocation` before applying it (tests; slow)
    validate: bool = False
    # first-fit's node choice: "first" node that fits, or "random" (kube-scheduler; module doc)
    node_choice: str = "first"
    seed: int = 0
    chooser: Chooser = field(init=False)
    rejected: list[str] = field(default_factory=list)
    records: list[PodRecord] = field(default_factory=list)
    pending: list[PodRecord] = field(default_factory=list)
    by_claim: dict[str, PodRecord] = field(default_factory=dict)
    attempts: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.chooser = Chooser(
            self.allocator, reserve=self.reserve, reserve_floor=self.reserve_floor
        )
        self._node_of: dict[str, Node] = {n.name: n for n in self.nodes}
        if self.node_choice not in NODE_CHOICES:
            raise ProblemError(f"node_choice must be one of {', '.join(NODE_CHOICES)}")
        if self.node_choice != "first" and self.policy != "first-fit":
            raise ProblemError("node_choice applies to the first-fit policy only")
        self._rng = random.Random(self.seed) if self.node_choice == "random" else None

    @staticmethod
    def from_problem(
        doc: dict[str, Any],
        policy: str,
        reserve: int = 0,
        reserve_floor: int = 0,
        node_choice: str = "first",
        seed: int = 0,
    ) -> Replay:
        if not isinstance(doc.get("steps"), list):
            raise ProblemError("replay needs a problem with steps")
        classes = [parse_device_class(c) for c in doc.get("classes", [])]
        slices = [parse_resource_slice(s) for s in doc.get("slices", [])]
        allocator = Allocator(classes, slices)
        nodes = [Node(n["name"], dict(n.get("labels", {}))) for n in doc.get("nodes", [])]
        if not nodes:
            nodes = [Node(name) for name in allocator.node_names()]
        times = doc.get("stepTimes") or list(range(len(doc["steps"])))
        if len(times) != len(doc["steps"]):
            raise ProblemError("stepTimes: needs one entry per step")
        return Replay(
            allocator,
            nodes,
            policy,
            [float(t) for t in times],
            reserve,
            reserve_floor,
            node_choice=node_choice,
            seed=seed,
        )

    def run(self, steps: list[Any], progress: Callable[[int], None] | None = None) -> None:
        for index, step in enumerate(steps):
            self.step(index, step)
            if progress is not None:
                progress(index)

    def step(self, index: int, step: Any) -> None:
        at = self.times[index]
        if not isinstance(step, dict) or len(step) != 1:
            raise ProblemError(f"steps[{index}]: must have exactly one of allocate, gang, release")
        if "release" in step:
            self._release(index, at, list(step["release"]))
        elif "allocate" in step:
            claims = [parse_resource_claim(c) for c in step["allocate"]]
            shape = _shape(step["allocate"])
            self._arrive(
                PodRecord(claims[0].key if claims else str(index), shape, claims, index, at)
            )
        elif "gang" in step:
            gang = parse_gang(step["gang"])
            shape = gang.name.split("-", 1)[-1]
            self._arrive(PodRecord(gang.name, shape, gang.claims, index, at, gang=gang))
        else:
            raise ProblemError(f"steps[{index}]: unknown step {next(iter(step))!r}")

    # ------------------------------------------------------------------ placing
    def _arrive(self, record: PodRecord) -> None:
        self.records.append(record)
        for claim in record.claims:
            self.by_claim[claim.key] = record
        if not self._try(record, self.nodes, record.arrived_step, record.arrived_at):
            self.pending.append(record)

    def _try(self, record: PodRecord, nodes: list[Node], index: int, at: float) -> bool:
        self.attempts += 1
        self.chooser.waiting_large = large_pods_waiting(self.pending, record)
        start = time.perf_counter()
        try:
            placed = self._place(record, nodes)
        finally:
            self.seconds += time.perf_counter() - start
        if placed is None:
            return False
        record.placed_step, record.placed_at = index, at
        pods = record.gang.pods if record.gang is not None else [record.claims]
        for (node, results), claims in zip(placed, pods, strict=True):
            if self.validate:
                problems = validate_allocation(self.allocator, node, claims, results)
                if problems:
                    self.rejected.append(f"{record.key} on {node.name}: {problems[0]}")
            self.allocator.state.apply(results)
            record.nodes.append(node.name)
            record.results.extend(results)
        return True

    def _place(
        self, record: PodRecord, nodes: list[Node]
    ) -> list[tuple[Node, list[AllocationResult]]] | None:
        if record.gang is not None:
            gang = place_gang(
                self.allocator, self.nodes, record.gang, self.policy, self.chooser, rng=self._rng
            )
            return gang.pods
        if self.policy == "first-fit" and self._rng is not None:
            feasible: list[tuple[Node, list[AllocationResult]]] = []
            for node in nodes:
                found = self.allocator.allocate(node, record.claims)
                if found.results is not None:
                    feasible.append((node, found.results))
            picked = kube_pick(self._rng, record.claims, feasible)
            return None if picked is None else [picked]
        if self.policy == "first-fit":
            outcome = self.allocator.choose_node(nodes, record.claims)
            if outcome is None or outcome.results is None:
                return None
            return [(outcome.node, outcome.results)]
        choice = self.chooser.choose(nodes, record.claims)
        return None if choice is None else [(choice.node, choice.results)]

    # ------------------------------------------------------------------ releasing
    def _release(self, index: int, at: float, names: list[str]) -> None:
        records = {id(r): r for r in (self.by_claim.get(n) for n in names) if r is not None}
        freed: set[str] = set()
        devices = 0
        for record in records.values():
            if record.placed_step is None:
                if record in self.pending:
                    self.pending.remove(record)
                record.withdrawn = True
                continue
            if record.released_at is not None:
                continue
            self.allocator.state.release(record.results)
            record.released_at = at
            freed.update(record.nodes)
            devices += len(result_devices(record.results))
        if freed:
            self._retry(index, at, freed, devices)

    def _retry(self, index: int, at: float, freed: set[str], devices: int) -> None:
        nodes = [n for n in self.nodes if n.name in freed]
        if self.policy != "first-fit" and self.reserve and self._made_near_whole(nodes):
            # a pod held back by the reserve may now fit on any node, not only the freed ones
            nodes = self.nodes
        for record in list(self.pending):
            if record.gang is not None and devices < _smallest_pod(record.gang):
                continue
            if self._try(record, nodes, index, at):
                self.pending.remove(record)

    def _made_near_whole(self, nodes: list[Node]) -> bool:
        for node in nodes:
            view = self.chooser.view(node)
            free = view.free(self.allocator.state)
            for domain, size in view.domain_sizes.items():
                count = free.domains.get(domain, 0)
                if domain and size >= LARGE_DOMAIN and count >= size - NEAR_WHOLE:
                    return True
        return False

    def in_use(self) -> set[DeviceID]:
        return set(self.allocator.state.devices)


def _shape(raw: list[Any]) -> str:
    """The shape label of a pod's first claim (the workload generator sets it), else `pod`."""
    if raw and isinstance(raw[0], dict):
        labels = raw[0].get("metadata", {}).get("labels") or {}
        shape = labels.get(SHAPE_LABEL)
        if isinstance(shape, str):
            return shape
    return "pod"


def large_pods_waiting(pending: list[PodRecord], trying: PodRecord | None = None) -> int:
    """Pods of the pending records (but `trying`) that each need a whole large NVLink domain:
    a gang of 2 x 8 GPUs waits for two domains, so it counts twice (`waiting.large_pods`)."""
    return large_pods(pod for r in pending if r is not trying for pod in _pods(r))


def _pods(record: PodRecord) -> list[list[ResourceClaim]]:
    return record.gang.pods if record.gang is not None else [record.claims]


def _smallest_pod(gang: Gang) -> int:
    return min(pod_devices(pod) for pod in gang.pods)
