"""The fake must be pynvml-shaped: same names, same parameters, pynvml's structs and exceptions."""

from __future__ import annotations

import inspect
from typing import Any

import pynvml
import pytest

from gpudra_nvml.fake import FakeNvml
from gpudra_nvml.health import HealthMonitor
from gpudra_nvml.loader import open_simulator
from gpudra_nvml.profiles import load_profile

FAKE_FUNCTIONS = sorted(
    n for n in dir(FakeNvml) if n.startswith("nvml") and callable(getattr(FakeNvml, n))
)


def _params(fn: Any, drop_self: bool) -> tuple[int, int]:
    params = list(inspect.signature(fn).parameters.values())[1 if drop_self else 0 :]
    required = sum(1 for p in params if p.default is inspect.Parameter.empty)
    return required, len(params)


@pytest.mark.parametrize("name", FAKE_FUNCTIONS)
def test_every_fake_function_matches_pynvml(name: str) -> None:
    real = getattr(pynvml, name, None)
    assert callable(real), f"pynvml has no {name}"
    assert _params(getattr(FakeNvml, name), True) == _params(real, False)


class Spy:
    """Wraps a library object and records every NVML function called through it."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        if name.startswith("nvml") and callable(value) and not name.startswith("nvmlEventType"):
            self.called.add(name)
        return value


def test_adapter_uses_only_functions_the_fake_implements() -> None:
    opened = open_simulator("a100-mig")
    spy = Spy(opened.fake)
    opened.adapter.nvml.lib = spy
    opened.adapter.discover()
    opened.adapter.utilization()
    handles, _ = opened.adapter.handles()
    monitor = HealthMonitor(opened.adapter.nvml)
    monitor.open(handles)
    monitor.poll(8)
    monitor.close()
    assert spy.called <= set(FAKE_FUNCTIONS)
    assert {
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlEventSetWait_v2",
    } <= spy.called


@pytest.mark.parametrize(
    ("call", "struct"),
    [
        pytest.param(
            lambda f, h: f.nvmlDeviceGetHandleByIndex(0), pynvml.c_nvmlDevice_t, id="handle"
        ),
        pytest.param(lambda f, h: f.nvmlDeviceGetPciInfo(h), pynvml.nvmlPciInfo_t, id="pci"),
        pytest.param(lambda f, h: f.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t, id="memory"),
        pytest.param(
            lambda f, h: f.nvmlDeviceGetUtilizationRates(h),
            pynvml.c_nvmlUtilization_t,
            id="utilization",
        ),
        pytest.param(
            lambda f, h: f.nvmlDeviceGetAttributes(h),
            pynvml.c_nvmlDeviceAttributes,
            id="attributes",
        ),
        pytest.param(
            lambda f, h: f.nvmlDeviceGetGpuInstanceProfileInfo(
                h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
            ),
            pynvml.c_nvmlGpuInstanceProfileInfo_v2_t,
            id="gi-profile",
        ),
        pytest.param(
            lambda f, h: f.nvmlDeviceGetNvLinkRemotePciInfo(h, 0),
            pynvml.nvmlPciInfo_t,
            id="nvlink-remote",
        ),
    ],
)
def test_returns_pynvml_structs(call: Any, struct: type) -> None:
    fake = FakeNvml(load_profile("a100-mig"))
    fake.nvmlInit()
    assert isinstance(call(fake, fake.nvmlDeviceGetHandleByIndex(0)), struct)


def test_pci_bus_id_is_written_as_nvml_writes_it() -> None:
    fake = FakeNvml(load_profile("dgx-h100"))
    fake.nvmlInit()
    info = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert (info.busId, info.busIdLegacy, info.bus) == ("00000000:1B:00.0", "0000:1B:00.0", 0x1B)


@pytest.mark.parametrize(
    ("action", "error"),
    [
        pytest.param(
            lambda f: f.nvmlDeviceGetCount(), pynvml.NVMLError_Uninitialized, id="not-initialised"
        ),
        pytest.param(
            lambda f: (f.nvmlInit(), f.nvmlDeviceGetHandleByIndex(99)),
            pynvml.NVMLError_InvalidArgument,
            id="bad-index",
        ),
        pytest.param(
            lambda f: (f.nvmlInit(), f.lose_device(0), f.nvmlDeviceGetHandleByIndex(0)),
            pynvml.NVMLError_GpuIsLost,
            id="lost",
        ),
        pytest.param(
            lambda f: (
                f.nvmlInit(),
                f.nvmlDeviceGetNvLinkState(f.nvmlDeviceGetHandleByIndex(0), 0),
            ),
            pynvml.NVMLError_NotSupported,
            id="no-nvlink-on-l4",
        ),
        pytest.param(
            lambda f: (f.nvmlInit(), f.nvmlEventSetWait_v2(f.nvmlEventSetCreate(), 0)),
            pynvml.NVMLError_Timeout,
            id="no-event",
        ),
        pytest.param(lambda f: f.nvmlDeviceGetP2PStatus, AttributeError, id="unimplemented"),
    ],
)
def test_failures_are_pynvml_exceptions(action: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        action(FakeNvml(load_profile("l4-pcie")))


def test_a_mig_device_created_later_is_discovered_like_one_of_the_profile() -> None:
    opened = open_simulator("a100-mig")
    assert opened.fake is not None
    opened.fake.create_mig_device(2, "3g.40gb", 4)
    devices = {d.name: d for d in opened.adapter.discover().devices}
    made = devices["gpu-2-mig-1-0"]
    assert (made.mig_profile, made.placement.start, made.placement.size) == ("3g.40gb", 4, 4)
    assert made.parent_uuid == devices["gpu-2"].uuid
    assert {p.start + p.size for p in devices["gpu-2"].free_placements} <= {1, 2, 3, 4}


@pytest.mark.parametrize(
    ("gpu", "profile", "start", "error"),
    [
        pytest.param(4, "1g.10gb", 0, pynvml.NVMLError_NotSupported, id="mig-off"),
        pytest.param(2, "5g.50gb", 0, pynvml.NVMLError_InvalidArgument, id="unknown-profile"),
        pytest.param(2, "3g.40gb", 2, pynvml.NVMLError_InvalidArgument, id="no-such-placement"),
        pytest.param(0, "1g.10gb", 2, pynvml.NVMLError_InsufficientResources, id="overlap"),
    ],
)
def test_mig_devices_are_refused_as_nvml_refuses_them(
    gpu: int, profile: str, start: int, error: type[Exception]
) -> None:
    fake = FakeNvml(load_profile("a100-mig"))
    with pytest.raises(error):
        fake.create_mig_device(gpu, profile, start)
