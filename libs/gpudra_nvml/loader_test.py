from __future__ import annotations

import pynvml
import pytest

from gpudra_nvml.errors import NvmlUnavailableError, ProfileError
from gpudra_nvml.loader import open_adapter
from gpudrapb.v1 import inventory_pb2 as pb


def _nvml_missing() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return True
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return False


needs_no_nvml = pytest.mark.skipif(not _nvml_missing(), reason="this host has an NVML library")


@needs_no_nvml
def test_missing_library_is_a_clear_error() -> None:
    with pytest.raises(NvmlUnavailableError, match=r"libnvidia-ml\.so\.1.*simulator profile"):
        open_adapter()


@needs_no_nvml
def test_missing_library_falls_back_when_told(caplog: pytest.LogCaptureFixture) -> None:
    opened = open_adapter(fallback_profile="l4-pcie")
    assert opened.source == pb.InventorySource(
        kind=pb.InventorySource.KIND_SIMULATOR, profile="l4-pcie"
    )
    assert "SIMULATED" in caplog.text


def test_unknown_simulator_profile() -> None:
    with pytest.raises(ProfileError, match="unknown profile"):
        open_adapter(profile="dgx-z9000")
