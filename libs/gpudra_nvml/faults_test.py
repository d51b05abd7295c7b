from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudra_nvml.errors import ProfileError
from gpudra_nvml.faults import FaultSpec, load_faults, parse_faults
from gpudra_nvml.health import HealthMonitor
from gpudra_nvml.loader import open_simulator
from gpudrapb.v1 import inventory_pb2 as pb


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param([{"at": 5, "gpu": 1, "xid": 79}], FaultSpec(5.0, 1, "xid", 79), id="xid"),
        pytest.param([{"gpu": 0, "lost": True}], FaultSpec(0.0, 0, "lost"), id="lost-now"),
        pytest.param(
            [{"at": 1.5, "gpu": 3, "recover": True}], FaultSpec(1.5, 3, "recover"), id="recover"
        ),
        pytest.param([{"at": 2, "gpu": 2, "ecc": 4}], FaultSpec(2.0, 2, "ecc", 4), id="ecc"),
        pytest.param(
            [{"at": 3, "gpu": 1, "remap-pending": True}],
            FaultSpec(3.0, 1, "remap-pending"),
            id="remap-pending",
        ),
        pytest.param(
            [{"gpu": 2, "remap-failed": True}], FaultSpec(0.0, 2, "remap-failed"), id="remap-failed"
        ),
    ],
)
def test_parse(raw: Any, want: FaultSpec) -> None:
    assert parse_faults("s", raw, 4) == (want,)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"gpu": 0}, "list", id="not-a-list"),
        pytest.param([{"gpu": 0}], "exactly one", id="no-kind"),
        pytest.param([{"gpu": 0, "xid": 1, "lost": True}], "exactly one", id="two-kinds"),
        pytest.param([{"gpu": 4, "xid": 79}], "below 4", id="gpu-out-of-range"),
        pytest.param([{"gpu": 0, "at": -1, "xid": 79}], "seconds >= 0", id="negative-time"),
        pytest.param([{"gpu": 0, "xid": "79"}], "positive integer", id="xid-not-int"),
        pytest.param([{"gpu": 0, "lost": "yes"}], "expected true", id="lost-not-true"),
        pytest.param([{"gpu": 0, "remap-pending": 1}], "expected true", id="remap-not-true"),
    ],
)
def test_bad_scripts(raw: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_faults("s", raw, 4)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scripted_monitor(profile: str, script: Path, clock: Clock) -> HealthMonitor:
    """A health monitor, open on every GPU of the simulated `profile` that plays `script`."""
    opened = open_simulator(profile, clock=clock, faults_file=str(script))
    handles, _ = opened.adapter.handles()
    monitor = HealthMonitor(opened.adapter.nvml, clock=clock)
    monitor.open(handles)
    return monitor


def test_script_file_drives_the_simulator(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "- {at: 10, gpu: 1, xid: 94}\n- {at: 20, gpu: 2, lost: true}\n", encoding="utf-8"
    )
    clock = Clock()
    monitor = scripted_monitor("l4-pcie", script, clock)
    assert monitor.poll(4) == []
    clock.now = 10
    assert [(t.index, t.condition.code) for t in monitor.poll(4)] == [(1, 94)]
    clock.now = 20
    kinds = {(t.index, t.condition.kind) for t in monitor.poll(4)}
    assert (2, pb.HealthCondition.KIND_LOST) in kinds


def test_unreadable_script(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="fault script"):
        load_faults(str(tmp_path / "missing.yaml"), 4)


def test_row_remap_script_drives_the_simulator(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "- {at: 5, gpu: 0, remap-pending: true}\n"
        "- {at: 10, gpu: 0, recover: true}\n"
        "- {at: 10, gpu: 3, remap-failed: true}\n",
        encoding="utf-8",
    )
    clock = Clock()
    monitor = scripted_monitor("dgx-h100", script, clock)
    assert monitor.poll(8) == []
    clock.now = 5
    pending = pb.HealthCondition.KIND_ROW_REMAP_PENDING
    assert [(t.index, t.condition.kind, t.cleared) for t in monitor.poll(8)] == [
        (0, pending, False)
    ]
    clock.now = 10
    assert [(t.index, t.condition.kind, t.cleared) for t in monitor.poll(8)] == [
        (0, pending, True),
        (3, pb.HealthCondition.KIND_ROW_REMAP_FAILED, False),
    ]
