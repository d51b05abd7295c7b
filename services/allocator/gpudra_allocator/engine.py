"""The allocator's decision step: claims + slices + what is held → devices on one node, or why not.

Thin glue over `gpudra_alloc`: an `Allocator` is built once per slice-index version (its per-node
pool cache stays valid until the slices change) and reads the live `AllocatedState` that the
reservation mirror maintains. `first-fit` takes the first node (by name) where Kubernetes' search
succeeds; `topology` (the default) lets the placement layer score the solutions of every node
(NVLink domains kept whole, fragmentation low) — both bounded by Kubernetes' rules. Both get
the same list of every node, the same object until a node comes or goes: the core skips full
nodes itself and both it and the placement layer keep per-node memos keyed on that list (a
slice change drops the touched nodes' entries: `gpudra_alloc.rebuild`), so a decision
neither walks every device of the fleet nor makes them start over (a list without the full nodes,
rebuilt whenever a node filled up or freed, cost more than the search it saved). The classes' CEL
selectors are compiled when the engine is made (`warm`): building the CEL parser takes about a
second, which the first claim would otherwise wait for — and every claim queued behind it. An
unschedulable decision carries the placement layer's explanation and its one-line sentence. The same inputs always give the same
decision. Invalid input raises `AllocationInputError`; a selector that fails at run time on a
device raises its subclass `CelRuntimeError`, which the worker holds and retries (`cel_reason`).

After a slice change the engine rebuilds from what it had (`gpudra_alloc.rebuild`,
`placement.carry`): the pools, node keys, views and remembered scores of every node the change
did not touch carry over, and the indexes and caches move to the new allocator and chooser with
only the touched entries redone (the old ones are retired). One node's change, warm-up
included, costs about 0.7 ms at 1,000 DGX-like nodes and 2.5 ms at 10,000 under `topology`,
0.5 and 2-2.4 ms under `first-fit`; a full rebuild about 70-80 ms per 1,000 (mostly the
per-node keys; `bench/alloc_bench.py --rebuild`, CPU time). A node that joins or leaves costs
the same kind of work: the node list is edited where the node stands (`_nodes_for`), and the
core's full-node memo and the placement layer's records and kept keys follow the edited list
with only that node redone. What still grows with the fleet runs at C speed: the slice list
and the node lists copied and compared by identity. A change to a pool that is
not node-local (`nodeSelector`,
`allNodes`) recomputes every node, and new classes (`use_classes`) build anew; decisions are
the same as a freshly built engine's either way.
`warm_up` does the rebuild ahead (the worker's `Warmer` runs it shortly after a change) so that
the next decision does not; a decision never depends on it: one that finds the engine built for
another version (or another state) rebuilds. `builds` counts the rebuilds, `nodes_rebuilt` the
nodes whose per-node state they recomputed.

The whole-domain reserve (`reserve`, `reserve_floor`, `mig_homes`: the service's settings,
`docs/PLACEMENT.md`) is off by default (scoring only). With it on, `waiting_large` is what the
caller knows of the queue (the worker sets it before each decision: pods it holds that need a
whole large NVLink domain), and a claim the reserve holds back, one that would fit on some node
without it, gets a reason that says so (`held_reason`) and a `heldByReserve` key in its
explanation instead of the closest-node explanation of a claim that fits nowhere: the check runs
the choice once more with the reserve off, only after a failure.
"""

from __future__ import annotations

import contextlib
import json
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpudra_alloc import (
    AllocatedState,
    AllocationInputError,
    Allocator,
    CelRuntimeError,
    Features,
    NodeOutcome,
    first_fit,
)
from gpudra_alloc.builtin import builtin_class_documents
from gpudra_alloc.placement import (
    Chooser,
    Gang,
    GangPlacement,
    choose_node,
    place_gang,
    why_pending,
)
from gpudra_alloc.placement.carry import carried_chooser
from gpudra_alloc.placement.choose import MIG_HOME
from gpudra_alloc.rebuild import rebuild
from gpudra_allocator.errors import SettingsError
from gpudra_api import (
    AllocationResult,
    ApiError,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
)
from gpudra_cel import CelError, compile_selector


