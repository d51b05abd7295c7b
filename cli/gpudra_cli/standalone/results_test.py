from __future__ import annotations

from typing import Any

import pytest

from gpudra_cli.standalone.results import allocation_results, asks, device_index, rows
from gpudra_cli.standalone.testdata import SLICES, claim


@pytest.mark.parametrize(
    ("obj", "state", "node", "domains", "profiles", "reason"),
    [
        pytest.param(
            claim("two", [("node-a", "gpu-0"), ("node-a", "gpu-1")]),
            "allocated",
            "node-a",
            ["nvswitch-0"],
            [],
            "",
            id="allocated-one-domain",
        ),
        pytest.param(
            claim("mig", [("node-b", "gpu-0-mig-1-0")], request="gpu/small"),
            "allocated",
            "node-b",
            [],
            ["1g.10gb"],
            "",
            id="mig",
        ),
        pytest.param(
            claim("gone", [("node-z", "gpu-9")]), "allocated", "node-z", [], [], "", id="no-slice"
        ),
        pytest.param(
            claim("big", reason="needs 16"), "unschedulable", "", [], [], "needs 16", id="unsched"
        ),
        pytest.param(claim("new"), "pending", "", [], [], "", id="pending"),
    ],
)
def test_rows(
    obj: dict[str, Any],
    state: str,
    node: str,
    domains: list[str],
    profiles: list[str],
    reason: str,
) -> None:
    (row,) = rows([obj], SLICES)
    assert (row.state, row.node, row.nvlink_domains, row.mig_profiles, row.reason) == (
        state,
        node,
        domains,
        profiles,
        reason,
    )
    assert len(row.devices) == len(allocation_results(obj))


def test_device_index_keys_by_driver_pool_device() -> None:
    index = device_index(SLICES)
    assert index[("gpu.nvidia.com", "node-b", "gpu-0-mig-1-0")]["nodeName"] == "node-b"
    assert len(index) == 3


@pytest.mark.parametrize(
    ("devices", "text"),
    [
        pytest.param(
            {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "c",
                            "count": 4,
                            "selectors": [{"cel": {"expression": "true"}}],
                        },
                    }
                ],
                "constraints": [{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}],
            },
            "gpus: 4 x c + CEL; same nvlinkDomain",
            id="exact-with-constraint",
        ),
        pytest.param(
            {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "small", "deviceClassName": "mig"},
                            {"name": "full", "deviceClassName": "gpu"},
                        ],
                    }
                ]
            },
            "gpu: first of small:1 x mig | full:1 x gpu",
            id="first-available",
        ),
        pytest.param(
            {
                "requests": [
                    {"name": "all", "exactly": {"deviceClassName": "c", "allocationMode": "All"}}
                ]
            },
            "all: all x c",
            id="all",
        ),
    ],
)
def test_asks(devices: dict[str, Any], text: str) -> None:
    assert asks({"spec": {"devices": devices}}) == text
