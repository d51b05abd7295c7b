"""The allocation-problem contract: JSON Lines in, JSON Lines out (one answer per line, in order).

`solve` answers one problem document; `run_lines` reads a stream of them. A line that is not JSON
or not a valid problem gets an `error` answer and the stream goes on; only an unreadable input
stream makes `run_lines` fail. `topology` is answered by the first-fit search for now.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.explain import explain
from gpudra_alloc.problem import Problem, parse_problem
from gpudra_alloc.state import AllocatedState
from gpudra_api import ApiError, Node, ResourceClaim, parse_resource_claim


def _error(problem_id: Any, message: str) -> dict[str, Any]:
    return {"id": problem_id, "outcome": "error", "error": message}


def solve(doc: Any, default_policy: str = "topology") -> dict[str, Any]:
    """Answer one problem document (already decoded from JSON)."""
    problem_id = doc.get("id") if isinstance(doc, dict) else None
    try:
        problem = parse_problem(doc, default_policy)
    except (ApiError, AllocationError) as exc:
        return _error(problem_id, str(exc))
    allocator = Allocator(problem.classes, problem.slices, problem.features, problem.state)
    if problem.claims is not None:
        answer = _allocate(allocator, problem, problem.claims)
        return {"id": problem_id, **answer}
    assert problem.steps is not None
    return {"id": problem_id, "steps": _run_steps(allocator, problem)}


def _candidate_nodes(allocator: Allocator, problem: Problem) -> list[Node]:
    if problem.nodes is not None:
        return problem.nodes
    return [Node(name) for name in allocator.node_names()]


def _allocate(
    allocator: Allocator,
    problem: Problem,
    claims: list[ResourceClaim],
    candidates: list[Node] | None = None,
) -> dict[str, Any]:
    try:
        if problem.node is not None:
            outcome: NodeOutcome | None = allocator.allocate(problem.node, claims)
            tried = 1
        else:
            nodes = candidates if candidates is not None else _candidate_nodes(allocator, problem)
            outcome = allocator.choose_node(nodes, claims) if claims else None
            tried = len(nodes)
            if not claims:
                return {"outcome": "allocated", "node": None, "results": []}
        if outcome is not None and outcome.results is not None:
            return {
                "outcome": "allocated",
                "node": outcome.node.name,
                "results": [r.to_json() for r in outcome.results],
                "_results": outcome.results,
            }
        return {
            "outcome": "unschedulable",
            "node": outcome.node.name if outcome is not None else None,
            "explanation": explain(allocator, outcome, claims, tried),
        }
    except (ApiError, AllocationError) as exc:
        return {"outcome": "error", "error": str(exc)}


def _run_steps(allocator: Allocator, problem: Problem) -> list[dict[str, Any]]:
    assert problem.steps is not None
    state: AllocatedState = allocator.state
    held: dict[str, list[Any]] = {}
    answers: list[dict[str, Any]] = []
    candidates = _candidate_nodes(allocator, problem) if problem.node is None else None
    for step in problem.steps:
        if step.release is not None:
            unknown = [name for name in step.release if name not in held]
            if unknown:
                answers.append(
                    {"outcome": "error", "error": f"release: not allocated: {', '.join(unknown)}"}
                )
                continue
            for name in step.release:
                state.release(held.pop(name))
            answers.append({"outcome": "released"})
            continue
        assert step.allocate is not None
        try:
            claims = [parse_resource_claim(c) for c in step.allocate]
        except ApiError as exc:
            answers.append({"outcome": "error", "error": str(exc)})
            continue
        again = [c.key for c in claims if c.key in held]
        if again:
            answers.append({"outcome": "error", "error": f"already allocated: {', '.join(again)}"})
            continue
        answer = _allocate(allocator, problem, claims, candidates)
        results = answer.pop("_results", None)
        if results is not None:
            state.apply(results)
            for claim, result in zip(claims, results, strict=True):
                held[claim.key] = [result]
        answers.append(answer)
    return answers


def run_lines(source: TextIO, sink: TextIO, policy: str = "topology") -> int:
    """Answer every JSON line of `source` on `sink`; returns the number of lines answered."""
    answered = 0
    for line in source:
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            answer = _error(None, f"not a JSON document: {exc}")
        else:
            try:
                answer = solve(doc, policy)
            except Exception as exc:  # a bug must cost one line, not the whole stream
                problem_id = doc.get("id") if isinstance(doc, dict) else None
                answer = _error(problem_id, f"internal error: {type(exc).__name__}: {exc}")
            answer.pop("_results", None)
        sink.write(json.dumps(answer, separators=(",", ":")) + "\n")
        sink.flush()
        answered += 1
    return answered