@dataclass(frozen=True)
class Decision:
    """An allocation (`results`, one per claim in input order, on `node`) or the reason none."""

    results: tuple[AllocationResult, ...] = ()
    node: str = ""
    reason: str = ""
    explanation: Mapping[str, Any] = field(default_factory=dict)

    @property
    def allocated(self) -> bool:
        return bool(self.results)


@dataclass(frozen=True)
class GangDecision:
    """Every member's node and result (in member order), or the reason the gang cannot be placed."""

    placed: tuple[tuple[str, AllocationResult], ...] = ()
    group: str | None = None
    reason: str = ""

    @property
    def allocated(self) -> bool:
        return bool(self.placed)


def load_classes(path: str = "") -> list[DeviceClass]:
    """DeviceClasses from a YAML file (several documents), or the built-in ones."""
    try:
        if path:
            text = Path(path).read_text(encoding="utf-8")
            docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        else:
            docs = builtin_class_documents()
        return [parse_device_class(doc) for doc in docs]
    except (OSError, yaml.YAMLError, ApiError) as exc:
        raise SettingsError(f"device classes {path or '(built-in)'}: {exc}") from exc


def summary(explanation: Mapping[str, Any]) -> str:
    """One line a person can act on, from the core's explanation."""
    closest = explanation.get("closest") or {}
    node = explanation.get("node")
    text = str(explanation.get("reason") or "cannot allocate")
    tried = explanation.get("nodesTried", 0)
    if node:
        text += (
            f"; {tried} node(s) tried, closest {node} placed "
            f"{closest.get('devicesAllocated', 0)} of {closest.get('devicesRequested', 0)} devices"
        )
    else:
        text += f"; {tried} node(s) tried"
    removed: dict[str, int] = {}
    for claim in explanation.get("claims", ()):
        for request in claim.get("requests", ()):
            for stage, count in (request.get("removed") or {}).items():
                removed[stage] = removed.get(stage, 0) + int(count)
    parts = [f"{stage} {count}" for stage, count in removed.items() if count]
    if parts:
        text += f" (devices removed there by: {', '.join(parts)})"
    return text


