from __future__ import annotations

import pytest

from gpudra_cli.standalone.errors import FleetError
from gpudra_cli.standalone.fleet import FLEETS, parse_fleet


def test_default_fleet_is_the_demo_fleet() -> None:
    fleet = parse_fleet("default")
    assert fleet.profiles == {
        "dgx-h100": 2,
        "hgx-b200": 1,
        "a100-mig": 1,
        "l4-pcie": 1,
        "gb200-nvl72-tray": 2,
    }
    names = [n.name for n in fleet.nodes]
    assert len(names) == len(set(names))
    assert "gb200-nvl72-tray-1" in names


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        pytest.param("small", [f"{p}-0" for p, _ in FLEETS["small"]], id="named"),
        pytest.param("l4-pcie=2", ["l4-pcie-0", "l4-pcie-1"], id="inline"),
        pytest.param(
            " dgx-h100=1, dgx-h100=1 ,l4-pcie=1",
            ["dgx-h100-0", "dgx-h100-1", "l4-pcie-0"],
            id="repeated-profile-continues-numbering",
        ),
    ],
)
def test_parse_fleet(text: str, nodes: list[str]) -> None:
    assert [n.name for n in parse_fleet(text).nodes] == nodes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("huge", "unknown fleet 'huge'", id="unknown-name"),
        pytest.param("tpu-v5=2", "unknown simulator profile 'tpu-v5'", id="unknown-profile"),
        pytest.param("l4-pcie=two", "'two' is not a number", id="bad-count"),
        pytest.param("l4-pcie=0", "not between 1 and 64", id="zero"),
        pytest.param("l4-pcie=1,=2", "is not <profile>=<count>", id="empty-profile"),
    ],
)
def test_bad_fleets_are_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(FleetError, match=message) as info:
        parse_fleet(text)
    assert "\n" not in str(info.value)
