"""Both policies through the contract (`solve`): the seed scenarios, a device choice on a given
node, explanations, gangs, and a generated churn day in which the validator checks every
allocation before it is applied."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra_alloc import AllocatedState, Allocator, solve
from gpudra_alloc.placement import validate_allocation
from gpudra_alloc.problem import parse_problem
from gpudra_alloc.workload import ChurnConfig, Fleet, build_fleet, churn_problem, device_classes
from gpudra_alloc.workload import resource_claim as claim
from gpudra_api import AllocationResult, Node, ResourceClaim

DRIVER = "gpu.nvidia.com"
SEEDS = {"a100-mig": 1, "dgx-h100": 1, "hgx-b200": 1, "l4-pcie": 1}
BUSY_8 = (("dgx-00", "gpu-0"), ("dgx-00", "gpu-1"), *(("dgx-02", f"gpu-{i}") for i in range(8)))
ALL_SMALL = tuple(("a100-00", f"gpu-{g}-mig-1g-10gb-{p}") for g in range(8) for p in range(7))


# every shape, gangs often enough to appear in a short day
CHURN_MIX = {
    "gpu-1": 3.0,
    "gpu-2": 2.0,
    "gpu-4-nvl": 2.0,
    "gpu-8-nvl": 2.0,
    "mig": 3.0,
    "mem-150": 1.0,
    "h100-plus": 1.0,
    "gang-2x8": 1.0,
    "gang-4x4-clique": 1.0,
}


def problem(
    counts: dict[str, int],
    busy: tuple[tuple[str, str], ...] = (),
    domains: dict[str, str] | None = None,
    **rest: Any,
) -> dict[str, Any]:
    """A fleet as a problem document; `domains` rewrites nvlinkDomain per device name."""
    objects = build_fleet(Fleet(counts=counts))
    for s in objects.slices:
        for d in s["spec"].get("devices", []):
            if domains and d["name"] in domains:
                d["attributes"]["nvlinkDomain"] = {"string": domains[d["name"]]}
    doc = {
        "classes": device_classes(),
        "slices": objects.slices,
        "nodes": objects.nodes,
        "allocatedDevices": [{"driver": DRIVER, "pool": n, "device": d} for n, d in busy],
    }
    doc.update(rest)
    return doc


class Checker:
    """The contract's audit hook: every allocation goes through the validator."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self.checked = 0
        self.problems: list[str] = []

    def __call__(
        self,
        node: Node,
        claims: list[ResourceClaim],
        results: list[AllocationResult],
        state: AllocatedState,
    ) -> None:
        self.checked += 1
        self.problems += validate_allocation(self.allocator, node, claims, results, state)


def solve_checked(doc: dict[str, Any], policy: str) -> tuple[dict[str, Any], Checker]:
    """`solve` with the validator watching; the checker reads the same slices and classes."""
    parsed = parse_problem(doc, policy)
    checker = Checker(Allocator(parsed.classes, parsed.slices, parsed.features))
    return solve({**doc, "policy": policy}, audit=checker), checker


def devices(answer: dict[str, Any]) -> list[str]:
    return [r["device"] for result in answer["results"] for r in result["devices"]["results"]]


def requests(answer: dict[str, Any]) -> set[str]:
    return {r["request"] for result in answer["results"] for r in result["devices"]["results"]}


