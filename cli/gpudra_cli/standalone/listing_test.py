from __future__ import annotations

from gpudra_cli.standalone.listing import device_rows, node_rows, slice_rows
from gpudra_cli.standalone.testdata import SLICES, claim

CLAIMS = [
    claim("a", [("node-a", "gpu-0")]),
    claim("b", [("node-a", "gpu-0")], namespace="team"),  # a shared device
    claim("m", [("node-b", "gpu-0-mig-1-0")]),
]


def test_slice_rows() -> None:
    assert [(r["NODE"], r["DEVICES"], r["GENERATION"]) for r in slice_rows(SLICES)] == [
        ("node-a", "2", "1"),
        ("node-b", "1", "1"),
    ]


def test_device_rows_name_every_holder() -> None:
    rows = {(r["NODE"], r["DEVICE"]): r for r in device_rows(SLICES, CLAIMS)}
    assert rows[("node-a", "gpu-0")]["CLAIM"] == "default/a,team/b"
    assert rows[("node-a", "gpu-1")]["CLAIM"] == ""
    mig = rows[("node-b", "gpu-0-mig-1-0")]
    assert (mig["TYPE"], mig["MIG PROFILE"], mig["MEMORY"]) == ("mig", "1g.10gb", "80Gi")


def test_node_rows_include_nodes_without_slices() -> None:
    rows = {r["NODE"]: r for r in node_rows(SLICES, CLAIMS, {"node-a": "dgx", "node-c": "l4"})}
    assert (rows["node-a"]["GPUS"], rows["node-a"]["ALLOCATED"], rows["node-a"]["READY"]) == (
        "2",
        "1",
        "yes",
    )
    assert (rows["node-b"]["MIG DEVICES"], rows["node-b"]["PROFILE"]) == ("1", "")
    assert (rows["node-c"]["READY"], rows["node-c"]["GPUS"]) == ("no", "0")
