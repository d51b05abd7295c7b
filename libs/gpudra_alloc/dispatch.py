"""One pod's claims, or one gang, answered under the problem's policy (contract-shaped answers).

`first-fit` is Kubernetes' behaviour: with a `node`, that node's search; without, the first node
(in the problem's `nodes` order, else sorted names) where the search succeeds; `unschedulable`
carries the core explanation of the node that came closest. `topology` hands the choice to the
placement layer (`gpudra_alloc.placement`, docs/PLACEMENT.md): without a `node` it chooses the
node and the devices, with a `node` only the devices on it; an `allocated` answer adds the
`placement` score that chose it, and `unschedulable` adds `closestNodes` and a `sentence` to the
explanation. Gangs (`gang` steps) are placed all or nothing under either policy. Nothing here
changes the in-use state: the answer carries the model results in `_results` for the caller.
An optional `audit` hook sees every pod's allocation (node, claims, results, the in-use state it
was made under) before the caller applies it: tests pass the validator there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.explain import explain
from gpudra_alloc.firstfit import first_fit
from gpudra_alloc.placement import Chooser, Gang, answer_gang, why_pending
from gpudra_alloc.placement.search import copy_state
from gpudra_alloc.state import AllocatedState
from gpudra_api import AllocationResult, ApiError, Node, ResourceClaim

Audit = Callable[[Node, list[ResourceClaim], list[AllocationResult], AllocatedState], None]


class Dispatch:
    """Answers for one problem: `policy`, the problem's `node` (or None) and candidate `nodes`."""

    def __init__(
        self,
        allocator: Allocator,
        policy: str,
        node: Node | None,
        nodes: list[Node],
        audit: Audit | None = None,
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.node = node
        self.nodes = nodes
        self.audit = audit
        self._chooser: Chooser | None = None

    @property
    def chooser(self) -> Chooser:
        """One placement chooser per problem: its node views survive across steps."""
        if self._chooser is None:
            self._chooser = Chooser(self.allocator)
        return self._chooser

    def pod(self, claims: list[ResourceClaim]) -> dict[str, Any]:
        """The answer for one pod's claims (all or none)."""
        try:
            if self.policy == "topology" and claims:
                answer = self._topology(claims)
            else:
                answer = self._first_fit(claims)
        except (ApiError, AllocationError) as exc:
            return {"outcome": "error", "error": str(exc)}
        results = answer.get("_results")
        if self.audit is not None and results and answer["node"] is not None:
            self.audit(self._node(answer["node"]), claims, results, self.allocator.state)
        return answer

    def gang(self, gang: Gang) -> dict[str, Any]:
        """The answer for a gang (all pods or none)."""
        nodes = [self.node] if self.node is not None else self.nodes
        answer = answer_gang(self.allocator, nodes, gang, self.policy, self.chooser)
        if self.audit is not None and answer.get("_results") is not None:
            state = copy_state(self.allocator.state)
            results: list[AllocationResult] = answer["_results"]
            for pod, placed in zip(gang.pods, answer["pods"], strict=True):
                mine, results = results[: len(pod)], results[len(pod) :]
                self.audit(self._node(placed["node"]), pod, mine, state)
                state.apply(mine)
        return answer

    def _node(self, name: str) -> Node:
        if self.node is not None and self.node.name == name:
            return self.node
        return next((n for n in self.nodes if n.name == name), Node(name))

    def _first_fit(self, claims: list[ResourceClaim]) -> dict[str, Any]:
        if self.node is not None:
            outcome: NodeOutcome | None = self.allocator.allocate(self.node, claims)
            tried = 1
        else:
            if not claims:
                return {"outcome": "allocated", "node": None, "results": []}
            outcome = first_fit(self.allocator, self.nodes, claims)
            tried = len(self.nodes)
        if outcome is not None and outcome.results is not None:
            return _allocated(outcome.node, outcome.results)
        return {
            "outcome": "unschedulable",
            "node": outcome.node.name if outcome is not None else None,
            "explanation": explain(self.allocator, outcome, claims, tried),
        }

    def _topology(self, claims: list[ResourceClaim]) -> dict[str, Any]:
        nodes = [self.node] if self.node is not None else self.nodes
        choice = self.chooser.choose(nodes, claims)
        if choice is not None:
            answer = _allocated(choice.node, choice.results)
            answer["placement"] = choice.to_json()
            return answer
        explanation = why_pending(self.allocator, nodes, claims)
        return {
            "outcome": "unschedulable",
            "node": explanation.get("node"),
            "explanation": explanation,
        }


def _allocated(node: Node, results: list[AllocationResult]) -> dict[str, Any]:
    return {
        "outcome": "allocated",
        "node": node.name,
        "results": [r.to_json() for r in results],
        "_results": results,
    }
