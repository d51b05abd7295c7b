from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gpudra_alloc.errors import ProblemError
from gpudra_alloc.placement.gang import Gang, dra_score
from gpudra_alloc.placement.replay import PodRecord, Replay, large_pods_waiting
from gpudra_alloc.placement.topology import result_devices
from gpudra_alloc.workload import ChurnConfig, Fleet, churn_problem, resource_claim
from gpudra_api import AllocationResult, DeviceRequestAllocationResult, parse_resource_claim

SMALL = Fleet(counts={"a100-mig": 1, "dgx-h100": 2, "gb200-tray": 4, "hgx-b200": 1, "l4-pcie": 1})
DAY = churn_problem(ChurnConfig(seed=11, hours=5, load=2.0, fleet=SMALL))


def _replay(policy: str, reserve: int = 0, node_choice: str = "first") -> Replay:
    replay = Replay.from_problem(DAY, policy, reserve, node_choice=node_choice, seed=5)
    replay.validate = True
    replay.run(DAY["steps"])
    return replay


@pytest.mark.parametrize(
    ("policy", "reserve", "node_choice"),
    [
        pytest.param("first-fit", 0, "first", id="first-fit"),
        pytest.param("first-fit", 0, "random", id="kube-scheduler"),
        pytest.param("topology", 0, "first", id="topology"),
        pytest.param("topology", 1, "first", id="topology-reserve"),
    ],
)
def test_every_placement_is_one_kubernetes_accepts(
    policy: str, reserve: int, node_choice: str
) -> None:
    replay = _replay(policy, reserve, node_choice)
    placed = [r for r in replay.records if r.placed_step is not None]
    assert len(placed) > 20
    assert replay.rejected == []
    assert any(r.placed_step != r.arrived_step for r in placed)  # someone waited and got in
    held = Counter(d for r in placed if r.released_at is None for d in result_devices(r.results))
    assert all(n == 1 for n in held.values())  # no device twice
    assert set(held) == set(replay.allocator.state.devices)
    for record in placed:  # a pod's devices all on the node it was placed on, none elsewhere
        pods = record.gang.pods if record.gang is not None else [record.claims]
        assert len(record.nodes) == len(pods)
        results = iter(record.results)  # each pod's results, one per claim, pod after pod
        for name, pod in zip(record.nodes, pods, strict=True):
            mine = [next(results) for _ in pod]
            pools = {(p.driver, p.name) for p in replay.allocator.pools_for(replay._node_of[name])}
            assert {(d.driver, d.pool) for d in result_devices(mine)} <= pools


def test_replay_is_deterministic() -> None:
    def trace(replay: Replay) -> list[tuple[str, int | None, list[str]]]:
        return [(r.key, r.placed_step, r.nodes) for r in replay.records]

    assert trace(_replay("topology")) == trace(_replay("topology"))


def test_release_of_a_pending_pod_withdraws_it() -> None:
    doc = {
        "classes": DAY["classes"],
        "slices": DAY["slices"],
        "nodes": [n for n in DAY["nodes"] if n["name"] == "l4-00"],
        "steps": [
            {"allocate": [resource_claim("gpu-8-nvl", "big")]},
            {"release": ["default/big"]},
        ],
    }
    replay = Replay.from_problem(doc, "topology")
    replay.run(doc["steps"])
    assert replay.records[0].withdrawn
    assert replay.pending == []


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"classes": []}, id="no-steps"),
        pytest.param({"steps": [{}], "stepTimes": [0.0, 1.0]}, id="times-mismatch"),
    ],
)
def test_bad_problem_is_a_clear_error(doc: dict[str, object]) -> None:
    with pytest.raises(ProblemError):
        Replay.from_problem(doc, "topology")


def test_unknown_step_is_a_clear_error() -> None:
    replay = Replay.from_problem({"steps": [{"wait": 1}]}, "topology")
    with pytest.raises(ProblemError):
        replay.run([{"wait": 1}])


