from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from churn_bench import KUBE_SCHEDULER
from churn_sweep import Row, floats, main, summary


def row(load: float, seed: int, ff: int, topo: int, gained: float, placed: float) -> Row:
    return Row(load, seed, placed, placed - 0.02, ff, topo, 1000.0, 1000.0 + gained, 900.0, 905.0)


def test_summary_per_load() -> None:
    rows = [
        row(3.0, 1, 40, 64, +5.0, 0.81),
        row(3.0, 2, 50, 60, -1.0, 0.84),
        row(2.0, 1, 40, 44, +9.0, 0.90),
    ]
    two, three = summary(rows)
    assert two["load"] == 2.0
    assert not two["loadedOnEverySeed"]
    assert three == {
        "load": 3.0,
        "meanRatio": round((64 / 40 + 60 / 50) / 2, 3),
        "minRatio": 1.2,
        "seedsAtGoal": [1],
        "seedsBelowFirstFitGpuHours": [2],
        "seedsBelowFirstFitAskedHours": [],
        "firstFitPlacedMax": 0.84,
        "loadedOnEverySeed": True,
    }


def test_ratio_without_first_fit_placements_is_zero() -> None:
    assert row(3.0, 1, 0, 5, 0.0, 0.8).ratio == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param("1.5,2", [1.5, 2.0], id="list"), pytest.param("3", [3.0], id="one")],
)
def test_floats(text: str, expected: list[float]) -> None:
    assert floats(text) == expected


def test_floats_rejects_words() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated"):
        floats("1.5,high")


def test_summary_against_kube_scheduler() -> None:
    rows = [
        replace(row(3.0, 1, 40, 64, +5.0, 0.81), large_kube=32, gpu_hours_kube=1010.0),
        replace(row(3.0, 2, 50, 60, -1.0, 0.84), large_kube=60, gpu_hours_kube=990.0),
    ]
    assert rows[0].ratio_kube == 2.0
    assert rows[0].gpu_hours_gained_kube == -5.0
    (line,) = summary(rows)
    assert line["meanRatioVsKubeScheduler"] == 1.5
    assert line["seedsBelowKubeSchedulerGpuHours"] == [1]
    assert "meanRatioVsKubeScheduler" not in summary([row(3.0, 1, 40, 64, 5.0, 0.81)])[0]


def test_sweep_with_a_mix_and_the_kube_scheduler_reference(tmp_path: Path) -> None:
    plot = tmp_path / "sweep.png"
    argv = ["--loads", "3", "--seeds", "1,2", "--hours", "2", "--plot", str(plot)]
    assert main([*argv, "--mix", "gpu-8-nvl=0,gang-2x8=0", "--reference", KUBE_SCHEDULER]) == 0
    out = json.loads(plot.with_suffix(".json").read_text())
    assert out["config"]["mix"]["gpu-8-nvl"] == 0.0
    assert out["config"]["reference"] == KUBE_SCHEDULER
    assert [(r["seed"], r["large_first_fit"], r["large_kube"]) for r in out["rows"]] == [
        (1, 0, 0),
        (2, 0, 0),
    ]
    assert all(r["placed_kube"] > 0.5 for r in out["rows"])
    assert "meanRatioVsKubeScheduler" in out["perLoad"][0]


def test_sweep_rejects_a_bad_mix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--mix", "gpu-8-nvl=x"])
    assert "not a number" in capsys.readouterr().err
