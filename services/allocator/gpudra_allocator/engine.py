"""The allocator's decision step: claims + slices + what is held → devices on one node, or why not.

Thin glue over `gpudra_alloc`: an `Allocator` is built once per slice-index version (its per-node
pool cache stays valid until the slices change) and reads the live `AllocatedState` that the
reservation mirror maintains. `first-fit` takes the first node (by name) where Kubernetes' search
succeeds; `topology` (the default) lets the placement layer score the solutions of every node
(NVLink domains kept whole, fragmentation low) — both bounded by Kubernetes' rules. Nodes whose
every device is taken are skipped before searching; which nodes those are is kept up to date per
decision from the pools whose in-use devices changed (`InUseDevices.pool_version`), so a decision
does not walk every device of the fleet, and the candidate list stays the same object while no
node fills up or frees (the core's own "known full" memo is keyed on it). The classes' CEL
selectors are compiled when the engine is made (`warm`): building the CEL parser takes about a
second, which the first claim would otherwise wait for — and every claim queued behind it. An unschedulable decision carries the
placement layer's explanation and its one-line sentence. The same inputs always give the same
decision. Invalid input raises `AllocationInputError`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpudra_alloc import AllocatedState, Allocator, DeviceID, Features
from gpudra_alloc.builtin import builtin_class_documents
from gpudra_alloc.placement import Chooser, Gang, choose_node, place_gang, why_pending
from gpudra_alloc.state import InUseDevices
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
        self, classes: Iterable[DeviceClass], policy: str, features: Features | None = None
    ) -> None:
        self.builtin = list(classes)
        self.classes = list(self.builtin)
        self.policy = policy
        self.features = features or Features()
        self._allocator: Allocator | None = None
        self._chooser: Chooser | None = None
        self._node_devices: dict[str, list[DeviceID]] = {}
        self._version = -1
        # The incremental "which nodes are full" view (reset with the allocator).
        self._pool_nodes: dict[tuple[str, str], list[str]] = {}
        self._pools_seen: dict[tuple[str, str], int] = {}
        self._full: set[str] = set()
        self._open: list[Node] | None = None
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

    def _for(
        self, version: int, slices: Iterable[ResourceSlice], state: AllocatedState
    ) -> Allocator:
        if (
            self._allocator is None
            or version != self._version
            or self._allocator.state is not state
        ):
            self._allocator = Allocator(self.classes, slices, self.features, state)
            self._chooser = Chooser(self._allocator)
            self._node_devices = {
                node: [DeviceID(s.driver, s.pool.name, d.name) for s in owned for d in s.devices]
                for node, owned in self._allocator.by_node.items()
            }
            self._pool_nodes = {}
            for node, devices in self._node_devices.items():
                for key in {(d.driver, d.pool) for d in devices}:
                    self._pool_nodes.setdefault(key, []).append(node)
            self._pools_seen = {}
            self._full = set()
            self._open = None
            self._version = version
        return self._allocator

    def placement(
        self, slices: Iterable[ResourceSlice], version: int, state: AllocatedState
    ) -> tuple[Allocator, Chooser | None]:
        """The allocator `decide` uses for these inputs, and the topology chooser when the policy
        is `topology` (None for `first-fit`): what the placement layer's gang step needs."""
        allocator = self._for(version, slices, state)
        return allocator, self._chooser if self.policy == "topology" else None

    def _is_full(self, node: str, taken: set[DeviceID]) -> bool:
        devices = self._node_devices.get(node)
        return devices is not None and bool(devices) and all(d in taken for d in devices)

    def _open_nodes(self, allocator: Allocator) -> list[Node]:
        """Nodes in name order without the full ones; the same list object while that holds."""
        taken = allocator.state.devices
        if not isinstance(taken, InUseDevices):
            # No change counters: look at every node (correct, only slower).
            self._open = None
            return [
                n for n in map(Node, allocator.node_names()) if not self._is_full(n.name, taken)
            ]
        changed: set[str] = set()
        if self._open is None:
            changed.update(self._node_devices)
        for key, seen in taken.pool_version.items():
            if self._pools_seen.get(key) != seen:
                self._pools_seen[key] = seen
                changed.update(self._pool_nodes.get(key, ()))
        flipped = False
        for node in changed:
            full = self._is_full(node, taken)
            if full != (node in self._full):
                flipped = True
                if full:
                    self._full.add(node)
                else:
                    self._full.discard(node)
        if self._open is None or flipped:
            self._open = [Node(n) for n in allocator.node_names() if n not in self._full]
        return self._open

    def _candidates(self, allocator: Allocator, claims: list[ResourceClaim]) -> list[Node]:
        """Nodes in name order, without those whose every device is taken exclusively.

        Only a shortcut: a full node's search would fail anyway. It is skipped only when no
        slice is shared between nodes and no request asks for admin access (which may use
        allocated devices).
        """
        names = allocator.node_names()
        admin = any(
            r.exactly is not None and r.exactly.admin_access for c in claims for r in c.requests
        )
        if allocator.shared or admin:
            return [Node(n) for n in names]
        return self._open_nodes(allocator)

    def candidates(
        self,
        claims: list[ResourceClaim],
        slices: Iterable[ResourceSlice],
        version: int,
        state: AllocatedState,
    ) -> list[Node]:
        """The nodes `decide` would search for `claims`, in order (full nodes left out)."""
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

    def decide(
        self,
        claims: list[ResourceClaim],
        slices: Iterable[ResourceSlice],
        version: int,
        state: AllocatedState,
    ) -> Decision:
        allocator = self._for(version, slices, state)
        nodes = self._candidates(allocator, claims)
        if self.policy == "topology":
            assert self._chooser is not None
            outcome = choose_node(allocator, nodes, claims, self._chooser) if nodes else None
        else:
            outcome = allocator.choose_node(nodes, claims) if nodes else None
        if outcome is not None and outcome.results is not None:
            return Decision(results=tuple(outcome.results), node=outcome.node.name)
        all_nodes = [Node(n) for n in allocator.node_names()]
        explanation = why_pending(allocator, all_nodes, claims)
        reason = summary(explanation)
        if explanation.get("sentence"):
            reason = f"{explanation['sentence']} ({reason})"
        return Decision(reason=reason, explanation=explanation)


def allocation_json(result: AllocationResult) -> bytes:
    return json.dumps(result.to_json(), separators=(",", ":"), sort_keys=True).encode()