MIG_FLEET = Fleet(counts={"a100-mig": 2, "dgx-h100": 1, "l4-pcie": 1})
MIG_MIX = {"gpu-8-nvl": 0.3, "mig": 0.4, "gpu-1": 0.3}
MIG_DAY = churn_problem(ChurnConfig(seed=5, hours=6, load=2.0, fleet=MIG_FLEET, mix=MIG_MIX))


@pytest.mark.parametrize(
    ("mig_homes", "hold_all"),
    [
        pytest.param(0, False, id="mig-domains-never-held"),
        pytest.param(1, False, id="one-mig-home"),
        pytest.param(0, True, id="all-mig-domains-held"),
    ],
)
def test_mig_rules_place_only_what_kubernetes_accepts(mig_homes: int, hold_all: bool) -> None:
    replay = Replay.from_problem(MIG_DAY, "topology", 1, 1)
    replay.chooser.mig_homes = mig_homes
    replay.chooser.hold_mig_domains = hold_all
    replay.validate = True
    replay.run(MIG_DAY["steps"])
    assert replay.rejected == []
    on_a100 = {r.shape for r in replay.records if any(n.startswith("a100") for n in r.nodes)}
    assert "gpu-8-nvl" in on_a100
    if not hold_all:
        assert "mig" in on_a100


def _record(name: str, pods: list[str], gang: bool = False) -> PodRecord:
    claims = [[parse_resource_claim(resource_claim(s, f"{name}-{i}"))] for i, s in enumerate(pods)]
    flat = [c for pod in claims for c in pod]
    return PodRecord(name, pods[0], flat, 0, 0.0, Gang(name, claims) if gang else None)


@pytest.mark.parametrize(
    ("pending", "waiting"),
    [
        pytest.param([], 0, id="nobody-waits"),
        pytest.param([("a", ["gpu-8-nvl"], False), ("b", ["gpu-4-nvl"], False)], 1, id="pods"),
        pytest.param([("g", ["gpu-8-nvl", "gpu-8-nvl"], True)], 2, id="gang-2x8-counts-twice"),
        pytest.param([("g", ["gpu-4-nvl"] * 4, True)], 0, id="gang-4x4-needs-no-large-domain"),
        pytest.param(
            [("a", ["gpu-8-nvl"], False), ("g", ["gpu-8-nvl", "gpu-8-nvl"], True)],
            3,
            id="pod-and-gang",
        ),
    ],
)
def test_large_pods_waiting_counts_every_pod_that_needs_a_whole_domain(
    pending: list[tuple[str, list[str], bool]], waiting: int
) -> None:
    records = [_record(name, pods, gang) for name, pods, gang in pending]
    assert large_pods_waiting(records) == waiting
    if records:  # the pod being tried is not waiting for itself
        own = sum(1 for s in pending[0][1] if s == "gpu-8-nvl")
        assert large_pods_waiting(records, records[0]) == waiting - own


# kube-scheduler's node choice (`node_choice="random"`): a node drawn among the feasible ones
KUBE_FLEET = Fleet(counts={"a100-mig": 1, "dgx-h100": 3, "l4-pcie": 2})
KUBE_OBJECTS = churn_problem(ChurnConfig(seed=1, hours=1, load=1.0, fleet=KUBE_FLEET))


def _one_at_a_time(shape: str, times: int) -> dict[str, Any]:
    """`times` pods of `shape`, each released before the next arrives: every draw sees the
    same empty fleet, so every node that can hold the pod is feasible each time."""
    steps: list[dict[str, Any]] = []
    for i in range(times):
        steps.append({"allocate": [resource_claim(shape, f"p{i}")]})
        steps.append({"release": [f"default/p{i}"]})
    return {
        "classes": KUBE_OBJECTS["classes"],
        "slices": KUBE_OBJECTS["slices"],
        "nodes": KUBE_OBJECTS["nodes"],
        "steps": steps,
    }


