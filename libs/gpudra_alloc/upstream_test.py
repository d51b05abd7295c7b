"""Kubernetes' allocator test table, ported as data (testdata/upstream/*.yaml), run through the
contract: every case has one right answer, including error versus unschedulable. A case that
gpudra does not yet answer as Kubernetes does carries `xfail: <reason>`; it is reported as an
expected failure (strictly: an unexpected pass fails the run, so a fixed case must drop its mark)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
import yaml

from gpudra_alloc import Allocator, solve
from gpudra_alloc.problem import parse_problem


def _cases() -> list[Any]:
    params = []
    folder = resources.files("gpudra_alloc").joinpath("testdata", "upstream")
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(item.read_text())
        for case in doc["cases"]:
            marks = []
            if "xfail" in case:
                reason = case["xfail"]
                if not isinstance(reason, str) or not reason:
                    raise ValueError(f"{item.name}: {case['name']}: xfail must give a reason")
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            params.append(pytest.param(case, id=f"{item.name[:-5]}/{case['name']}", marks=marks))
    return params


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _normal_selector(selector: Any) -> Any:
    if selector is None:
        return None
    terms = []
    for term in selector["nodeSelectorTerms"]:
        out = {}
        for key in ("matchExpressions", "matchFields"):
            reqs = [{**r, "values": sorted(r.get("values", []))} for r in term.get(key, [])]
            if reqs:
                out[key] = sorted(reqs, key=_canon)
        terms.append(out)
    return sorted(terms, key=_canon)


def _normal_result(result: Any, any_share: bool) -> Any:
    devices = []
    for d in result["devices"]["results"]:
        d = dict(d)
        if any_share and "shareID" in d:
            d["shareID"] = "*"
        devices.append(d)
    return {
        "nodeSelector": _normal_selector(result.get("nodeSelector")),
        "results": sorted(devices, key=_canon),
        "config": result["devices"].get("config"),
    }


@pytest.mark.parametrize("case", _cases())
def test_upstream_case(case: dict[str, Any]) -> None:
    problem = dict(case["problem"])
    problem.setdefault("id", case["name"])
    answer = solve(problem, "first-fit")
    expect = case["expect"]
    assert answer["outcome"] == expect["outcome"], answer
    if "errorContains" in expect:
        assert expect["errorContains"] in answer["error"]
    if "reasonContains" in expect:
        assert expect["reasonContains"] in answer["explanation"]["reason"]
    if "results" in expect:
        any_share = expect.get("anyShareID", False)
        got = [_normal_result(r, any_share) for r in answer["results"]]
        want = [_normal_result(r, any_share) for r in expect["results"]]
        assert got == want


def _invocations(problem: dict[str, Any]) -> int:
    parsed = parse_problem(problem, "first-fit")
    assert parsed.node is not None
    assert parsed.claims is not None
    allocator = Allocator(parsed.classes, parsed.slices, parsed.features, parsed.state)
    outcome = allocator.allocate(parsed.node, parsed.claims)
    assert outcome.search is not None
    return outcome.search.invocations


@pytest.mark.parametrize(
    "case", [c for c in _cases() if "expectInvocations" in c.values[0]["expect"]]
)
def test_search_visits_combinations_not_permutations(case: dict[str, Any]) -> None:
    assert _invocations(case["problem"]) == case["expect"]["expectInvocations"]


def test_case_names_are_unique_and_answers_well_formed() -> None:
    names = [c.values[0]["name"] for c in _cases()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for param in _cases():
        expect = param.values[0]["expect"]
        assert expect["outcome"] in ("allocated", "unschedulable", "error"), param.id
        assert ("results" in expect) == (expect["outcome"] == "allocated"), param.id
