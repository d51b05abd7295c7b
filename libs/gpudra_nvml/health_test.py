from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from gpudra_nvml.fake import FakeNvml
from gpudra_nvml.health import HealthMonitor, Transition
from gpudra_nvml.loader import open_simulator
from gpudrapb.v1 import inventory_pb2 as pb

XID, ECC, LOST = (
    pb.HealthCondition.KIND_XID,
    pb.HealthCondition.KIND_ECC,
    pb.HealthCondition.KIND_LOST,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _monitor(
    clock: Clock, hold: float = 60.0, wrap: Callable[[FakeNvml], Any] | None = None
) -> tuple[FakeNvml, HealthMonitor]:
    """A monitor opened on every GPU of a simulated dgx-h100; with `wrap`, NVML is
    `wrap(simulator)` from before the monitor opens."""
    opened = open_simulator("dgx-h100", clock=clock)
    assert opened.fake is not None
    if wrap is not None:
        opened.adapter.nvml.lib = wrap(opened.fake)
    handles, _ = opened.adapter.handles()
    monitor = HealthMonitor(opened.adapter.nvml, clock=clock, xid_hold_s=hold)
    monitor.open(handles)
    return opened.fake, monitor


def _kinds(transitions: list[Transition]) -> list[tuple[int, int, int, bool]]:
    return [(t.index, t.condition.kind, t.condition.code, t.cleared) for t in transitions]


def test_healthy_node_has_no_transitions() -> None:
    _, monitor = _monitor(Clock())
    assert monitor.poll(8) == []


@pytest.mark.parametrize(
    ("xid", "raised"),
    [
        pytest.param(48, True, id="dbe-xid"),
        pytest.param(79, True, id="fell-off-bus-xid"),
        pytest.param(13, False, id="app-graphics-exception"),
        pytest.param(31, False, id="app-mmu-fault"),
    ],
)
def test_xid_at_time_t(xid: int, raised: bool) -> None:
    clock = Clock()
    fake, monitor = _monitor(clock)
    fake.inject_xid(2, xid, at=5.0)
    assert monitor.poll(8) == []  # not yet due
    clock.now += 5.0
    got = _kinds(monitor.poll(8))
    assert got == ([(2, XID, xid, False)] if raised else [])
    assert bool(monitor.conditions(2)) == raised


def test_xid_clears_after_hold_without_repeats() -> None:
    clock = Clock()
    fake, monitor = _monitor(clock, hold=60.0)
    fake.inject_xid(1, 94)
    monitor.poll(8)
    clock.now += 30
    assert monitor.poll(8) == []
    clock.now += 30
    assert _kinds(monitor.poll(8)) == [(1, XID, 94, True)]
    assert monitor.conditions(1) == []


def test_lost_device_and_recovery() -> None:
    clock = Clock()
    fake, monitor = _monitor(clock, hold=3600.0)
    fake.lose_device(5)
    got = _kinds(monitor.poll(8))
    assert (5, XID, 79, False) in got
    assert (5, LOST, 0, False) in got
    fake.recover_device(5)
    assert _kinds(monitor.poll(8)) == [(5, LOST, 0, True)]


def test_uncorrected_ecc_until_reset() -> None:
    clock = Clock()
    fake, monitor = _monitor(clock)
    fake.add_ecc_errors(0, 2)
    assert _kinds(monitor.poll(8)) == [(0, ECC, 2, False)]
    assert monitor.poll(8) == []  # unchanged count: no new transition
    fake.recover_device(0)  # a reset zeroes volatile counters
    assert _kinds(monitor.poll(8)) == [(0, ECC, 2, True)]


def test_close_frees_event_set() -> None:
    _, monitor = _monitor(Clock())
    monitor.close()
    monitor.close()  # idempotent
    assert monitor.poll(8) == []


def test_a_gpu_lost_when_the_monitor_opened_gets_its_xids_once_it_answers() -> None:
    clock = Clock()
    opened = open_simulator("dgx-h100", clock=clock)
    assert opened.fake is not None
    opened.fake.lose_device(3)
    handles, lost = opened.adapter.handles()
    assert lost == [3]
    monitor = HealthMonitor(opened.adapter.nvml, clock=clock, xid_hold_s=3600.0)
    monitor.open(handles)
    assert _kinds(monitor.poll(8)) == [(3, LOST, 0, False)]
    opened.fake.recover_device(3)
    assert _kinds(monitor.poll(8)) == [(3, LOST, 0, True)]
    opened.fake.inject_xid(3, 48)
    assert _kinds(monitor.poll(8)) == [(3, XID, 48, False)]


class _Refusal:
    """The simulator with NVML call `call` failing with `code` while `fixed` is unset, on the
    calls whose arguments `when(simulator, *args)` picks (every call by default). `over` puts
    it in front of a simulator."""

    def __init__(
        self,
        call: str,
        code: int = pynvml.NVML_ERROR_UNKNOWN,
        when: Callable[..., bool] = lambda lib, *args: True,
    ) -> None:
        self._call, self._code, self._when, self.fixed = call, code, when, False
        self._lib: Any = None

    def over(self, lib: FakeNvml) -> _Refusal:
        self._lib = lib
        return self

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name != self._call:
            return real

        def refused(*args: Any) -> Any:
            if not self.fixed and self._when(self._lib, *args):
                raise pynvml.NVMLError(self._code)
            return real(*args)

        return refused


def _on_gpu(index: int) -> Callable[..., bool]:
    """`_Refusal`'s `when` for a call on the handle of GPU `index`."""
    return lambda lib, handle, *args: lib.nvmlDeviceGetIndex(handle) == index


def test_one_gpu_whose_ecc_cannot_be_read_does_not_blind_the_others() -> None:
    lib = _Refusal("nvmlDeviceGetTotalEccErrors", when=_on_gpu(2))
    fake, monitor = _monitor(Clock(), hold=3600.0, wrap=lib.over)
    fake.add_ecc_errors(0, 3)
    fake.lose_device(5)
    got = _kinds(monitor.poll(8))
    assert (0, ECC, 3, False) in got
    assert (5, LOST, 0, False) in got
    assert not [t for t in got if t[0] == 2]


def _is_lost(lib: FakeNvml, index: int) -> bool:
    try:
        lib.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError_GpuIsLost:
        return True
    return False


def _a_gpu_is_lost(lib: FakeNvml, *args: Any) -> bool:
    """`_Refusal`'s `when` for NVML's event wait answering GPU_IS_LOST while a GPU of the set is
    lost (as its API documents it may), instead of the next event."""
    return any(_is_lost(lib, i) for i in range(lib.nvmlDeviceGetCount()))


def test_an_event_wait_failing_on_a_lost_gpu_still_checks_every_gpu() -> None:
    lost = _Refusal("nvmlEventSetWait_v2", pynvml.NVML_ERROR_GPU_IS_LOST, when=_a_gpu_is_lost)
    fake, monitor = _monitor(Clock(), hold=3600.0, wrap=lost.over)
    fake.lose_device(5)
    fake.add_ecc_errors(1, 2)
    got = _kinds(monitor.poll(8))
    assert (5, LOST, 0, False) in got
    assert (1, ECC, 2, False) in got
    fake.recover_device(5)
    fake.inject_xid(3, 48)
    assert (3, XID, 48, False) in _kinds(monitor.poll(8))


def test_a_gpu_whose_event_registration_fails_is_still_checked_and_registered_later() -> None:
    lib = _Refusal("nvmlDeviceRegisterEvents", when=_on_gpu(4))
    fake, monitor = _monitor(Clock(), hold=3600.0, wrap=lib.over)  # the other GPUs are registered
    fake.add_ecc_errors(4, 1)
    fake.inject_xid(1, 48)
    assert sorted(_kinds(monitor.poll(8))) == [(1, XID, 48, False), (4, ECC, 1, False)]
    lib.fixed = True
    assert monitor.poll(8) == []
    fake.inject_xid(4, 48)
    assert _kinds(monitor.poll(8)) == [(4, XID, 48, False)]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, id="unknown"),
        pytest.param(pynvml.NVML_ERROR_INVALID_ARGUMENT, id="invalid-event-set"),
    ],
)
def test_a_failing_event_wait_does_not_stop_the_checks_of_every_gpu(code: int) -> None:
    lib = _Refusal("nvmlEventSetWait_v2", code)
    fake, monitor = _monitor(Clock(), hold=3600.0, wrap=lib.over)
    fake.lose_device(5)
    fake.add_ecc_errors(1, 2)
    got = _kinds(monitor.poll(8))
    assert sorted(got) == [(1, ECC, 2, False), (5, LOST, 0, False)]
    # Once the wait answers again, the events it queued meanwhile are delivered.
    lib.fixed = True
    fake.recover_device(5)
    assert sorted(_kinds(monitor.poll(8))) == [(5, XID, 79, False), (5, LOST, 0, True)]


