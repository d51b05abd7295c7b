from __future__ import annotations

from typing import Any

import pytest
from rich.progress import Progress

from churn_bench import IDLE_HELD, IDLE_HOME, asked_gpus, figures, run_policy
from gpudra_alloc.workload import ChurnConfig, churn_problem


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        pytest.param("mig", 1 / 8, id="mig-asks-a-1g.10gb-slice"),
        pytest.param("gpu-8-nvl", 8.0, id="eight-gpus"),
        pytest.param("gang-2x8", 16.0, id="gang-counts-every-pod"),
        pytest.param("gang-4x4-clique", 16.0, id="clique-gang"),
        pytest.param("pod", None, id="unknown-shape"),
    ],
)
def test_asked_gpus(shape: str, expected: float | None) -> None:
    assert asked_gpus(shape) == expected


@pytest.fixture(scope="module")
def day() -> tuple[dict[str, Any], float]:
    # three loaded hours: pods wait, MIG claims arrive, the reserve holds domains
    return churn_problem(ChurnConfig(seed=1, hours=3.0, load=3.0)), 180.0


@pytest.mark.parametrize("policy", [pytest.param(p, id=p) for p in ("first-fit", "topology")])
def test_gpu_hours_by_shape_add_up(day: tuple[dict[str, Any], float], policy: str) -> None:
    problem, minutes = day
    with Progress(disable=True) as progress:
        task = progress.add_task(policy, total=len(problem["steps"]))
        run = run_policy(problem, policy, 6, 6, False, 1, progress, task)
    out = figures(run, minutes)
    assert out["gpuHoursByShape"]
    assert sum(out["gpuHoursByShape"].values()) == pytest.approx(out["gpuHoursPlaced"], abs=0.5)
    # only MIG claims may count less as asked than as held (a slice's share vs 1/8)
    assert out["gpuHoursAsAsked"] <= out["gpuHoursPlaced"] + 0.1
    non_mig = sum(v for k, v in out["gpuHoursByShape"].items() if k != "mig")
    assert out["gpuHoursAsAsked"] >= non_mig - 0.1
    idle = out["gpuHoursIdleWhilePending"]
    assert all(v >= 0 for v in idle.values())
    reserved = [k for k in idle if k.endswith((IDLE_HELD, IDLE_HOME))]
    # first-fit has no reserve and no MIG home; topology's hold GPUs while pods wait that day
    assert bool(reserved) == (policy == "topology")
