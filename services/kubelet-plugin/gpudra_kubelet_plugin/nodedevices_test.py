from __future__ import annotations

from pathlib import Path

import pytest

from gpudra_kubelet_plugin.devices import DeviceTable
from gpudra_kubelet_plugin.errors import DeviceError, SettingsError
from gpudra_kubelet_plugin.migminors import MigMinors
from gpudra_kubelet_plugin.nodedevices import open_devices, placement_name

MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi0/ci1/access 5
gpu1/gi2/access 160
gpu1/gi2/ci0/access 161
"""


@pytest.mark.parametrize(
    ("gpu", "gi", "ci", "expected"),
    [
        pytest.param(0, 0, None, 3, id="first-gi"),
        pytest.param(0, 0, 0, 4, id="first-ci"),
        pytest.param(0, 0, 7, 11, id="last-ci-of-gi0"),
        pytest.param(0, 1, None, 12, id="second-gi"),
        pytest.param(1, 0, None, 138, id="second-gpu"),
        pytest.param(1, 2, 0, 157, id="gpu1-gi2-ci0"),
    ],
)
def test_computed_layout(gpu: int, gi: int, ci: int | None, expected: int) -> None:
    assert MigMinors().minor(gpu, gi, ci) == expected


def test_driver_table_wins(tmp_path: Path) -> None:
    path = tmp_path / "mig-minors"
    path.write_text(MINORS)
    minors = MigMinors.load(path)
    assert (minors.minor(0, 0), minors.minor(0, 0, 1), minors.minor(1, 2, 0)) == (3, 5, 161)
    with pytest.raises(DeviceError, match="no MIG capability minor for gpu3/gi0"):
        minors.minor(3, 0)
    assert MigMinors.load(tmp_path / "absent").minor(0, 0) == 3
    with pytest.raises(DeviceError, match="outside the driver's range"):
        MigMinors().minor(0, 15)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param("1g.10gb", "gpu-2-mig-1g-10gb-3", id="plain"),
        pytest.param("1g.10gb+me", "gpu-2-mig-1g-10gb-me-3", id="media-extension"),
    ],
)
def test_placement_name(profile: str, expected: str) -> None:
    assert placement_name("gpu-2", profile, 3) == expected


async def test_simulator_devices_named_like_the_slices() -> None:
    devices = open_devices("simulator:a100-mig")
    lookup, control = devices.lookup, devices.control
    assert isinstance(control, DeviceTable)
    existing = await lookup.device("gpu-0-mig-1-0")
    assert (existing.kind, existing.profile, existing.placement_start) == ("mig", "3g.40gb", 0)
    assert (existing.gi_cap, existing.ci_cap) == (
        MigMinors().minor(0, 1),
        MigMinors().minor(0, 1, 0),
    )
    alias = await lookup.device("gpu-0-mig-3g-40gb-0")  # the placement name an allocation may use
    assert alias.uuid == existing.uuid
    placement = await lookup.device("gpu-2-mig-1g-10gb-0")
    assert not placement.exists
    assert placement.profile_id is not None
    assert (existing.gi_id, existing.ci_id) == (1, 0)
    created = await control.create_mig(placement)
    assert created.exists
    whole = await lookup.device("gpu-4")
    assert (whole.kind, whole.minor) == ("gpu", 4)


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        pytest.param("gpus", SettingsError, "device source must be", id="unknown"),
        pytest.param("simulator:", SettingsError, "device source must be", id="no-profile"),
        pytest.param("nvml:x", SettingsError, "device source must be", id="nvml-argument"),
        pytest.param(
            "simulator:no-such-profile", DeviceError, "cannot discover devices", id="profile"
        ),
        pytest.param(
            "table:/nonexistent.json", DeviceError, "cannot read device table", id="table"
        ),
    ],
)
def test_bad_sources(source: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        open_devices(source)


async def test_a_destroyed_device_is_gone_under_its_ids_and_free_under_its_placement() -> None:
    devices = open_devices("simulator:a100-mig")
    by_ids = await devices.lookup.device("gpu-0-mig-1-0")
    placement = await devices.lookup.device("gpu-0-mig-3g-40gb-0")
    assert (by_ids.by_ids, placement.by_ids) == (True, False)
    await devices.control.destroy_mig(placement)
    with pytest.raises(DeviceError, match="no device 'gpu-0-mig-1-0'"):
        await devices.lookup.device("gpu-0-mig-1-0")  # NVML may give its ids to another device
    assert not (await devices.lookup.device("gpu-0-mig-3g-40gb-0")).exists
