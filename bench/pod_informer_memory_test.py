"""The pod-informer memory bench runs, and slim pods stay several times smaller than whole ones
(a memory figure, not a time: the same on a loaded machine)."""

from __future__ import annotations

import pytest

from pod_informer_memory import main


def test_slim_pods_hold_a_fraction_of_whole_ones(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = main(["--pods", "300"])
    assert row["whole_kib_per_pod"] > 5 * row["slim_kib_per_pod"] > 0
    assert "ratio" in capsys.readouterr().out


def test_a_slim_list_through_the_api_store_holds_a_page_of_whole_pods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three pages of pods through `ApiStore` and the fake API: transformed page by page, the
    slim list's peak is about one page of whole pods, not three (it was all three)."""
    (row,) = main(["--list", "--pods", "1500"])
    assert row["slim_peak_mib"] * 1.5 < row["whole_peak_mib"]
    assert 0 < row["slim_held_mib"] < row["slim_peak_mib"]
    assert "slim peak" in capsys.readouterr().out
