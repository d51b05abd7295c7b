from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpudra_alloc.workload import Fleet, FleetObjects, WorkloadError, build_fleet
from gpudra_api import parse_resource_slice

ONE_OF_EACH = Fleet(
    counts={"a100-mig": 1, "dgx-h100": 1, "gb200-tray": 2, "hgx-b200": 1, "l4-pcie": 1}
)


def _devices(objects: FleetObjects, node: str) -> list[dict[str, Any]]:
    return [
        d
        for s in objects.slices
        if s["spec"]["nodeName"] == node
        for d in s["spec"].get("devices", [])
    ]


def test_every_slice_is_valid_v1_and_parses() -> None:
    objects = build_fleet(ONE_OF_EACH)
    for s in objects.slices:
        kubernetes_validate.validate(s, "1.34", strict=True)
        parse_resource_slice(s)


@pytest.mark.parametrize(
    ("node", "gpus", "memory", "domains"),
    [
        pytest.param("dgx-00", 8, "81559Mi", {"nvswitch-0"}, id="dgx-h100-one-nvswitch-domain"),
        pytest.param("b200-00", 8, "183359Mi", {"nvswitch-0"}, id="hgx-b200-one-domain"),
        pytest.param("a100-00", 8, "81920Mi", {"nvswitch-0"}, id="a100-one-domain"),
        pytest.param("l4-00", 4, "23034Mi", set(), id="l4-pcie-only-no-domain"),
        pytest.param("gb200-01", 4, "189471Mi", {"nvlink-0"}, id="gb200-tray"),
    ],
)
def test_full_gpus_per_machine(node: str, gpus: int, memory: str, domains: set[str]) -> None:
    devices = [
        d
        for d in _devices(build_fleet(ONE_OF_EACH), node)
        if d["attributes"]["type"]["string"] == "gpu"
    ]
    assert len(devices) == gpus
    assert {d["capacity"]["memory"]["value"] for d in devices} == {memory}
    assert {
        d["attributes"]["nvlinkDomain"]["string"]
        for d in devices
        if "nvlinkDomain" in d["attributes"]
    } == domains


def test_gb200_trays_share_one_clique_and_others_have_none() -> None:
    objects = build_fleet(ONE_OF_EACH)
    cliques = {
        d["attributes"].get("cliqueID", {}).get("string")
        for node in ("gb200-00", "gb200-01")
        for d in _devices(objects, node)
    }
    assert len(cliques) == 1
    assert None not in cliques
    assert all("cliqueID" not in d["attributes"] for d in _devices(objects, "dgx-00"))


def test_mig_pool_uses_counters_and_honest_slice_count() -> None:
    objects = build_fleet(ONE_OF_EACH)
    pool = [s for s in objects.slices if s["spec"]["pool"]["name"] == "a100-00"]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in pool} == {len(pool)}
    counters = [s for s in pool if "sharedCounters" in s["spec"]]
    assert len(counters) == 1
    assert len(counters[0]["spec"]["sharedCounters"]) == 8
    devices = _devices(objects, "a100-00")
    full = next(d for d in devices if d["name"] == "gpu-3")
    small = next(d for d in devices if d["name"] == "gpu-3-mig-1g-10gb-2")
    assert len(full["consumesCounters"][0]["counters"]) == 8
    assert small["consumesCounters"][0] == {
        "counterSet": "gpu-3",
        "counters": {"memory-slice-2": {"value": "1"}},
    }
    assert all(len(s["spec"].get("devices", [])) <= 64 for s in pool)


def test_same_seed_same_fleet_other_seed_other_uuids() -> None:
    assert build_fleet(ONE_OF_EACH) == build_fleet(ONE_OF_EACH)
    other = build_fleet(Fleet(counts=ONE_OF_EACH.counts, seed=7))
    assert other.slices != build_fleet(ONE_OF_EACH).slices


@pytest.mark.parametrize(
    "counts",
    [
        pytest.param({"tpu-v5": 1}, id="unknown-machine"),
        pytest.param({"dgx-h100": -1}, id="negative-count"),
    ],
)
def test_bad_fleet_is_a_clear_error(counts: dict[str, int]) -> None:
    with pytest.raises(WorkloadError):
        Fleet(counts=counts)
