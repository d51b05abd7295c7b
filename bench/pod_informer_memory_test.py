"""The pod-informer memory bench runs, and slim pods stay several times smaller than whole ones
(a memory figure, not a time: the same on a loaded machine)."""

from __future__ import annotations

import pytest

from pod_informer_memory import main


def test_slim_pods_hold_a_fraction_of_whole_ones(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = main(["--pods", "300"])
    assert row["whole_kib_per_pod"] > 5 * row["slim_kib_per_pod"] > 0
    assert "ratio" in capsys.readouterr().out
