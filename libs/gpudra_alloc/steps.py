"""The `steps` runner: a scheduler's day, one step after the other, on one in-use state.

`allocate` answers one pod's claims and `gang` several pods' claims (all or nothing) under the
problem's policy (`dispatch.py`); what is allocated is applied before the next step. `release`
frees the named claims. Release semantics follow Kubernetes' claim deletion: deleting a claim
that was never allocated (its step answered `unschedulable`: the pod gave up while pending) frees
nothing and succeeds, so it answers `released`; a name no earlier allocate or gang step carried,
or one already released, is an `error` and nothing of that step is released. An allocate or
gang step that names a claim still held, or one claim twice, is an `error` too.
"""

from __future__ import annotations

from typing import Any

from gpudra_alloc.dispatch import Dispatch
from gpudra_alloc.errors import AllocationError
from gpudra_alloc.placement import parse_gang
from gpudra_alloc.problem import Step
from gpudra_alloc.state import AllocatedState
from gpudra_api import AllocationResult, ApiError, ResourceClaim, parse_resource_claim


class StepRunner:
    def __init__(self, dispatch: Dispatch, state: AllocatedState) -> None:
        self.dispatch = dispatch
        self.state = state
        self.held: dict[str, list[AllocationResult]] = {}
        self.pending: set[str] = set()  # claims whose step was unschedulable

    def run(self, steps: list[Step]) -> list[dict[str, Any]]:
        return [self.step(step) for step in steps]

    def step(self, step: Step) -> dict[str, Any]:
        if step.release is not None:
            return self._release(step.release)
        if step.gang is not None:
            try:
                gang = parse_gang(step.gang)
            except (ApiError, AllocationError) as exc:
                return {"outcome": "error", "error": str(exc)}
            again = self._again(gang.claims)
            if again is not None:
                return again
            return self._record(self.dispatch.gang(gang), gang.claims)
        assert step.allocate is not None
        try:
            claims = [parse_resource_claim(c) for c in step.allocate]
        except ApiError as exc:
            return {"outcome": "error", "error": str(exc)}
        again = self._again(claims)
        if again is not None:
            return again
        return self._record(self.dispatch.pod(claims), claims)

    def _again(self, claims: list[ResourceClaim]) -> dict[str, Any] | None:
        keys = [c.key for c in claims]
        again = [key for key in keys if key in self.held]
        if again:
            return {"outcome": "error", "error": f"already allocated: {', '.join(again)}"}
        # One claim has one allocation; two under one name would leave one in use for good
        # once the name is released (`held` keeps one per name).
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            return {"outcome": "error", "error": f"a claim appears twice: {', '.join(twice)}"}
        return None

    def _record(self, answer: dict[str, Any], claims: list[ResourceClaim]) -> dict[str, Any]:
        results = answer.pop("_results", None)
        if results is not None:
            self.state.apply(results)
            for claim, result in zip(claims, results, strict=True):
                self.held[claim.key] = [result]
                self.pending.discard(claim.key)
        elif answer["outcome"] == "unschedulable":
            self.pending.update(c.key for c in claims)
        return answer

    def _release(self, names: list[str]) -> dict[str, Any]:
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self.held and n not in self.pending]
        if unknown:
            return {"outcome": "error", "error": f"release: not allocated: {', '.join(unknown)}"}
        for name in wanted:
            if name in self.held:
                self.state.release(self.held.pop(name))
            else:
                self.pending.discard(name)
        return {"outcome": "released"}
