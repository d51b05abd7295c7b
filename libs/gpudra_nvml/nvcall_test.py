from __future__ import annotations

import pynvml
import pytest

from gpudra_nvml.errors import DeviceLostError, NvmlCallError, NvmlUnavailableError
from gpudra_nvml.nvcall import Nvml, text


class _Lib:
    """A library object whose functions fail with a chosen NVML code."""

    NVMLError = pynvml.NVMLError

    def __init__(self, code: int) -> None:
        self.code = code

    def nvmlDeviceGetCount(self) -> int:
        raise pynvml.NVMLError(self.code)


@pytest.mark.parametrize(
    ("code", "expected", "message"),
    [
        pytest.param(
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            NvmlUnavailableError,
            "libnvidia-ml",
            id="no-library",
        ),
        pytest.param(
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailableError, "not loaded", id="no-driver"
        ),
        pytest.param(pynvml.NVML_ERROR_GPU_IS_LOST, DeviceLostError, "GPU is lost", id="lost"),
        pytest.param(
            pynvml.NVML_ERROR_INSUFFICIENT_POWER, DeviceLostError, "power cables", id="no-power"
        ),
        pytest.param(pynvml.NVML_ERROR_IRQ_ISSUE, DeviceLostError, "interrupt", id="irq"),
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, NvmlCallError, "nvmlDeviceGetCount", id="other"),
    ],
)
def test_nvml_errors_are_translated(code: int, expected: type[Exception], message: str) -> None:
    with pytest.raises(expected, match=message) as info:
        Nvml(_Lib(code)).call("nvmlDeviceGetCount")
    assert isinstance(info.value.__cause__, pynvml.NVMLError)


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        pytest.param(pynvml.NVML_ERROR_NOT_SUPPORTED, True, id="not-supported"),
        pytest.param(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, True, id="old-driver"),
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, False, id="real-failure"),
    ],
)
def test_optional_answers_none_only_for_absent_features(code: int, absent: bool) -> None:
    nvml = Nvml(_Lib(code))
    if absent:
        assert nvml.optional("nvmlDeviceGetCount") is None
    else:
        with pytest.raises(NvmlCallError):
            nvml.optional("nvmlDeviceGetCount")


def test_missing_function_is_an_error_for_call_and_none_for_optional() -> None:
    nvml = Nvml(_Lib(0))
    assert nvml.optional("nvmlDeviceGetNumaNodeId") is None
    with pytest.raises(NvmlCallError, match="function not found"):
        nvml.call("nvmlDeviceGetNumaNodeId")


@pytest.mark.parametrize(
    ("raw", "want"), [pytest.param(b"12.5", "12.5", id="bytes"), pytest.param("x", "x", id="str")]
)
def test_text(raw: object, want: str) -> None:
    assert text(raw) == want


class _Refusing:
    NVMLError = pynvml.NVMLError

    def nvmlInit(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceGetGpuInstanceById(self, *args: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)


def test_no_permission_is_fatal_only_for_init() -> None:
    nvml = Nvml(_Refusing())
    with pytest.raises(NvmlUnavailableError, match="no permission"):
        nvml.call("nvmlInit")
    assert nvml.optional("nvmlDeviceGetGpuInstanceById", None, 1) is None