def _nodes_chosen(doc: dict[str, Any], node_choice: str, seed: int = 0) -> list[str]:
    replay = Replay.from_problem(doc, "first-fit", node_choice=node_choice, seed=seed)
    replay.validate = True
    replay.run(doc["steps"])
    assert replay.rejected == []
    assert all(len(r.nodes) == 1 for r in replay.records)
    return [r.nodes[0] for r in replay.records]


def test_random_node_choice_draws_among_the_feasible_nodes() -> None:
    doc = _one_at_a_time("gpu-8-nvl", 40)
    eight_gpu_nodes = {n["name"] for n in doc["nodes"] if n["name"].startswith(("dgx", "a100"))}
    first = _nodes_chosen(doc, "first")
    drawn = _nodes_chosen(doc, "random", seed=7)
    assert set(first) == {first[0]}  # first-fit: always the first node in the list that fits
    assert set(drawn) <= eight_gpu_nodes  # only nodes where 8 NVLink GPUs fit (no L4)
    assert len(set(drawn)) >= 3  # 40 uniform draws over 4 nodes cover more than one
    assert drawn == _nodes_chosen(doc, "random", seed=7)  # reproducible for a seed
    assert drawn != _nodes_chosen(doc, "random", seed=8)


def test_random_node_choice_prefers_the_first_available_alternative() -> None:
    # DRA's Score: a MIG claim goes where its first alternative (a 1g.10gb slice) fits, the
    # A100, never to a node where only its last (a full GPU) does, though all of them are feasible
    doc = _one_at_a_time("mig", 20)
    assert set(_nodes_chosen(doc, "random", seed=3)) == {"a100-00"}
    gpu1 = _one_at_a_time("gpu-1", 40)  # no alternatives: every node with a GPU is drawn
    assert len({n.split("-")[0] for n in _nodes_chosen(gpu1, "random", seed=3)}) == 3


def test_random_node_choice_places_a_gang_pod_by_pod() -> None:
    steps: list[dict[str, Any]] = []
    for i in range(20):
        pods = [f"g{i}-p{p}" for p in range(2)]
        gang = {"name": f"g{i}", "pods": [[resource_claim("gpu-8-nvl", pod)] for pod in pods]}
        steps += [{"gang": gang}, {"release": [f"default/{pod}" for pod in pods]}]
    doc = dict(_one_at_a_time("gpu-1", 0), steps=steps)
    replay = Replay.from_problem(doc, "first-fit", node_choice="random", seed=2)
    replay.validate = True
    replay.run(doc["steps"])
    assert replay.rejected == []
    pairs = [tuple(r.nodes) for r in replay.records]
    assert all(len(set(pair)) == 2 for pair in pairs)  # two 8-GPU pods never share a node
    assert len(set(pairs)) > 1  # first-fit would give the same two nodes every time


@pytest.mark.parametrize(
    ("shape", "used", "score"),
    [
        pytest.param("mig", "gpu/small", 8, id="first-alternative"),
        pytest.param("mig", "gpu/full", 6, id="third-alternative"),
        pytest.param("gpu-2", "gpus", 0, id="no-alternatives"),
    ],
)
def test_dra_score_follows_the_alternative_used(shape: str, used: str, score: int) -> None:
    claim = parse_resource_claim(resource_claim(shape, "c"))
    result = AllocationResult((DeviceRequestAllocationResult(used, "d", "p", "gpu-0"),))
    assert dra_score([claim], [result]) == score


@pytest.mark.parametrize(
    ("policy", "node_choice"),
    [
        pytest.param("first-fit", "best", id="unknown"),
        pytest.param("topology", "random", id="topo"),
    ],
)
def test_bad_node_choice_is_a_clear_error(policy: str, node_choice: str) -> None:
    with pytest.raises(ProblemError, match="node_choice"):
        Replay.from_problem(_one_at_a_time("gpu-1", 1), policy, node_choice=node_choice)
