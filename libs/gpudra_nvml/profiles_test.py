from __future__ import annotations

import copy
from typing import Any

import pytest

from gpudra_nvml.errors import ProfileError
from gpudra_nvml.profiles import MEMORY_SLICES, load_profile, parse_profile, profile_names

EXPECTED = {"a100-mig", "dgx-h100", "gb200-nvl72-tray", "h100-pcie-pairs", "hgx-b200", "l4-pcie"}


def test_all_issue_profiles_ship() -> None:
    assert set(profile_names()) >= EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_loads_and_is_consistent(name: str) -> None:
    profile = load_profile(name)
    assert profile.gpus, name
    assert len({g.uuid for g in profile.gpus}) == len(profile.gpus)
    for gpu in profile.gpus:
        used: set[int] = set()
        for inst in gpu.mig or ():
            slices = set(range(inst.start, inst.start + inst.profile.size))
            assert not slices & used
            assert max(slices) < MEMORY_SLICES
            used |= slices


def _base() -> dict[str, Any]:
    return {
        "description": "x",
        "driverVersion": "550.54.15",
        "cudaDriverVersion": 12040,
        "nvmlVersion": "12.550.54.15",
        "model": {
            "name": "NVIDIA A100-SXM4-80GB",
            "brand": "NVIDIA",
            "architecture": "AMPERE",
            "computeCapability": [8, 0],
            "memoryMiB": 81920,
            "multiprocessors": 108,
            "vbios": "1",
            "pciDeviceId": 1,
            "migTable": "a100-80gb",
        },
        "gpus": [{"busId": "0000:07:00.0"}, {"busId": "0000:0F:00.0"}],
    }


def _with(path: str, value: Any) -> dict[str, Any]:
    doc = _base()
    node: Any = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[keys[-1]]
    elif isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return doc


def test_base_document_is_valid() -> None:
    assert len(parse_profile("t", copy.deepcopy(_base())).gpus) == 2


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(_with("description", ...), "missing field 'description'", id="missing-field"),
        pytest.param(_with("model.memoryMiB", "lots"), "t.model.memoryMiB", id="wrong-type"),
        pytest.param(_with("model.memoryMiB", -1), "must not be negative", id="negative"),
        pytest.param(_with("model.computeCapability", [9]), "computeCapability", id="bad-cc"),
        pytest.param(_with("model.migTable", "nope"), "unknown table", id="unknown-mig-table"),
        pytest.param(_with("gpus", []), "at least one GPU", id="no-gpus"),
        pytest.param(_with("gpus.1.busId", "0000:07:00.0"), "duplicate busId", id="dup-bus"),
        pytest.param(
            _with("gpus.0", {"busId": "0000:07:00.0", "mig": ["3g.40gb@1"]}),
            "cannot start at slice 1",
            id="illegal-placement",
        ),
        pytest.param(
            _with("gpus.0", {"busId": "0000:07:00.0", "mig": ["3g.40gb@0", "2g.20gb@2"]}),
            "overlaps",
            id="overlapping-mig",
        ),
        pytest.param(
            _with("gpus.0", {"busId": "0000:07:00.0", "mig": ["9g.1tb@0"]}),
            "known profile",
            id="unknown-mig-profile",
        ),
        pytest.param(
            _with("nvlink", {"bridges": [{"gpus": [0, 5], "links": 4}]}),
            "two distinct GPU indexes",
            id="bridge-to-nowhere",
        ),
        pytest.param(
            _with("fabric", {"clusterUuid": "x", "cliqueId": 1}), "not a UUID", id="bad-uuid"
        ),
        pytest.param(
            _with("utilization", {"default": {"pattern": "wild"}}),
            "unknown pattern",
            id="bad-pattern",
        ),
        pytest.param(["not", "a", "mapping"], "expected a mapping", id="not-a-mapping"),
    ],
)
def test_bad_profiles_are_named_errors(doc: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile("t", doc)


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(ProfileError, match="dgx-h100"):
        load_profile("dgx-a1000")


def test_profile_may_carry_a_fault_script() -> None:
    doc = _with("faults", [{"at": 3, "gpu": 1, "xid": 79}])
    assert [(f.at, f.gpu, f.kind, f.code) for f in parse_profile("t", doc).faults] == [
        (3.0, 1, "xid", 79)
    ]
    with pytest.raises(ProfileError, match=r"t\.faults\[0\]\.gpu"):
        parse_profile("t", _with("faults", [{"gpu": 2, "xid": 79}]))