@pytest.mark.parametrize(
    ("counts", "busy", "shape", "policy", "node", "picked", "via"),
    [
        pytest.param(
            {"dgx-h100": 3, "l4-pcie": 1}, BUSY_8, "gpu-8-nvl", "first-fit", "dgx-01",
            [f"gpu-{i}" for i in range(8)], "gpus", id="8-gpus-one-nvswitch-first-fit",
        ),
        pytest.param(
            {"dgx-h100": 3, "l4-pcie": 1}, BUSY_8, "gpu-8-nvl", "topology", "dgx-01",
            [f"gpu-{i}" for i in range(8)], "gpus", id="8-gpus-one-nvswitch-topology",
        ),
        pytest.param(
            SEEDS, (), "h100-plus", "first-fit", "b200-00", ["gpu-0"], "gpus",
            id="h100-or-better-first-fit-takes-the-first-node-a-b200",
        ),
        pytest.param(
            SEEDS, (), "h100-plus", "topology", "dgx-00", ["gpu-0"], "gpus",
            id="h100-or-better-topology-keeps-the-b200-for-150g",
        ),
        pytest.param(
            SEEDS, (), "mem-150", "first-fit", "b200-00", ["gpu-0"], "gpus",
            id="150g-on-b200-first-fit",
        ),
        pytest.param(
            SEEDS, (), "mem-150", "topology", "b200-00", ["gpu-0"], "gpus",
            id="150g-on-b200-topology",
        ),
        pytest.param(
            {"a100-mig": 1, "l4-pcie": 1}, (("a100-00", "gpu-3-mig-1g-10gb-0"),), "mig",
            "first-fit", "a100-00", ["gpu-0-mig-1g-10gb-0"], "gpu/small",
            id="mig-small-first-fit-breaks-a-whole-gpu",
        ),
        pytest.param(
            {"a100-mig": 1, "l4-pcie": 1}, (("a100-00", "gpu-3-mig-1g-10gb-0"),), "mig",
            "topology", "a100-00", ["gpu-3-mig-1g-10gb-1"], "gpu/small",
            id="mig-small-topology-packs-the-partitioned-gpu",
        ),
        pytest.param(
            {"a100-mig": 1, "l4-pcie": 1}, ALL_SMALL, "mig", "topology", "l4-00", ["gpu-0"],
            "gpu/full", id="mig-falls-back-to-a-full-gpu-topology",
        ),
    ],
)  # fmt: skip
def test_seed_scenarios(
    counts: dict[str, int],
    busy: tuple[tuple[str, str], ...],
    shape: str,
    policy: str,
    node: str,
    picked: list[str],
    via: str,
) -> None:
    answer, checker = solve_checked(problem(counts, busy, claims=[claim(shape, "c")]), policy)
    assert answer["outcome"] == "allocated"
    assert answer["node"] == node
    assert devices(answer) == picked
    assert requests(answer) == {via}
    assert ("placement" in answer) == (policy == "topology")
    assert checker.checked == 1
    assert checker.problems == []


@pytest.mark.parametrize(
    ("policy", "picked"),
    [
        pytest.param("first-fit", ["gpu-0", "gpu-1"], id="first-fit-first-devices"),
        pytest.param("topology", ["gpu-6", "gpu-7"], id="topology-best-fit-domain"),
    ],
)
def test_a_given_node_gets_the_policy_device_choice(policy: str, picked: list[str]) -> None:
    half = {f"gpu-{i}": "nvswitch-1" for i in range(4, 8)}
    busy = (("dgx-00", "gpu-4"), ("dgx-00", "gpu-5"))
    doc = problem(
        {"dgx-h100": 1}, busy, half, node={"name": "dgx-00"}, claims=[claim("gpu-2", "c")]
    )
    answer, checker = solve_checked(doc, policy)
    assert answer["node"] == "dgx-00"
    assert devices(answer) == picked
    assert checker.problems == []


@pytest.mark.parametrize(
    ("policy", "enriched"),
    [
        pytest.param("first-fit", False, id="first-fit-core-explanation"),
        pytest.param("topology", True, id="topology-closest-nodes-and-sentence"),
    ],
)
def test_unschedulable_explanations(policy: str, enriched: bool) -> None:
    busy = tuple(("dgx-00", f"gpu-{i}") for i in range(2))
    answer = solve(problem({"dgx-h100": 1}, busy, claims=[claim("gpu-8-nvl", "c")]), policy)
    assert answer["outcome"] == "unschedulable"
    assert answer["node"] == "dgx-00"
    explanation = answer["explanation"]
    assert explanation["claims"][0]["requests"][0]["removed"]["allocated"] == 2
    assert ("closestNodes" in explanation) == enriched
    if enriched:
        assert explanation["closestNodes"][0] == {
            "node": "dgx-00",
            "short": 2,
            "requests": [
                {
                    "claim": "default/c",
                    "request": "gpus",
                    "requested": 8,
                    "usable": 6,
                    "attribute": "gpu.nvidia.com/nvlinkDomain",
                    "group": "nvswitch-0",
                }
            ],
        }
        assert explanation["sentence"] == (
            "needs 8 GPUs in one NVLink domain; best node dgx-00 has 6 free in nvswitch-0"
        )


