from __future__ import annotations

from collections import Counter

import pytest

from gpudra_alloc.errors import ProblemError
from gpudra_alloc.placement.gang import Gang
from gpudra_alloc.placement.replay import PodRecord, Replay, large_pods_waiting
from gpudra_alloc.placement.topology import result_devices
from gpudra_alloc.workload import ChurnConfig, Fleet, churn_problem, resource_claim
from gpudra_api import parse_resource_claim

SMALL = Fleet(counts={"a100-mig": 1, "dgx-h100": 2, "gb200-tray": 4, "hgx-b200": 1, "l4-pcie": 1})
DAY = churn_problem(ChurnConfig(seed=11, hours=5, load=2.0, fleet=SMALL))


def _replay(policy: str, reserve: int = 0) -> Replay:
    replay = Replay.from_problem(DAY, policy, reserve)
    replay.validate = True
    replay.run(DAY["steps"])
    return replay


@pytest.mark.parametrize(
    ("policy", "reserve"),
    [
        pytest.param("first-fit", 0, id="first-fit"),
        pytest.param("topology", 0, id="topology"),
        pytest.param("topology", 1, id="topology-reserve"),
    ],
)
def test_every_placement_is_one_kubernetes_accepts(policy: str, reserve: int) -> None:
    replay = _replay(policy, reserve)
    placed = [r for r in replay.records if r.placed_step is not None]
    assert len(placed) > 20
    assert replay.rejected == []
    assert any(r.placed_step != r.arrived_step for r in placed)  # someone waited and got in
    held = Counter(d for r in placed if r.released_at is None for d in result_devices(r.results))
    assert all(n == 1 for n in held.values())  # no device twice
    assert set(held) == set(replay.allocator.state.devices)


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
