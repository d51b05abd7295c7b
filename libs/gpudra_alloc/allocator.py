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
from gpudra_alloc.pools import Pool, entries_of, gather_pools
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
        self._node_names: list[str] | None = None
        # exclusive devices needed -> (nodes list, marker, index of the first node not known to
        # be too full, number of devices in use then)
        self._full_prefix: dict[int, tuple[list[Node], tuple[int, int], int, int]] = {}
        self._slice_generation = 0
        for s in slices:
            self.add_slice(s)

    def add_slice(self, s: ResourceSlice) -> None:
        self.slices.append(s)
        if s.node_name:
            self.by_node.setdefault(s.node_name, []).append(s)
        else:
            self.shared.append(s)
        self._pools.clear()
        self._node_names = None
        self._full_prefix.clear()
        self._slice_generation += 1

    def node_names(self) -> list[str]:
        """Nodes the slices name, sorted: the candidates when a problem lists none."""
        if self._node_names is None:
            names = set(self.by_node)
            for s in self.shared:
                for d in s.devices:
                    if d.node_name:
                        names.add(d.node_name)
            self._node_names = sorted(names)
        return self._node_names

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
        node that came closest (most devices placed), or None when there are no nodes.

        A node with fewer free devices than the claims need at least is passed over without a
        search (it cannot fit); while nothing is released, such a prefix of full nodes is
        remembered, so filling a cluster in order does not rescan it. Keep the `nodes` list
        object the same between calls to benefit."""
        need = _exclusive_need(claims)
        best: NodeOutcome | None = None
        start = 0
        marker = (self.state.releases, self._slice_generation)
        if need:
            hint = self._full_prefix.get(need)
            if (
                hint is not None
                and hint[0] is nodes
                and hint[1] == marker
                and len(self.state.devices) >= hint[3]
            ):
                start = hint[2]
        prefix = True
        for index in range(start, len(nodes)):
            node = nodes[index]
            if need and self._free_devices(node) < need:
                if prefix:
                    self._full_prefix[need] = (nodes, marker, index + 1, len(self.state.devices))
                if best is None:
                    best = NodeOutcome(node, None, "not enough free devices")
                continue
            prefix = False
            outcome = self.allocate(node, claims)
            if outcome.results is not None:
                return outcome
            if best is None or outcome.closest > best.closest:
                best = outcome
        if best is None and nodes:
            best = NodeOutcome(nodes[-1], None, "not enough free devices")
        return best

    def _free_devices(self, node: Node) -> int:
        """Devices on the node's usable pools that are not exclusively in use (shareable
        devices always count): an upper bound of what the search could take."""
        shareable = self.features.consumable_capacity
        in_use = self.state.devices
        free = 0
        for pool in self.pools_for(node):
            if pool.incomplete or pool.invalid:
                continue
            for s in pool.slices:
                for entry in entries_of(s):
                    if entry.id not in in_use or (
                        shareable and entry.device.allow_multiple_allocations
                    ):
                        free += 1
        return free


def _exclusive_need(claims: list[ResourceClaim]) -> int:
    """How many devices the claims need at least, each exclusively; 0 when that cannot be
    told in advance ("All" requests, admin access)."""
    total = 0
    for claim in claims:
        for request in claim.requests:
            if request.exactly is not None:
                exact = request.exactly
                if exact.allocation_mode != "ExactCount" or exact.admin_access:
                    return 0
                total += exact.count
                continue
            counts = []
            for sub in request.first_available:
                if sub.allocation_mode != "ExactCount":
                    return 0
                counts.append(sub.count)
            total += min(counts, default=0)
    return total
