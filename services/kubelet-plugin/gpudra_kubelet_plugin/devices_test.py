from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra_kubelet_plugin.conftest import node_devices
from gpudra_kubelet_plugin.devices import DeviceInfo, DeviceTable, parse_device
from gpudra_kubelet_plugin.errors import DeviceControlError, DeviceError


def test_from_json(tmp_path: Path) -> None:
    path = tmp_path / "devices.json"
    path.write_text(
        json.dumps(
            {
                "devices": [
                    {"name": "gpu-0", "type": "gpu", "uuid": "GPU-a", "minor": 0},
                    {
                        "name": "gpu-0-mig-1g10gb-0",
                        "type": "mig",
                        "uuid": "",
                        "minor": 0,
                        "parentUUID": "GPU-a",
                        "profile": "1g.10gb",
                        "placement": {"start": 0, "size": 1},
                    },
                ]
            }
        )
    )
    table = DeviceTable.from_json(path)
    assert DeviceInfo("gpu-0", "gpu", "GPU-a", 0) in table._devices.values()
    assert not table._devices["gpu-0-mig-1g10gb-0"].exists


@pytest.mark.parametrize(
    ("item", "message"),
    [
        pytest.param([], "must be an object", id="not-object"),
        pytest.param(
            {"name": "x", "type": "tpu", "minor": 0}, "type must be gpu or mig", id="type"
        ),
        pytest.param({"name": "x", "type": "gpu"}, "malformed device entry", id="no-minor"),
        pytest.param(
            {"name": "x", "type": "gpu", "minor": "zero"}, "malformed device entry", id="bad-minor"
        ),
    ],
)
def test_parse_device_errors(item: Any, message: str) -> None:
    with pytest.raises(DeviceError, match=message):
        parse_device(item)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("[]", "expected an object with a 'devices' list", id="shape"),
        pytest.param("{", "cannot read device table", id="json"),
    ],
)
def test_bad_tables(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(DeviceError, match=message):
        DeviceTable.from_json(path)


def test_duplicate_names() -> None:
    with pytest.raises(DeviceError, match="twice"):
        DeviceTable([DeviceInfo("a", "gpu", "G", 0), DeviceInfo("a", "gpu", "H", 1)])


async def test_dynamic_mig_lifecycle() -> None:
    table = DeviceTable(node_devices())
    placement = await table.device("gpu-1-mig-3g-40gb-4")
    created = await table.create_mig(placement)
    assert created.exists
    assert created.gi_cap is not None
    assert created.ci_cap is not None
    assert await table.create_mig(placement) == created  # already there: same device
    assert await table.device("gpu-1-mig-3g-40gb-4") == created
    with pytest.raises(DeviceControlError, match="overlaps MIG device gpu-1-mig-1-0"):
        await table.create_mig(await table.device("gpu-1-mig-4g-40gb-0"))
    await table.destroy_mig(created)
    assert await table.device("gpu-1-mig-3g-40gb-4") == placement
    with pytest.raises(DeviceControlError, match="not a MIG"):
        await table.create_mig(await table.device("gpu-0"))
    with pytest.raises(DeviceError, match="no device 'nope'"):
        await table.device("nope")
    assert [d.name for d in await table.devices()] == sorted(d.name for d in node_devices())


async def test_destroy_forgets_the_device_under_every_name_and_only_that_device() -> None:
    # A table discovered while the plugin's 3g.40gb at slice 4 existed names it twice: by its GPU
    # and compute instance ids, and by the placement its claim was allocated as.
    made = DeviceInfo(
        "gpu-1-mig-3g-40gb-4", "mig", "MIG-made", 1, "GPU-p", "3g.40gb", 4, 4, 40, 41, 9, 2, 0
    )
    other = DeviceInfo("gpu-1-mig-1-0", "mig", "MIG-other", 1, "GPU-p", "1g.10gb", 0, 1, 21, 22)
    table = DeviceTable(
        [
            DeviceInfo("gpu-1", "gpu", "GPU-p", 1),
            made,
            dataclasses.replace(made, name="gpu-1-mig-2-0", by_ids=True),
            other,
        ]
    )
    # A device that is gone already: the name now denotes another one, which stays.
    await table.destroy_mig(dataclasses.replace(other, uuid="MIG-gone-before"))
    assert await table.device("gpu-1-mig-1-0") == other
    await table.destroy_mig(made)
    assert [d.name for d in await table.devices()] == [
        "gpu-1",
        "gpu-1-mig-1-0",
        "gpu-1-mig-3g-40gb-4",
    ]
    placement = await table.device("gpu-1-mig-3g-40gb-4")
    assert (placement.uuid, placement.gi_id, placement.gi_cap, placement.profile_id) == (
        "",
        None,
        None,
        9,
    )


async def test_a_reread_adds_what_the_table_lacks_and_keeps_what_it_made() -> None:
    # An operator made a 3g.40gb at slice 4, which the table has as a free placement.
    gpu1 = node_devices()[1].uuid
    operators = DeviceInfo(
        "gpu-1-mig-3g-40gb-4", "mig", "MIG-op", 1, gpu1, "3g.40gb", 4, 4, 30, 31, gi_id=2, ci_id=0
    )  # fmt: skip
    by_ids = dataclasses.replace(operators, name="gpu-1-mig-2-0", by_ids=True)
    source = [d for d in node_devices() if d.name != operators.name] + [operators, by_ids]
    table = DeviceTable(node_devices(), lambda: source)
    assert await table.reread() == ["gpu-1-mig-2-0", "gpu-1-mig-3g-40gb-4"]
    assert await table.device("gpu-1-mig-2-0") == by_ids
    assert await table.device("gpu-1-mig-3g-40gb-4") == operators
    assert await table.reread() == []
    # A device the table made (the simulator's dynamic MIG) stays, though the source lacks it.
    table = DeviceTable(node_devices(), node_devices)
    made = await table.create_mig(await table.device("gpu-1-mig-3g-40gb-4"))
    assert await table.reread() == []
    assert await table.device("gpu-1-mig-3g-40gb-4") == made
    assert await DeviceTable(node_devices()).reread() == []  # a table file cannot be re-read


async def test_simulated_mig_never_takes_capabilities_a_reread_brought() -> None:
    gpu1 = node_devices()[1].uuid
    operators = DeviceInfo(
        "gpu-1-mig-2-0", "mig", "MIG-op", 1, gpu1, "1g.10gb", 1, 1, 30, 31, gi_id=2, ci_id=0,
        by_ids=True,
    )  # fmt: skip
    table = DeviceTable(node_devices(), lambda: [*node_devices(), operators])
    assert await table.reread() == ["gpu-1-mig-2-0"]
    made = await table.create_mig(await table.device("gpu-1-mig-3g-40gb-4"))
    assert (made.gi_cap, made.ci_cap) == (32, 33)