@pytest.mark.parametrize(
    ("code", "why"),
    [
        pytest.param(pynvml.NVML_ERROR_INSUFFICIENT_POWER, "power", id="power-cable"),
        pytest.param(pynvml.NVML_ERROR_IRQ_ISSUE, "interrupt", id="irq-issue"),
    ],
)
def test_a_gpu_nvml_refuses_as_unusable_is_unhealthy_until_it_answers(code: int, why: str) -> None:
    # NVML refuses the handle of a GPU whose power cables are loose or whose interrupts fail: it
    # cannot run anything, so it must not stay schedulable on its last description.
    lib = _Refusal("nvmlDeviceGetHandleByIndex", code, when=lambda _, index: index == 6)
    lib.fixed = True  # NVML answers while the monitor opens
    _, monitor = _monitor(Clock(), hold=3600.0, wrap=lib.over)
    lib.fixed = False
    assert _kinds(monitor.poll(8)) == [(6, LOST, 0, False)]
    assert why in monitor.conditions(6)[0].message
    lib.fixed = True
    assert _kinds(monitor.poll(8)) == [(6, LOST, 0, True)]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(pynvml.NVML_ERROR_NOT_SUPPORTED, id="not-supported"),
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, id="unknown"),
    ],
)
def test_without_an_event_set_the_gpus_are_still_checked(code: int) -> None:
    lib = _Refusal("nvmlEventSetCreate", code)
    fake, monitor = _monitor(Clock(), hold=3600.0, wrap=lib.over)  # no XIDs now, no failure
    fake.add_ecc_errors(2, 1)
    fake.lose_device(4)
    assert sorted(_kinds(monitor.poll(8))) == [(2, ECC, 1, False), (4, LOST, 0, False)]
    # Once NVML creates event sets, XIDs are watched again.
    lib.fixed = True
    assert monitor.poll(8) == []
    fake.inject_xid(6, 48)
    assert _kinds(monitor.poll(8)) == [(6, XID, 48, False)]
    monitor.close()


