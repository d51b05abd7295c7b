from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress

from churn_bench import (
    IDLE_HELD,
    IDLE_HOME,
    KUBE_SCHEDULER,
    asked_gpus,
    figures,
    full_mix,
    main,
    mix_label,
    mix_weights,
    run_policy,
)
from gpudra_alloc.workload import DEFAULT_MIX, ChurnConfig, churn_problem


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("gpu-8-nvl=0.05", {"gpu-8-nvl": 0.05}, id="one"),
        pytest.param(
            "gpu-8-nvl=0.05, gang-2x8=0.01", {"gpu-8-nvl": 0.05, "gang-2x8": 0.01}, id="two"
        ),
        pytest.param("mig=0", {"mig": 0.0}, id="drop"),
    ],
)
def test_mix_weights(text: str, expected: dict[str, float]) -> None:
    assert mix_weights(text) == expected
    mix = full_mix(expected)
    assert set(mix) == set(DEFAULT_MIX)  # shapes not named keep their default weight
    assert all(mix[k] == expected.get(k, DEFAULT_MIX[k]) for k in mix)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("gpu-16=0.1", "unknown shape 'gpu-16'", id="unknown-shape"),
        pytest.param("mig=lots", "not a number", id="bad-number"),
        pytest.param("mig", "expected SHAPE=WEIGHT", id="no-weight"),
        pytest.param("mig=-1", ">= 0", id="negative"),
        pytest.param("mig=nan", ">= 0", id="nan"),
        pytest.param(",", "no SHAPE=WEIGHT", id="empty"),
    ],
)
def test_mix_weights_errors_list_the_shapes(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message) as error:
        mix_weights(text)
    assert all(shape in str(error.value) for shape in DEFAULT_MIX)


def test_mix_label() -> None:
    assert mix_label(None) == "default"
    assert mix_label({"mig": 0.0, "gpu-1": 0.5}) == "default with gpu-1=0.5, mig=0"


def test_bad_mix_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--mix", "gpu-9=1"])
    assert "unknown shape 'gpu-9'" in capsys.readouterr().err
    weights = ",".join(f"{shape}=0" for shape in DEFAULT_MIX)
    with pytest.raises(SystemExit):
        main(["--mix", weights])
    assert "not all zero" in capsys.readouterr().err


def test_a_mix_without_8_gpu_work_places_none(tmp_path: Path) -> None:
    plot = tmp_path / "day.png"
    argv = ["--hours", "2", "--mix", "gpu-8-nvl=0,gang-2x8=0", "--plot", str(plot)]
    assert main([*argv, "--policies", "first-fit", "topology", KUBE_SCHEDULER]) == 0
    out = json.loads(plot.with_suffix(".json").read_text())
    assert out["config"]["mix"] == full_mix({"gpu-8-nvl": 0.0, "gang-2x8": 0.0})
    policies = {p["policy"]: p for p in out["policies"]}
    assert set(policies) == {"first-fit", "topology", KUBE_SCHEDULER}
    for figures_ in policies.values():
        assert figures_["arrived"] > 50
        assert figures_["gpu8NvlinkPlaced"] == 0
        assert figures_["gpu8NvlinkPodsPlaced"] == 0
        assert not set(figures_["placedByShape"]) & {"gpu-8-nvl", "gang-2x8"}
    assert out["ratio8"] == 0.0
    assert out["topologyVsKubeScheduler"]["ratio8"] == 0.0


def test_slice_packing_reaches_the_topology_chooser(day: tuple[dict[str, Any], float]) -> None:
    problem, minutes = day
    with Progress(disable=True) as progress:
        task = progress.add_task("topology", total=len(problem["steps"]))
        run = run_policy(problem, "topology", 6, 6, False, 1, progress, task, slice_packing=0.3)
    assert run.replay.chooser.slice_packing == 0.3
    assert figures(run, minutes)["placedByShape"]["mig"]["placed"] > 0