def gang(name: str, pods: int, shape: str = "gpu-4-nvl") -> dict[str, Any]:
    return {
        "gang": {
            "name": name,
            "pods": [[claim(shape, f"{name}-p{i}")] for i in range(pods)],
            "matchAttribute": "gpu.nvidia.com/cliqueID",
        }
    }


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_gang_steps_all_or_nothing(policy: str) -> None:
    steps = [
        gang("big", 5),  # 4 trays of 4 GPUs: 5 pods never fit, nothing may stay reserved
        gang("pair", 2),
        {"allocate": [claim("gpu-4-nvl", "solo")]},
        {"allocate": [claim("gpu-4-nvl", "late")]},  # all 4 trays are taken
        {"release": ["default/pair-p0", "default/pair-p1"]},
        {"allocate": [claim("gpu-4-nvl", "late2")]},
        {"gang": {"name": "again", "pods": [[claim("gpu-1", "x")], [claim("gpu-1", "solo")]]}},
        {"gang": {"name": "bad", "pods": []}},
    ]
    doc = problem({"gb200-tray": 4}, steps=steps)
    answer, checker = solve_checked(doc, policy)
    outcomes = [s["outcome"] for s in answer["steps"]]
    assert outcomes == [
        "unschedulable",
        "allocated",
        "allocated",
        "allocated",
        "released",
        "allocated",
        "error",
        "error",
    ]
    big, pair = answer["steps"][0], answer["steps"][1]
    assert big["explanation"]["gangPodsPlaced"] == 4
    assert "_results" not in pair
    assert len({p["node"] for p in pair["pods"]}) == 2
    assert pair["group"]
    assert "already allocated: default/solo" in answer["steps"][6]["error"]
    assert "pods must be a non-empty list" in answer["steps"][7]["error"]
    assert checker.checked == 2 + 1 + 1 + 1
    assert checker.problems == []


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_mig_claims_in_sequence(policy: str) -> None:
    steps = [{"allocate": [claim("mig", f"m{i}")]} for i in range(3)]
    doc = problem({"a100-mig": 1}, (("a100-00", "gpu-3-mig-1g-10gb-0"),), steps=steps)
    answer, checker = solve_checked(doc, policy)
    gpus = {d.split("-mig-")[0] for step in answer["steps"] for d in devices(step)}
    assert gpus == ({"gpu-3"} if policy == "topology" else {"gpu-0"})
    assert checker.problems == []


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_a_generated_churn_day_every_allocation_valid(policy: str) -> None:
    fleet = Fleet(counts={"a100-mig": 1, "dgx-h100": 2, "gb200-tray": 4, "hgx-b200": 1})
    doc = churn_problem(ChurnConfig(seed=4, hours=6, load=2.0, fleet=fleet, mix=CHURN_MIX))
    answer, checker = solve_checked(doc, policy)
    outcomes = [s["outcome"] for s in answer["steps"]]
    assert len(outcomes) == len(doc["steps"])
    assert "error" not in outcomes
    assert {"allocated", "released"} <= set(outcomes)
    assert checker.checked >= outcomes.count("allocated")
    assert checker.problems == []
    assert {"unschedulable", "released"} <= set(outcomes)  # pods that gave up while pending
    assert any("gang" in step for step in doc["steps"])
    placed = [s for s in answer["steps"] if s["outcome"] == "allocated" and "results" in s]
    assert all(("placement" in s) == (policy == "topology") for s in placed)
