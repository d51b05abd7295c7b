from __future__ import annotations

import pytest
from google.protobuf import json_format

from gpudra_inventory.drift import DRIFT_SUMMARY, summarize, to_struct
from gpudrapb.v1 import inventory_pb2 as pb


def inv(node: str, driver: str, cuda: str = "12.4") -> pb.NodeInventory:
    return pb.NodeInventory(node=node, versions=pb.Versions(driver=driver, cuda_driver=cuda))


@pytest.mark.parametrize(
    ("nodes", "majority", "outliers", "unknown"),
    [
        pytest.param([], "", {}, [], id="empty-fleet"),
        pytest.param([inv("a", "550.1"), inv("b", "550.1")], "550.1", {}, [], id="uniform"),
        pytest.param(
            [inv("a", "550.1"), inv("b", "550.1"), inv("c", "535.9")],
            "550.1",
            {"c": "535.9"},
            [],
            id="one-outlier",
        ),
        pytest.param(
            [inv("a", "550.1"), inv("b", "560.2")], "560.2", {"a": "550.1"}, [], id="tie-higher"
        ),
        pytest.param([inv("a", "550.1"), inv("b", "")], "550.1", {}, ["b"], id="unknown-node"),
    ],
)
def test_driver_drift(
    nodes: list[pb.NodeInventory], majority: str, outliers: dict[str, str], unknown: list[str]
) -> None:
    summary = summarize({n.node: n for n in nodes})
    assert summary["driver"]["majority"] == majority
    assert summary["driver"]["outliers"] == outliers
    assert summary["driver"]["unknown"] == unknown


def test_summary_travels_as_protobuf() -> None:
    summary = summarize({"a": inv("a", "550.1", "12.4"), "b": inv("b", "550.1", "12.2")})
    data, headers = DRIFT_SUMMARY.encode(to_struct(summary))
    back = json_format.MessageToDict(DRIFT_SUMMARY.decode(data, headers))
    assert back["cudaDriver"]["outliers"] == {"b": "12.2"}
