"""The allocator front: cluster state in, per-node decisions out.

`Allocator` holds the classes, an index of slices by node, and what is in use; `allocate` runs
Kubernetes' search for one node (what kube-scheduler's filter asks), `choose_node` tries nodes in
order until one fits (first-fit placement), and `candidates` yields several solutions for one node
in Kubernetes' order so that a placement layer can score them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpudra_alloc.features import Features
from gpudra_alloc.pools import Pool, gather_pools
from gpudra_alloc.search import Search
from gpudra_alloc.selection import Selectors
from gpudra_alloc.state import AllocatedState
from gpudra_api import AllocationResult, DeviceClass, Node, ResourceClaim, ResourceSlice


@dataclass
class NodeOutcome:
    """What one node said: results (allocated), or none with the reason and the progress made."""

    node: Node
    results: list[AllocationResult] | None
    reason: str = ""
    closest: int = 0
    search: Search | None = field(default=None, repr=False)


class Allocator:
    def __init__(
        self,
        classes: Iterable[DeviceClass],
        slices: Iterable[ResourceSlice],
        features: Features | None = None,
        state: AllocatedState | None = None,
        selectors: Selectors | None = None,
    ) -> None:
        self.features = features or Features()
        self.state = state or AllocatedState()
        self.selectors = selectors or Selectors()
        self.classes = {c.name: c for c in classes}
        self.slices: list[ResourceSlice] = []
        self.by_node: dict[str, list[ResourceSlice]] = {}
        self.shared: list[ResourceSlice] = []
        self._pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        for s in slices:
            self.add_slice(s)

    def add_slice(self, s: ResourceSlice) -> None:
        self.slices.append(s)
        if s.node_name:
            self.by_node.setdefault(s.node_name, []).append(s)
        else:
            self.shared.append(s)
        self._pools.clear()

    def node_names(self) -> list[str]:
        """Nodes the slices name, sorted: the candidates when a problem lists none."""
        names = set(self.by_node)
        for s in self.shared:
            for d in s.devices:
                if d.node_name:
                    names.add(d.node_name)
        return sorted(names)

    def pools_for(self, node: Node) -> list[Pool]:
        """Pools as seen from `node`; cached until the slices change."""
        key = (node.name, tuple(sorted(node.labels.items())))
        pools = self._pools.get(key)
        if pools is None:
            candidates = self.by_node.get(node.name, []) + self.shared
            pools = gather_pools(candidates, node, self.features, self.slices)
            self._pools[key] = pools
        return pools

    def _search(self, node: Node, claims: list[ResourceClaim]) -> Search:
        search = Search(
            self.features,
            self.state,
            self.selectors,
            node,
            self.pools_for(node),
            claims,
            self.classes,
        )
        search.prepare()
        return search

    def allocate(self, node: Node, claims: list[ResourceClaim]) -> NodeOutcome:
        """Kubernetes' Allocate for one node; raises AllocationInputError for invalid input."""
        if not claims:
            return NodeOutcome(node, [])
        search = self._search(node, claims)
        results = search.run()
        if results is not None:
            return NodeOutcome(node, results, closest=search.closest, search=search)
        reason = "cannot allocate all claims"
        if search.has_invalid_pools():
            reason = "invalid resource pools were encountered"
        return NodeOutcome(node, None, reason, search.closest, search)

    def candidates(
        self, node: Node, claims: list[ResourceClaim], limit: int = 16
    ) -> Iterator[list[AllocationResult]]:
        """Up to `limit` solutions on `node`, in the order Kubernetes' search meets them."""
        found: list[list[AllocationResult]] = []

        def collect(results: list[AllocationResult]) -> bool:
            found.append(results)
            return len(found) >= limit

        search = self._search(node, claims)
        search.on_solution = collect
        search.run()
        yield from found

    def choose_node(self, nodes: list[Node], claims: list[ResourceClaim]) -> NodeOutcome | None:
        """The first node (in the given order) where all claims fit; otherwise the outcome of the
        node that came closest (most devices placed), or None when there are no nodes."""
        best: NodeOutcome | None = None
        for node in nodes:
            outcome = self.allocate(node, claims)
            if outcome.results is not None:
                return outcome
            if best is None or outcome.closest > best.closest:
                best = outcome
        return best