def _address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class _RegistrationBreaksTheSet:
    """NVML's documented behaviour: when nvmlDeviceRegisterEvents fails with UNKNOWN, the event
    set is in an undefined state and must be freed. Here such a set answers every wait with
    UNKNOWN. Registering GPU `index` fails that way."""

    def __init__(self, lib: FakeNvml, index: int) -> None:
        self._lib, self._index = lib, index
        self.broken: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name == "nvmlDeviceRegisterEvents":

            def register(handle: Any, types: int, event_set: Any) -> Any:
                if self._lib.nvmlDeviceGetIndex(handle) == self._index:
                    self.broken.add(_address(event_set))
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
                return real(handle, types, event_set)

            return register
        if name == "nvmlEventSetWait_v2":

            def wait(event_set: Any, timeout_ms: int) -> Any:
                if _address(event_set) in self.broken:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
                return real(event_set, timeout_ms)

            return wait
        return real


def test_an_event_set_left_undefined_by_a_registration_is_replaced() -> None:
    fake, monitor = _monitor(
        Clock(), hold=3600.0, wrap=lambda lib: _RegistrationBreaksTheSet(lib, 4)
    )
    fake.inject_xid(1, 48)
    fake.inject_xid(7, 94)
    assert sorted(_kinds(monitor.poll(8))) == [(1, XID, 48, False), (7, XID, 94, False)]
    fake.inject_xid(2, 48)  # still watched after GPU 4's registration failed again in that poll
    assert _kinds(monitor.poll(8)) == [(2, XID, 48, False)]
    monitor.close()


