from __future__ import annotations

from typing import Any

import pytest

from gpudra_kubelet_plugin.config import Sharing, parse_config, parse_quantity, resolve_sharing
from gpudra_kubelet_plugin.devices import DeviceKind
from gpudra_kubelet_plugin.errors import ConfigError

V = "resource.nvidia.com/v1beta1"


def gpu(sharing: Any = None, **extra: Any) -> dict[str, Any]:
    out = {"apiVersion": V, "kind": "GpuConfig", **extra}
    if sharing is not None:
        out["sharing"] = sharing
    return out


@pytest.mark.parametrize(
    ("params", "kind", "expected"),
    [
        pytest.param(gpu(), "gpu", Sharing(), id="no-sharing"),
        pytest.param(
            gpu({"strategy": "TimeSlicing"}),
            "gpu",
            Sharing("TimeSlicing", "Default"),
            id="ts-default",
        ),
        pytest.param(
            gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}),
            "gpu",
            Sharing("TimeSlicing", "Short"),
            id="ts-short",
        ),
        pytest.param(gpu({"strategy": "MPS"}), "gpu", Sharing("MPS"), id="mps-bare"),
        pytest.param(
            gpu(
                {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": 25,
                        "defaultPinnedDeviceMemoryLimit": "512M",
                    },
                }
            ),
            "gpu",
            Sharing("MPS", active_thread_percentage=25, pinned_memory_bytes=512 * 10**6),
            id="mps-full",
        ),
        pytest.param(
            {"apiVersion": V, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}},
            "mig",
            Sharing("MPS"),
            id="mig-mps",
        ),
    ],
)
def test_valid_configs(params: dict[str, Any], kind: DeviceKind, expected: Sharing) -> None:
    assert parse_config(params, kind, "dev") == expected


@pytest.mark.parametrize(
    ("params", "kind", "message"),
    [
        pytest.param("text", "gpu", "parameters must be an object", id="not-object"),
        pytest.param(
            {"apiVersion": "v9", "kind": "GpuConfig"},
            "gpu",
            "unknown apiVersion 'v9'",
            id="api-version",
        ),
        pytest.param(
            {"apiVersion": V, "kind": "TpuConfig"}, "gpu", "unknown kind 'TpuConfig'", id="kind"
        ),
        pytest.param(gpu(), "mig", "GpuConfig cannot configure a mig device", id="kind-mismatch"),
        pytest.param(gpu(extra=1), "gpu", r"unknown field\(s\) \['extra'\]", id="unknown-field"),
        pytest.param(
            gpu({"strategy": "Exclusive"}),
            "gpu",
            "strategy must be TimeSlicing or MPS",
            id="strategy",
        ),
        pytest.param(
            gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Eternal"}}),
            "gpu",
            "interval must be one of",
            id="interval",
        ),
        pytest.param(
            gpu({"strategy": "TimeSlicing", "mpsConfig": {}}),
            "gpu",
            "mpsConfig given with strategy TimeSlicing",
            id="mixed",
        ),
        pytest.param(
            {
                "apiVersion": V,
                "kind": "MigDeviceConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {}},
            },
            "mig",
            "MIG devices take no timeSlicingConfig",
            id="mig-timeslice-config",
        ),
        pytest.param(
            gpu({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
            "gpu",
            "1-100",
            id="percentage",
        ),
        pytest.param(
            gpu({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}),
            "gpu",
            "not a quantity",
            id="quantity",
        ),
    ],
)
def test_invalid_configs_are_clear_errors(params: Any, kind: DeviceKind, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(params, kind, "dev")


def test_later_config_wins() -> None:
    first = gpu({"strategy": "MPS"})
    second = gpu({"strategy": "TimeSlicing"})
    assert resolve_sharing([first, second], "gpu", "d").strategy == "TimeSlicing"
    assert resolve_sharing([], "gpu", "d") == Sharing()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("1Gi", 2**30, id="Gi"),
        pytest.param("10M", 10**7, id="M"),
        pytest.param(4096, 4096, id="int"),
    ],
)
def test_quantity(value: Any, expected: int) -> None:
    assert parse_quantity(value, "w") == expected


def test_env() -> None:
    mps = Sharing("MPS", active_thread_percentage=10, pinned_memory_bytes=2**30)
    assert mps.env(["GPU-a", "GPU-b"]) == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-a=1024M,GPU-b=1024M",
    ]
    assert Sharing("TimeSlicing", "Long").env(["x"]) == ["GPUDRA_TIME_SLICE_INTERVAL=Long"]
    assert Sharing().env(["x"]) == []