class Engine:
    def __init__(
        self,
        classes: Iterable[DeviceClass],
        policy: str,
        features: Features | None = None,
        incremental: bool = True,
        reserve: int = 0,
        reserve_floor: int = 0,
        mig_homes: int = 1,
    ) -> None:
        """`incremental` False: rebuild every node after each slice change (what a new engine
        does; the incremental path is checked against it). `reserve`, `reserve_floor`,
        `mig_homes`: the topology chooser's whole-domain reserve (first-fit ignores them)."""
        self.builtin = list(classes)
        self.classes = list(self.builtin)
        self.policy = policy
        self.features = features or Features()
        self._allocator: Allocator | None = None
        self._chooser: Chooser | None = None
        self._nodes: list[Node] = []
        self._version = -1
        # nodes whose pools (and keys) `warm_up` has yet to compute; None: every node
        self._cold: frozenset[str] | None = None
        # the claims of the last allocated decision: `warm_up` searches for their shape
        self._recent: list[ResourceClaim] = []
        self.incremental = incremental
        self.reserve, self.reserve_floor, self.mig_homes = reserve, reserve_floor, mig_homes
        # pods waiting for a whole large NVLink domain, as the caller knows (None: not known)
        self.waiting_large: int | None = None
        self.builds = 0
        self.nodes_rebuilt = 0
        self.held_back_count = 0  # decisions the reserve held back (a claim that would fit)
        self.warm()

    def warm(self) -> None:
        """Compile the classes' CEL selectors now (the compiled programs are memoized by the CEL
        library); a selector that does not compile is reported when a claim uses it."""
        options = self.features.cel_options()
        for device_class in self.classes:
            for selector in device_class.selectors:
                if selector.expression is not None:
                    with contextlib.suppress(CelError):
                        compile_selector(selector.expression, options=options)

    def use_classes(self, applied: Iterable[DeviceClass]) -> None:
        """Classes applied to the cluster, over the built-in ones (an applied class wins)."""
        merged = {c.name: c for c in self.builtin}
        merged.update({c.name: c for c in applied})
        self.classes = [merged[name] for name in sorted(merged)]
        self._allocator = None

    def missing_classes(self, claims: Iterable[ResourceClaim]) -> list[str]:
        """Device classes the claims name that nobody defined (yet): wait, do not fail."""
        known = {c.name for c in self.classes}
        named = {
            sub.device_class_name
            for claim in claims
            for request in claim.requests
            for sub in ((request.exactly,) if request.exactly else request.first_available)
        }
        return sorted(named - known)

    def current(self, version: int, state: AllocatedState) -> bool:
        """Whether the engine is built for slice-index `version` and `state` (a decision for
        them rebuilds nothing)."""
        return (
            self._allocator is not None
            and version == self._version
            and self._allocator.state is state
        )

    def _for(
        self, version: int, slices: Iterable[ResourceSlice], state: AllocatedState
    ) -> Allocator:
        if self._allocator is not None and self.current(version, state):
            if self._chooser is not None:
                self._chooser.waiting_large = self.waiting_large
            return self._allocator
        old, touched = self._allocator, None
        names = old.node_names() if old is not None else None
        if old is None or not self.incremental:
            allocator = Allocator(self.classes, slices, self.features, state)
            chooser = Chooser(
                allocator,
                reserve=self.reserve,
                reserve_floor=self.reserve_floor,
                mig_homes=self.mig_homes,
            )
        else:
            rebuilt = rebuild(old, slices, state)
            allocator, touched = rebuilt.allocator, rebuilt.touched
            assert self._chooser is not None
            chooser, carried = carried_chooser(self._chooser, allocator, touched)
            if not carried and self.policy == "topology":
                touched = None  # the keys of every node are computed again
        if allocator.node_names() is not names:  # else no node came or went: the list stays
            self._nodes = self._nodes_for(names, allocator.node_names(), touched)
        if touched is None or self._cold is None:
            self._cold = None
        else:
            self._cold = self._cold | touched
        chooser.waiting_large = self.waiting_large
        self._allocator, self._chooser, self._version = allocator, chooser, version
        self.builds += 1
        if touched is None:
            self.nodes_rebuilt += len(self._nodes)
        else:
            self.nodes_rebuilt += sum(1 for name in touched if name in allocator.by_node)
        return allocator

    def _nodes_for(
        self, was: list[str] | None, now: list[str], touched: frozenset[str] | None
    ) -> list[Node]:
        """The node list for the sorted names `now`, the engine's list having been for `was`:
        the same `Node` objects for the names kept (the core's and the placement layer's
        memos compare them by identity). The nodes that came or went are among `touched`
        (a node-local change; None: any may have) and are found by bisection: a node joining
        or leaving costs a C-speed copy of the list. Otherwise a pass over the nodes."""
        nodes = self._nodes
        if was is not None and touched is not None and len(was) == len(nodes):
            moved = [name for name in touched if _listed(was, name) != _listed(now, name)]
            went = sorted(bisect_left(was, name) for name in moved if _listed(was, name))
            came = sorted(bisect_left(now, name) for name in moved if _listed(now, name))
            out = nodes[:]
            for at in reversed(went):
                del out[at]
            for at in came:  # ascending: each lands where `now` has it
                out.insert(at, Node(now[at]))
            if len(out) == len(now):
                return out
        by_name = {node.name: node for node in nodes}
        return [by_name.get(name) or Node(name) for name in now]

    def warm_up(self, slices: Iterable[ResourceSlice], version: int, state: AllocatedState) -> None:
        """Build what the first decision at `version` would: the allocator and chooser (unless
        built already), the pools of every node and, under `topology`, its node keys (only
        those of nodes the change touched are computed: the others carried over), then the
        search for the last allocated claims' shape (no explanation)."""
        allocator = self._for(version, slices, state)
        if self._chooser is not None and self.policy == "topology":
            self._chooser.node_keys.prepare(self._nodes)  # the pools too (carried lists: cheap)
        elif self._cold is None:
            for node in self._nodes:
                allocator.pools_for(node)
        else:  # the others' pools were computed before and carried over
            for name in self._cold:
                if name in allocator.by_node:  # not the nodes that went
                    allocator.pools_for(Node(name))
        self._cold = frozenset()
        if self._recent and self._nodes:
            with contextlib.suppress(AllocationInputError):
                self._outcome(allocator, self._recent)

    def placement(
        self, slices: Iterable[ResourceSlice], version: int, state: AllocatedState
    ) -> tuple[Allocator, Chooser | None]:
        """The allocator `decide` uses for these inputs, and the topology chooser when the policy
        is `topology` (None for `first-fit`): what the placement layer's gang step needs."""
        allocator = self._for(version, slices, state)
        return allocator, self._chooser if self.policy == "topology" else None

    def _candidates(self, allocator: Allocator, claims: list[ResourceClaim]) -> list[Node]:
        """Every node in name order: the same list object until the slices change (see the
        module docstring for why full nodes stay in it)."""
        return self._nodes

    def candidates(
        self,
        claims: list[ResourceClaim],
        slices: Iterable[ResourceSlice],
        version: int,
        state: AllocatedState,
    ) -> list[Node]:
        """The nodes `decide` offers the search for `claims`, in order."""
        return self._candidates(self._for(version, slices, state), claims)

    def decide_gang(
        self,
        name: str,
        members: list[ResourceClaim],
        match_attribute: str | None,
        slices: Iterable[ResourceSlice],
        version: int,
        state: AllocatedState,
    ) -> GangDecision:
        """All members (one pod each) placed by the placement layer's gang step, or why not.

        Nothing here reserves anything: the caller reserves every member's devices, or none.
        """
        allocator, chooser = self.placement(slices, version, state)
        nodes = [Node(n) for n in allocator.node_names()]
        gang = Gang(name, [[claim] for claim in members], match_attribute)
        placed = place_gang(allocator, nodes, gang, self.policy, chooser)
        if placed.pods is not None:
            return GangDecision(
                placed=tuple((node.name, results[0]) for node, results in placed.pods),
                group=placed.group,
            )
        held = self.held_back(
            lambda: gang_node(place_gang(allocator, nodes, gang, self.policy, chooser))
        )
        if held is not None:
            return GangDecision(reason=f"gang {name}: {held_reason(held)}")
        failed = placed.failed_pod or 0
        explanation = why_pending(allocator, nodes, gang.pods[failed])
        reason = summary(explanation)
        if explanation.get("sentence"):
            reason = f"{explanation['sentence']} ({reason})"
        where = f" in one {match_attribute}" if match_attribute else ""
        return GangDecision(
            reason=(
                f"gang {name}: its {len(members)} claims do not fit together{where} "
                f"(at most {failed} placed); {reason}"
            )
        )

    def reserve_status(self) -> dict[str, Any]:
        """The reserve's settings and what it did (`/statusz` `reserve`); `waitingLarge` is the
        count the last decision was given (null: the reserve is off or none decided yet)."""
        return {
            "reserve": self.reserve if self.reserving else 0,
            "reserveFloor": self.reserve_floor if self.reserving else 0,
            "migHomes": self.mig_homes,
            "waitingLarge": self.waiting_large if self.reserving else None,
            "heldBack": self.held_back_count,
        }

    @property
    def reserving(self) -> bool:
        """Whether decisions run the whole-domain reserve (topology with `reserve` > 0)."""
        return self.policy == "topology" and self.reserve > 0

    def _outcome(self, allocator: Allocator, claims: list[ResourceClaim]) -> NodeOutcome | None:
        """The policy's answer for `claims` on every node (None when there are no nodes, or
        the reserve's chooser found no node)."""
        nodes = self._candidates(allocator, claims)
        if not nodes:
            return None
        if self.policy == "topology":
            assert self._chooser is not None
            if self.reserving:
                # not `choose_node`: its fallback (the core's first node that fits) would place
                # a claim the reserve held back
                choice = self._chooser.choose(nodes, claims)
                return None if choice is None else NodeOutcome(choice.node, choice.results)
            return choose_node(allocator, nodes, claims, self._chooser)
        # As kube-scheduler: when no node fits, a CEL error its search meets on a node it would
        # have filtered is the answer (`first_fit`), not "unschedulable".
        return first_fit(allocator, nodes, claims)

    def held_back(self, fits: Callable[[], str | None]) -> dict[str, Any] | None:
        """After a failed decision under the reserve: `fits()` (the same choice, returning the
        node it would take or None) run with the reserve off; when it fits, what held it back
        (`heldByReserve` of the explanation), else None. Cheap to skip: only a failure pays."""
        chooser = self._chooser
        if not self.reserving or chooser is None:
            return None
        held = chooser.reserve  # the domains `Chooser.choose` held, counted as it counts them
        if chooser.waiting_large is not None:
            held = min(held, max(chooser.reserve_floor, chooser.waiting_large))
        if held <= 0:
            return None  # nothing was held: the claim does not fit, reserve or not
        protect = chooser.held_domains(chooser.allocator.state, held)
        chooser.reserve = 0
        try:
            node = fits()
        finally:
            chooser.reserve = self.reserve
        if node is None:
            return None
        homes = sorted(f"{n}/{d[len(MIG_HOME):]}" for n, d in protect if d.startswith(MIG_HOME))
        self.held_back_count += 1
        return {
            "reserve": self.reserve,
            "reserveFloor": self.reserve_floor,
            "waitingLarge": chooser.waiting_large,
            "heldDomains": sorted(f"{n}/{d}" for n, d in protect if not d.startswith(MIG_HOME)),
            "migHomes": homes,
            "fitsOn": node,
        }

    def decide(
        self,
        claims: list[ResourceClaim],
        slices: Iterable[ResourceSlice],
        version: int,
        state: AllocatedState,
    ) -> Decision:
        allocator = self._for(version, slices, state)
        outcome = self._outcome(allocator, claims)
        if outcome is not None and outcome.results is not None:
            self._recent = claims
            return Decision(results=tuple(outcome.results), node=outcome.node.name)
        held = None
        if outcome is None and self._nodes:
            chooser, nodes = self._chooser, self._nodes

            def fits() -> str | None:
                assert chooser is not None
                choice = chooser.choose(nodes, claims)
                return None if choice is None else choice.node.name

            held = self.held_back(fits)
        if held is not None:
            reason = held_reason(held)
            explanation = {
                "reason": reason,
                "nodesTried": len(self._nodes),
                "sentence": reason,
                "heldByReserve": held,
            }
            return Decision(reason=reason, explanation=explanation)
        explanation = why_pending(allocator, self._nodes, claims)
        reason = summary(explanation)
        if explanation.get("sentence"):
            reason = f"{explanation['sentence']} ({reason})"
        return Decision(reason=reason, explanation=explanation)