PENDING = pb.HealthCondition.KIND_ROW_REMAP_PENDING
FAILED = pb.HealthCondition.KIND_ROW_REMAP_FAILED


def test_pending_row_remap_until_reset() -> None:
    clock = Clock()
    fake, monitor = _monitor(clock)
    fake.remap_row(3)
    assert _kinds(monitor.poll(8)) == [(3, PENDING, 1, False)]
    assert "reset" in monitor.conditions(3)[0].message
    assert monitor.poll(8) == []  # unchanged: no new transition
    fake.remap_row(3)  # a second row before the reset: the count changes
    assert _kinds(monitor.poll(8)) == [(3, PENDING, 2, False)]
    fake.recover_device(3)  # the reset applies the remap
    assert _kinds(monitor.poll(8)) == [(3, PENDING, 2, True)]
    assert monitor.conditions(3) == []


def test_failed_row_remap_stays_through_resets() -> None:
    clock = Clock()
    fake, monitor = _monitor(clock)
    fake.remap_row(6, failed=True)
    assert _kinds(monitor.poll(8)) == [(6, FAILED, 0, False)]
    fake.recover_device(6)
    assert monitor.poll(8) == []
    assert [c.kind for c in monitor.conditions(6)] == [FAILED]


class _RemapAnswer:
    """nvmlDeviceGetRemappedRows failing with `code` (NOT_SUPPORTED before Ampere) on every GPU."""

    def __init__(self, lib: Any, code: int | None) -> None:
        self._lib, self.code = lib, code

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name != "nvmlDeviceGetRemappedRows":
            return real

        def call(handle: Any) -> Any:
            if self.code is not None:
                raise pynvml.NVMLError(self.code)
            return real(handle)

        return call


def test_row_remapper_not_supported_is_neither_healthy_nor_unhealthy() -> None:
    clock = Clock()
    wrapped: list[_RemapAnswer] = []

    def wrap(fake: FakeNvml) -> Any:
        wrapped.append(_RemapAnswer(fake, None))
        return wrapped[0]

    fake, monitor = _monitor(clock, wrap=wrap)
    fake.remap_row(1)
    assert _kinds(monitor.poll(8)) == [(1, PENDING, 1, False)]
    # Pre-Ampere, or (NVML's documented case) a MIG-enabled GPU with instances: nothing known.
    wrapped[0].code = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.recover_device(1)
    fake.remap_row(2, failed=True)
    assert monitor.poll(8) == []  # neither raised nor cleared
    assert [c.kind for c in monitor.conditions(1)] == [PENDING]
    # A query failing otherwise leaves the remap conditions too, and the ECC check still runs.
    wrapped[0].code = pynvml.NVML_ERROR_UNKNOWN
    fake.add_ecc_errors(4, 1)
    assert _kinds(monitor.poll(8)) == [(4, ECC, 1, False)]
    wrapped[0].code = None
    assert _kinds(monitor.poll(8)) == [(1, PENDING, 1, True), (2, FAILED, 0, False)]


def test_mig_gpu_with_instances_has_no_row_remapper_answer() -> None:
    clock = Clock()
    opened = open_simulator("a100-mig", clock=clock)
    assert opened.fake is not None
    handles, _ = opened.adapter.handles()
    monitor = HealthMonitor(opened.adapter.nvml, clock=clock)
    monitor.open(handles)
    opened.fake.remap_row(0)  # MIG instances: NOT_SUPPORTED
    opened.fake.remap_row(2)  # MIG enabled, no instance yet: answers
    opened.fake.remap_row(4)  # MIG disabled
    assert _kinds(monitor.poll(8)) == [(2, PENDING, 1, False), (4, PENDING, 1, False)]
