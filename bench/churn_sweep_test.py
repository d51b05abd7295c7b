from __future__ import annotations

import argparse

import pytest

from churn_sweep import Row, floats, summary


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
