from __future__ import annotations

from typing import Any

import pytest

from gpudra_cli.standalone.reports import Samples, drift, semver_of, utilisation
from gpudra_cli.standalone.results import device_index
from gpudra_cli.standalone.testdata import SLICES, claim
from gpudrapb.v1 import inventory_pb2 as pb


def sample(node: str, **levels: int) -> pb.UtilizationSample:
    return pb.UtilizationSample(
        node=node,
        devices=[
            pb.DeviceUtilization(device_name=name.replace("_", "-"), gpu_percent=level)
            for name, level in levels.items()
        ],
    )


def test_utilisation_per_claim_and_namespace() -> None:
    samples = Samples()
    samples.add(sample("node-a", gpu_0=90, gpu_1=0))
    samples.add(sample("node-a", gpu_0=70, gpu_1=2))
    samples.add(sample("node-b", gpu_0=50))
    claims = [
        claim("pair", [("node-a", "gpu-0"), ("node-a", "gpu-1")]),
        claim("mig", [("node-b", "gpu-0-mig-1-0")], namespace="team"),
        claim("lost", [("node-c", "gpu-0")], namespace="team"),
        claim("waiting", reason="no"),
    ]
    use = utilisation(claims, device_index(SLICES), samples)
    by_name = {c.name: c for c in use.claims}
    assert set(by_name) == {"pair", "mig", "lost"}
    pair = by_name["pair"]
    assert (pair.allocated, pair.computing, pair.mean_percent) == (2, 1, 40.5)
    assert pair.idle_devices == ["node-a/gpu-1"]
    # A MIG device is judged by its GPU's sample.
    assert (by_name["mig"].computing, by_name["mig"].mean_percent) == (1, 50.0)
    # No sample is unknown, never idle.
    lost = by_name["lost"]
    assert (lost.computing, lost.unknown, lost.mean_percent, lost.idle_devices) == (0, 1, None, [])
    namespaces = {n.namespace: n for n in use.namespaces}
    assert (namespaces["default"].allocated, namespaces["default"].computing) == (2, 1)
    assert namespaces["default"].idle_claims == []
    assert (namespaces["team"].claims, namespaces["team"].allocated) == (2, 2)


SUMMARY = {
    "nodes": 3,
    "driver": {
        "versions": {"550.54.15": 2, "570.124.06": 1},
        "majority": "550.54.15",
        "outliers": {"b200": "570.124.06"},
        "unknown": [],
    },
    "cudaDriver": {
        "versions": {"12.4": 2, "12.8": 1},
        "majority": "12.4",
        "outliers": {"b200": "12.8"},
        "unknown": [],
    },
}


@pytest.mark.parametrize(
    ("summary", "outliers", "selector"),
    [
        pytest.param(
            SUMMARY,
            {"b200": {"driver": "570.124.06", "cudaDriver": "12.8"}},
            'device.attributes["gpu.nvidia.com"].driverVersion == semver("550.54.15")',
            id="outlier",
        ),
        pytest.param(
            {**SUMMARY, "driver": {"majority": "550.54.15", "outliers": {}}, "cudaDriver": {}},
            {},
            "",
            id="uniform",
        ),
    ],
)
def test_drift(summary: dict[str, Any], outliers: dict[str, Any], selector: str) -> None:
    report = drift(summary)
    assert report is not None
    assert report.outliers == outliers
    assert report.exclude_selector == selector


def test_no_summary_is_no_report() -> None:
    assert drift(None) is None


@pytest.mark.parametrize(
    ("version", "semver"),
    [
        pytest.param("570.124.06", "570.124.6", id="leading-zero"),
        pytest.param("550.54.15", "550.54.15", id="plain"),
        pytest.param("535.00.1", "535.0.1", id="all-zero-part"),
    ],
)
def test_semver_of(version: str, semver: str) -> None:
    assert semver_of(version) == semver
