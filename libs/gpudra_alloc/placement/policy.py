"""The placement entry points: one pod or one gang, under `first-fit` or `topology`.

`choose_node` has the contract of `Allocator.choose_node` (the chosen node's outcome, else the
outcome of the node that came closest), so the contract runner can dispatch `policy: topology`
to it with one line. `answer_pod` and `answer_gang` give contract-shaped answers (`outcome`,
`node`, `results`, `explanation`, plus `placement` for topology: the value lost and why).
Neither changes `allocator.state`; the caller applies what it accepts.
"""

from __future__ import annotations

from typing import Any

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.firstfit import first_fit
from gpudra_alloc.placement.choose import Chooser
from gpudra_alloc.placement.gang import Gang, place_gang
from gpudra_alloc.placement.why import why_pending
from gpudra_api import ApiError, Node, ResourceClaim

POLICIES = ("first-fit", "topology")


def choose_node(
    allocator: Allocator,
    nodes: list[Node],
    claims: list[ResourceClaim],
    chooser: Chooser | None = None,
) -> NodeOutcome | None:
    """Topology's answer in `Allocator.choose_node`'s shape."""
    choice = (chooser or Chooser(allocator)).choose(nodes, claims)
    if choice is not None:
        return NodeOutcome(choice.node, choice.results)
    return allocator.choose_node(nodes, claims)


def answer_pod(
    allocator: Allocator,
    nodes: list[Node],
    claims: list[ResourceClaim],
    policy: str = "topology",
    chooser: Chooser | None = None,
    explain: bool = True,
) -> dict[str, Any]:
    """A contract answer for one pod's claims; `_results` carries the model objects."""
    try:
        if policy == "first-fit":
            outcome = first_fit(allocator, nodes, claims)
            if outcome is not None and outcome.results is not None:
                return _allocated(outcome.node, outcome.results)
        else:
            choice = (chooser or Chooser(allocator)).choose(nodes, claims)
            if choice is not None:
                answer = _allocated(choice.node, choice.results)
                answer["placement"] = choice.to_json()
                return answer
        answer = {"outcome": "unschedulable", "node": None}
        if explain:
            answer["explanation"] = why_pending(allocator, nodes, claims)
        return answer
    except (ApiError, AllocationError) as exc:
        return {"outcome": "error", "error": str(exc)}


def answer_gang(
    allocator: Allocator,
    nodes: list[Node],
    gang: Gang,
    policy: str = "topology",
    chooser: Chooser | None = None,
    explain: bool = True,
) -> dict[str, Any]:
    """A contract answer for a gang: `pods` lists each pod's node and results, in pod order."""
    try:
        placed = place_gang(allocator, nodes, gang, policy, chooser)
        if placed.pods is not None:
            return {
                "outcome": "allocated",
                "gang": gang.name,
                "group": placed.group,
                "pods": [
                    {"node": node.name, "results": [r.to_json() for r in results]}
                    for node, results in placed.pods
                ],
                "_results": placed.results,
            }
        answer: dict[str, Any] = {"outcome": "unschedulable", "gang": gang.name}
        if explain:
            failed = gang.pods[placed.failed_pod or 0]
            answer["explanation"] = why_pending(allocator, nodes, failed)
            answer["explanation"]["gangPodsPlaced"] = placed.failed_pod or 0
        return answer
    except (ApiError, AllocationError) as exc:
        return {"outcome": "error", "error": str(exc)}


def _allocated(node: Node, results: list[Any]) -> dict[str, Any]:
    return {
        "outcome": "allocated",
        "node": node.name,
        "results": [r.to_json() for r in results],
        "_results": results,
    }
