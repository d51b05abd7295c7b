"""The allocation-problem contract: JSON Lines in, JSON Lines out (one answer per line, in order).

`solve` answers one problem document; `run_lines` reads a stream of them. A line that is not JSON
or not a valid problem gets an `error` answer and the stream goes on; only an unreadable input
stream makes `run_lines` fail. The policy decides who answers (`dispatch.py`: Kubernetes'
first-fit, or the `topology` placement layer); `steps` problems run in `steps.py`.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from gpudra_alloc.allocator import Allocator
from gpudra_alloc.dispatch import Audit, Dispatch
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.problem import Problem, parse_problem
from gpudra_alloc.steps import StepRunner
from gpudra_api import ApiError, Node


def _error(problem_id: Any, message: str) -> dict[str, Any]:
    return {"id": problem_id, "outcome": "error", "error": message}


def solve(doc: Any, default_policy: str = "topology", audit: Audit | None = None) -> dict[str, Any]:
    """Answer one problem document (already decoded from JSON); `audit` sees every pod's
    allocation before it is applied (`dispatch.Dispatch`)."""
    problem_id = doc.get("id") if isinstance(doc, dict) else None
    try:
        problem = parse_problem(doc, default_policy)
    except (ApiError, AllocationError) as exc:
        return _error(problem_id, str(exc))
    allocator = Allocator(problem.classes, problem.slices, problem.features, problem.state)
    nodes = _candidate_nodes(allocator, problem) if problem.node is None else []
    dispatch = Dispatch(allocator, problem.policy, problem.node, nodes, audit)
    if problem.claims is not None:
        return {"id": problem_id, **dispatch.pod(problem.claims)}
    assert problem.steps is not None
    return {"id": problem_id, "steps": StepRunner(dispatch, allocator.state).run(problem.steps)}


def _candidate_nodes(allocator: Allocator, problem: Problem) -> list[Node]:
    if problem.nodes is not None:
        return problem.nodes
    return [Node(name) for name in allocator.node_names()]


def _not_json(name: str) -> Any:
    # Python's decoder accepts NaN and Infinity, which JSON has not; an id echoed as NaN would
    # make the answer line itself invalid JSON.
    raise ValueError(f"{name} is not a JSON value")


def run_lines(source: TextIO, sink: TextIO, policy: str = "topology") -> int:
    """Answer every JSON line of `source` on `sink`; returns the number of lines answered."""
    answered = 0
    for line in source:
        if not line.strip():
            continue
        try:
            doc = json.loads(line, parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:
            # Not only JSONDecodeError: Python's decoder also fails with ValueError (an integer
            # of more than 4300 digits) and RecursionError (arrays nested too deep).
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
