"""Node and device choice for one pod's claims under the `topology` policy.

For every node (in the given order) the allocator's search proposes solutions: its own first
ones, and, where the node has a choice that matters, solutions steered by a mask (onto GPUs
already partitioned; into one NVLink domain at a time). Each solution is scored by the
placeability value it costs (`value.py`) plus 1.5 per step down a `firstAvailable` list,
and the lowest score wins; ties go to the solution that leaves fewer GPUs free on its node (best
fit), then to the earlier node, then to the earlier solution. Deterministic for the same input.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.placement.groups import NodeKeys
from gpudra_alloc.placement.memo import ScoreMemo, claims_shape
from gpudra_alloc.placement.search import masked, safe_mask, solutions
from gpudra_alloc.placement.topology import FreeState, NodeView, result_devices
from gpudra_alloc.placement.value import node_value
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_api import AllocationResult, Node, ResourceClaim

ALTERNATIVE_PENALTY = 1.5
SOLUTIONS_PER_MASK = 6
LARGE_DOMAIN = 8  # GPUs: the NVLink domains the reserve keeps whole
NEAR_WHOLE = 2  # a large domain with at most this many GPUs in use may be held by the reserve
# `held_domains` marks a MIG home as (node, MIG_HOME + domain): not held, only guarded
MIG_HOME = "mig-home:"


@dataclass(order=True, frozen=True)
class Score:
    cost: float
    left: int
    node_index: int
    solution_index: int


@dataclass
class Choice:
    node: Node
    results: list[AllocationResult]
    score: Score
    loss: float
    alternatives: int

    def to_json(self) -> dict[str, object]:
        return {
            "loss": round(self.loss, 4),
            "alternativeSteps": self.alternatives,
            "freeGpusLeft": self.score.left,
        }


@dataclass
class Chooser:
    """Scores solutions for one allocator; node views are cached per node name."""

    allocator: Allocator
    # Keep this many intact large NVLink domains (>= LARGE_DOMAIN GPUs, all free) in the fleet:
    # a claim that would take part of one of the last `reserve` waits instead. 0: no reserve.
    reserve: int = 0
    # Pods known to be waiting for a whole large domain (a scheduler's queue knows; None: not
    # known). When known, the reserve holds at most that many domains, and none when none wait.
    waiting_large: int | None = None
    # Held whatever the queue says (arrivals find whole domains ready); at most `reserve`.
    reserve_floor: int = 0
    # Whether the reserve may hold domains of MIG-capable GPUs too (more 8-GPU jobs placed,
    # fewer MIG claims: measured in the churn benchmark).
    hold_mig_domains: bool = False
    # Unless `hold_mig_domains`: MIG-capable large domains are held like the others except this
    # many MIG homes (most partitioned GPUs, then most free whole GPUs, then node name). A home
    # is never taken whole, and its last whole GPU goes only to a MIG partition while none of its
    # partitioned GPUs still takes a half-GPU partition. 0: never hold MIG-capable domains.
    mig_homes: int = 1
    # Whether an 8-GPU claim may take a MIG home whole while none of the home's node GPUs is
    # partitioned (a new home is then chosen among the other MIG-capable domains).
    home_whole: bool = False
    # Value of a small NVLink domain (a GB200 tray) whose GPUs are all free (`value.node_value`):
    # > 0 keeps whole trays for 4-GPU work and clique gangs. 0: not valued.
    whole_tray: float = 0.0
    # P of the convex slice-packing term (`value.node_value`): > 0 puts a MIG slice on the
    # partitioned GPU with the fewest free counters that takes it, and the search is steered
    # onto each partitioned GPU of a node in turn (`_slice_masks`). 0: not valued.
    slice_packing: float = 0.0
    views: dict[str, NodeView] = field(default_factory=dict)
    # Best scores per node key, reused for every node with that key (`memo.py`, `groups.py`).
    memo: ScoreMemo = field(default_factory=ScoreMemo)
    # False: search every node for every claim (the plain chooser the optimised one must equal).
    optimise: bool = True
    node_keys: NodeKeys = field(init=False)
    free_cache: dict[str, tuple[NodeView, int, FreeState]] = field(default_factory=dict)
    # the reserve's last ranking: (node states, held, settings) -> (node, domain) pairs
    _held: tuple[object, frozenset[tuple[str, str]]] = field(
        default=(None, frozenset()), init=False
    )
    _named: tuple[list[str] | None, list[Node]] = field(default=(None, []), init=False)

    def __post_init__(self) -> None:
        self.node_keys = NodeKeys(self.allocator)

    def view(self, node: Node) -> NodeView:
        view = self.views.get(node.name)
        if view is None:
            view = NodeView(node, self.allocator.pools_for(node))
            self.views[node.name] = view
        return view

    def choose(
        self,
        nodes: list[Node],
        claims: list[ResourceClaim],
        state: AllocatedState | None = None,
        mask: set[DeviceID] | None = None,
    ) -> Choice | None:
        """The best-scoring allocation of `claims` on one of `nodes`, or None when none fits."""
        base = state if state is not None else self.allocator.state
        if mask:
            base = masked(base, mask)  # the caller's mask must already be safe (`safe_mask`)
        held = self.reserve
        if self.waiting_large is not None:
            held = min(held, max(self.reserve_floor, self.waiting_large))
        protect = self.held_domains(base, held) if held > 0 else set()
        shape = claims_shape(claims) if self.optimise else None
        if shape is None:
            return self._choose_all(nodes, claims, base, protect)
        shape = self.memo.intern(shape)
        held_on: dict[str, frozenset[str]] = {}
        for name, domain in protect:
            held_on[name] = held_on.get(name, frozenset()) | {domain}
        best: Choice | None = None
        best_score: Score | None = None
        # one node per key (`groups.py`): a later node of a key ties and loses on node order
        for index, key in self.node_keys.distinct(nodes, claims, shape, base, held_on):
            node = nodes[index]
            if key is not None:
                found, remembered = self.memo.get(key, shape)
                if found:
                    if remembered is None:
                        continue
                    score = Score(remembered[0], remembered[1], index, remembered[2])
                    if best_score is None or score < best_score:
                        best, best_score = None, score
                    continue
            choice = self._best_on_node(index, node, claims, base, protect)
            if key is not None:
                self.memo.put(key, shape, None if choice is None else _remember(choice.score))
            if choice is not None and (best_score is None or choice.score < best_score):
                best, best_score = choice, choice.score
        if best is None and best_score is not None:
            # a remembered score won: the results come from the search for these claims
            node = nodes[best_score.node_index]
            best = self._best_on_node(best_score.node_index, node, claims, base, protect)
            if best is None or best.score != best_score:
                self.memo.clear()  # never expected; decide without the memo
                return self._choose_all(nodes, claims, base, protect)
        return best

    def _choose_all(
        self,
        nodes: list[Node],
        claims: list[ResourceClaim],
        base: AllocatedState,
        protect: set[tuple[str, str]],
    ) -> Choice | None:
        best: Choice | None = None
        for index, node in enumerate(nodes):
            choice = self._best_on_node(index, node, claims, base, protect)
            if choice is not None and (best is None or choice.score < best.score):
                best = choice
        return best

    def held_domains(self, state: AllocatedState, held: int) -> set[tuple[str, str]]:
        """The `held` large NVLink domains closest to whole (at most NEAR_WHOLE GPUs in use),
        most free first, then by node name. Domains of MIG-capable GPUs: all may be held when
        `hold_mig_domains`; else all but the `mig_homes` MIG homes, which are returned as
        (node, MIG_HOME + domain) guards instead (`mig_homes` 0: none held). Returns
        (node, domain) pairs."""
        names = self.allocator.node_names()
        if self._named[0] is not names:
            self._named = (names, [Node(name) for name in names])
        states = self.node_keys.state_ids(self._named[1], state)
        # the same node states and settings rank the same (`_free` reads nothing else)
        remembered = (tuple(states), held, _settings(self), len(self.allocator.slices))
        if self.optimise and self._held[0] == remembered:
            return set(self._held[1])
        ranked: list[tuple[int, str, str]] = []
        homes: list[tuple[int, int, str, str]] = []
        for name, node, in_use in zip(names, self._named[1], states, strict=True):
            view = self.view(node)
            free = self._free(view, state, in_use)
            domain_of = {g.counter_set: g.domain for g in view.gpus if g.counter_set is not None}
            for domain, size in view.domain_sizes.items():
                count = free.domains.get(domain, 0)
                if not domain or size < LARGE_DOMAIN:
                    continue
                if domain in domain_of.values() and not self.hold_mig_domains:
                    if self.mig_homes <= 0:
                        continue
                    parts = sum(1 for key in free.partitioned if domain_of.get(key) == domain)
                    homes.append((-parts, -count, name, domain))
                if count >= size - NEAR_WHOLE:
                    ranked.append((-count, name, domain))
        homes.sort()
        home = {(name, domain) for _, _, name, domain in homes[: self.mig_homes]}
        ranked.sort()
        held_set = [(name, domain) for _, name, domain in ranked if (name, domain) not in home]
        out = set(held_set[:held]) | {(name, MIG_HOME + domain) for name, domain in home}
        self._held = (remembered, frozenset(out))
        return out

    def _free(self, view: NodeView, state: AllocatedState, in_use: int) -> FreeState:
        """`view.free(state)`, remembered per node while its in-use state id (`NodeKeys`:
        devices, shares and capacity of its pools, by name) is `in_use`; it reads nothing else."""
        if not self.optimise:
            return view.free(state)
        name = view.node.name
        cached = self.free_cache.get(name)
        if cached is not None and cached[0] is view and cached[1] == in_use:
            return cached[2]
        free = view.free(state)
        self.free_cache[name] = (view, in_use, free)
        return free

    def _best_on_node(
        self,
        index: int,
        node: Node,
        claims: list[ResourceClaim],
        state: AllocatedState,
        protect: set[tuple[str, str]] | None = None,
    ) -> Choice | None:
        view = self.view(node)
        steered = [safe_mask(self.allocator, node, state, m) for m in self._masks(view, state)]
        if self.slice_packing:
            steered.extend(self._slice_masks(node, view, state))
        limit = SOLUTIONS_PER_MASK if (view.partitions or len(view.domains) > 1) else 1
        found = solutions(self.allocator, node, claims, state, limit)
        if not found:
            return None
        for mask in steered:
            found.extend(solutions(self.allocator, node, claims, masked(state, mask), limit))
        before_free = view.free(state)
        before = node_value(view, before_free, self.whole_tray, self.slice_packing)
        best: Choice | None = None
        for n, results in enumerate(found):
            after_free = view.free(state, result_devices(results))
            if protect and _splits_held(
                node.name, protect, before_free, after_free, self.home_whole
            ):
                continue
            loss = before - node_value(view, after_free, self.whole_tray, self.slice_packing)
            steps = alternative_steps(claims, results)
            score = Score(
                round(loss + ALTERNATIVE_PENALTY * steps, 6), after_free.free_gpus, index, n
            )
            if best is None or score < best.score:
                best = Choice(node, results, score, loss, steps)
        return best

    def _masks(self, view: NodeView, state: AllocatedState) -> list[set[DeviceID]]:
        masks: list[set[DeviceID]] = []
        if view.partitions:
            used = view.used_counters(state, set())
            whole = {key for key in view.counter_names if not used.get(key)}
            if whole and len(whole) < len(view.counter_names):
                # every device of the whole GPUs: the search then only sees partitioned ones
                mask = {p.id for p in view.partitions if p.counter_set in whole}
                mask.update(g.id for g in view.gpus if g.counter_set in whole)
                masks.append(mask)
        if len(view.domains) > 1:
            free = view.free(state)
            for domain in view.domains:
                if free.domains.get(domain):
                    masks.append({g.id for g in free.gpus if g.domain != domain})
        return masks

    def _slice_masks(
        self, node: Node, view: NodeView, state: AllocatedState
    ) -> list[set[DeviceID]]:
        """With two or more partitioned GPUs on the node, one mask per partitioned GPU: the whole
        GPUs and every other partitioned GPU hidden, so that the search proposes solutions on
        each of them (in its own order it meets the first partitioned GPU's slices first, and
        all SOLUTIONS_PER_MASK solutions may lie there). A partitioned GPU is hidden by marking
        in use a maximal set of its free partitions that take no counter twice and none in use:
        no counter is overdrawn (`search.safe_mask`'s rule) and no partition of it fits beside."""
        used = view.used_counters(state, set())
        names = view.counter_names
        parts = [key for key in names if used.get(key) and not used[key] >= names[key]]
        if len(parts) < 2:
            return []
        whole = {key for key in names if not used.get(key)}
        hide = {p.id for p in view.partitions if p.counter_set in whole}
        hide.update(g.id for g in view.gpus if g.counter_set in whole)
        hidden = safe_mask(self.allocator, node, state, hide) if whole else set()
        fill: dict[tuple[str, str], set[DeviceID]] = {}
        for key in parts:
            taken = set(used[key])
            block: set[DeviceID] = set()
            members = [p for p in view.partitions if p.counter_set == key]
            for p in sorted(members, key=lambda p: len(p.counters)):  # stable: device order
                if p.counters.isdisjoint(taken) and not state.is_allocated(p.id):
                    block.add(p.id)
                    taken.update(p.counters)
            fill[key] = block
        return [hidden.union(*(fill[other] for other in parts if other != key)) for key in parts]


def _settings(chooser: Chooser) -> tuple[object, ...]:
    """The chooser's scalar settings (reserve, floor, MIG rules, ...): all of them, so that a
    setting added later is part of the reserve's remembered ranking without a second thought."""
    return tuple(
        (f.name, value)
        for f in fields(chooser)
        if isinstance(value := getattr(chooser, f.name), int | float | str | bool | None)
    )


def _remember(score: Score) -> tuple[float, int, int]:
    return (score.cost, score.left, score.solution_index)


def _splits_held(
    node: str,
    held: set[tuple[str, str]],
    before: FreeState,
    after: FreeState,
    home_whole: bool = False,
) -> bool:
    """True when a held domain would lose GPUs without being taken whole, or a MIG home its
    last whole GPU other than to a MIG partition while no partitioned GPU of the node still
    takes a half-GPU partition. `home_whole`: a home none of whose node's GPUs is partitioned
    may be taken whole (all of its LARGE_DOMAIN or more GPUs at once)."""
    for name, domain in held:
        if name != node:
            continue
        if domain.startswith(MIG_HOME):
            home = domain[len(MIG_HOME) :]
            if before.domains.get(home, 0) and not after.domains.get(home, 0):
                if (
                    home_whole
                    and not before.partitioned
                    and not after.partitioned
                    and before.domains[home] >= LARGE_DOMAIN
                ):
                    continue
                partitioned = len(after.partitioned) > len(before.partitioned)
                room = any(half for _, half in after.partitioned.values())
                if not partitioned and not room:
                    return True
            continue
        left = after.domains.get(domain, 0)
        if 0 < left < before.domains.get(domain, 0):
            return True
    return False


def alternative_steps(claims: list[ResourceClaim], results: list[AllocationResult]) -> int:
    """How far down their `firstAvailable` lists the chosen subrequests are, summed."""
    steps = 0
    for claim, result in zip(claims, results, strict=True):
        order = {
            f"{r.name}/{sub.name}": i
            for r in claim.requests
            for i, sub in enumerate(r.first_available)
        }
        seen: set[str] = set()
        for r in result.results:
            if r.request in order and r.request not in seen:
                seen.add(r.request)
                steps += order[r.request]
    return steps