def _listed(names: list[str], name: str) -> bool:
    """Whether `name` is in the sorted `names`."""
    at = bisect_left(names, name)
    return at < len(names) and names[at] == name


def gang_node(placed: GangPlacement) -> str | None:
    """The node of a gang placement's first pod (None: not placed)."""
    return placed.pods[0][0].name if placed.pods else None


def held_reason(held: Mapping[str, Any]) -> str:
    """The one line a claim the reserve holds back gets (`Engine.held_back`'s `heldByReserve`)."""
    domains = held.get("heldDomains") or []
    waiting = held.get("waitingLarge")
    queue = "queue not known" if waiting is None else f"{waiting} waiting"
    parts = []
    if domains:
        parts.append(
            f"keeps {len(domains)} whole NVLink domain(s) for 8-GPU claims "
            f"({', '.join(domains)}; {queue}, floor {held.get('reserveFloor', 0)})"
        )
    homes = held.get("migHomes") or []
    if homes:
        parts.append(f"guards the MIG home {', '.join(homes)} for MIG slices")
    return (
        f"held back: the topology reserve {' and '.join(parts)}; it fits on "
        f"{held.get('fitsOn')} once more whole domains are free than the reserve keeps or fewer "
        f"8-GPU claims wait (allocator setting reserve={held.get('reserve')})"
    )


def cel_reason(error: CelRuntimeError) -> str:
    """The reason a claim held for a CEL selector that fails at run time on a device gets: the
    core's message (Kubernetes' wording and hint), and that the claim waits rather than being
    refused: a republished slice or a fixed class may clear it."""
    return f"{error} (retried when the ResourceSlices, DeviceClasses or allocations change)"


def allocation_json(result: AllocationResult) -> bytes:
    return json.dumps(result.to_json(), separators=(",", ":"), sort_keys=True).encode()
