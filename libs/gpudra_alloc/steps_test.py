"""The steps runner's bookkeeping: release semantics, gang step parsing, stepTimes."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import solve
from gpudra_alloc.contract_test import CLASS, _claim, _slice


def _steps(steps: list[Any], **rest: Any) -> dict[str, Any]:
    return {"classes": [CLASS], "slices": [_slice("n1", 1)], "steps": steps, **rest}


@pytest.mark.parametrize(
    ("steps", "outcomes", "error"),
    [
        pytest.param(
            [{"allocate": [_claim("a")]}, {"allocate": [_claim("b")]}, {"release": ["ml/b"]}],
            ["allocated", "unschedulable", "released"],
            None,
            id="a-pending-claim-is-released-like-a-deleted-pending-claim",
        ),
        pytest.param(
            [
                {"allocate": [_claim("a")]},
                {"allocate": [_claim("b")]},
                {"release": ["ml/b"]},
                {"release": ["ml/b"]},
            ],
            ["allocated", "unschedulable", "released", "error"],
            "release: not allocated: ml/b",
            id="released-once-only",
        ),
        pytest.param(
            [{"allocate": [_claim("a")]}, {"release": ["ml/a", "ml/a"]}, {"allocate": [_claim("b")]}],
            ["allocated", "released", "allocated"],
            None,
            id="a-name-twice-in-one-release",
        ),
        pytest.param(
            [{"allocate": [_claim("a")]}, {"release": ["ml/a", "ml/nope"]}, {"allocate": [_claim("b")]}],
            ["allocated", "error", "unschedulable"],
            "release: not allocated: ml/nope",
            id="an-unknown-name-releases-nothing",
        ),
        pytest.param(
            [
                {"allocate": [_claim("a", 2)]},
                {"allocate": [_claim("a")]},
                {"allocate": [_claim("a")]},
            ],
            ["unschedulable", "allocated", "error"],
            "already allocated: ml/a",
            id="a-pending-claim-may-be-allocated-later",
        ),
        pytest.param(
            [{"allocate": [_claim("x", deviceClassName="tpu")]}, {"release": ["ml/x"]}],
            ["error", "error"],
            "release: not allocated: ml/x",
            id="a-claim-that-was-an-error-was-never-pending",
        ),
        pytest.param(
            [{"gang": {"name": "g", "pods": [[_claim("a")]], "matchAttribute": "bad"}}],
            ["error"],
            "matchAttribute must be a qualified attribute name",
            id="a-malformed-gang-is-a-step-error",
        ),
    ],
)  # fmt: skip
def test_steps(steps: list[Any], outcomes: list[str], error: str | None) -> None:
    for policy in ("first-fit", "topology"):
        answer = solve(_steps(steps), policy)["steps"]
        assert [a["outcome"] for a in answer] == outcomes
        errors = [a["error"] for a in answer if a["outcome"] == "error"]
        if error is not None:
            assert error in errors[-1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"stepTimes": [0, 1]}, "stepTimes: 2 entries for 1 steps", id="count"),
        pytest.param({"stepTimes": ["soon"]}, "stepTimes: must be a list of numbers", id="text"),
        pytest.param({"stepTimes": [True]}, "stepTimes: must be a list of numbers", id="bool"),
        pytest.param({"stepTimes": 3}, "stepTimes: must be a list", id="not-a-list"),
        pytest.param({"steps": [{"gang": []}]}, "steps[0].gang: must be an object", id="gang"),
        pytest.param(
            {"steps": None, "claims": [], "stepTimes": [1]}, "only a steps problem", id="claims"
        ),
    ],
)
def test_malformed_steps_problems(change: dict[str, Any], message: str) -> None:
    doc = {
        k: v
        for k, v in {**_steps([{"allocate": [_claim("a")]}]), **change}.items()
        if v is not None
    }
    answer = solve(doc, "topology")
    assert answer["outcome"] == "error"
    assert message in answer["error"]


def test_step_times_change_no_answer() -> None:
    steps = [{"allocate": [_claim("a")]}, {"release": ["ml/a"]}]
    for policy in ("first-fit", "topology"):
        assert solve(_steps(steps, stepTimes=[0, 2.5]), policy) == solve(_steps(steps), policy)


@pytest.mark.parametrize(
    "twice",
    [
        pytest.param({"allocate": [_claim("a"), _claim("a")]}, id="allocate"),
        pytest.param({"gang": {"name": "g", "pods": [[_claim("a")], [_claim("a")]]}}, id="gang"),
    ],
)
def test_a_claim_named_twice_in_one_step_is_an_error_and_holds_nothing(twice: Any) -> None:
    # One claim has one allocation: the second would be "already allocated", and holding two
    # under one name left one of them in use for good once the name was released.
    steps = [twice, {"release": ["ml/a"]}, {"allocate": [_claim("b", 2)]}]
    for policy in ("first-fit", "topology"):
        answer = solve(_steps(steps, slices=[_slice("n1", 2)]), policy)["steps"]
        assert [a["outcome"] for a in answer] == ["error", "error", "allocated"]
        assert "a claim appears twice" in answer[0]["error"]
