"""The simulator's core: device lookups by handle, NVML error raising and the fault schedule.

Private to `gpudra_nvml.fake`; split out so that each module of the fake stays one concern.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pynvml

from gpudra_nvml.faults import FaultSpec
from gpudra_nvml.profiles import GpuSpec, MigInstanceSpec, Profile

_MIB = 1024 * 1024
_GPU_BASE, _MIG_BASE, _GI_BASE, _SET_BASE = 0x10000, 0x20000, 0x30000, 0x40000


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


def _target(ref: Any) -> Any:
    """The object behind `ctypes.byref(x)` (or `x` itself): NVML's out-parameters."""
    return getattr(ref, "_obj", ref)


def _address(handle: Any) -> int:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    return int(value or 0)


def _handle(kind: Any, address: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(address), kind)


@dataclass
class _GpuState:
    spec: GpuSpec
    lost: bool = False
    ecc_uncorrected: int = 0
    ecc_corrected: int = 0
    #: Row remapper (InfoROM): rows remapped for uncorrectable errors, a remap waiting for the
    #: next reset, a remap that could not be made. Not volatile: a reset applies a pending remap
    #: and leaves the rest.
    remapped_uncorrected: int = 0
    remap_pending: bool = False
    remap_failed: bool = False


@dataclass
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    queue: deque[tuple[int, int, int]] = field(default_factory=deque)  # (gpu, type, data)


class FakeBase:
    """State and lookups shared by the fake's function groups."""

    """The simulator library object; see the module docstring."""

    def __init__(self, profile: Profile, clock: Callable[[], float] = time.monotonic) -> None:
        self.profile = profile
        self._clock = clock
        self._t0 = clock()
        self._initialized = 0
        self._gpus = [_GpuState(g) for g in profile.gpus]
        self._sets: dict[int, _EventSet] = {}
        self._set_ids = itertools.count(1)
        self._faults: list[tuple[float, int, Callable[[], None]]] = []
        self._fault_seq = itertools.count()
        self.apply(profile.faults)

    def __getattr__(self, name: str) -> Any:
        # Constants, struct types and NVMLError classes come from the real module; NVML functions
        # this fake does not implement stay missing rather than reaching the real library.
        value = getattr(pynvml, name)
        if callable(value) and name.startswith("nvml") and not name.startswith("nvmlEventType"):
            raise AttributeError(f"FakeNvml does not implement {name}")
        return value

    # --- fault injection -------------------------------------------------------------------

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def _schedule(self, at: float | None, action: Callable[[], None]) -> None:
        heapq.heappush(
            self._faults, (self.elapsed() if at is None else at, next(self._fault_seq), action)
        )
        self._advance()

    def _advance(self) -> None:
        now = self.elapsed()
        while self._faults and self._faults[0][0] <= now:
            heapq.heappop(self._faults)[2]()

    def _emit(self, index: int, event_type: int, data: int) -> None:
        for es in self._sets.values():
            if es.registered.get(index, 0) & event_type:
                es.queue.append((index, event_type, data))

    def apply(self, faults: tuple[FaultSpec, ...] | list[FaultSpec]) -> None:
        """Schedule a fault script (see `gpudra_nvml.faults`)."""
        for f in faults:
            if f.kind == "xid":
                self.inject_xid(f.gpu, f.code, at=f.at)
            elif f.kind == "lost":
                self.lose_device(f.gpu, at=f.at)
            elif f.kind == "recover":
                self.recover_device(f.gpu, at=f.at)
            elif f.kind in ("remap-pending", "remap-failed"):
                self.remap_row(f.gpu, failed=f.kind == "remap-failed", at=f.at)
            else:
                self.add_ecc_errors(f.gpu, f.code, at=f.at)

    def inject_xid(self, index: int, xid: int, at: float | None = None) -> None:
        """An XID critical error on GPU `index` at `at` seconds (now when None)."""
        self._gpu_state(index)
        self._schedule(at, lambda: self._emit(index, pynvml.nvmlEventTypeXidCriticalError, xid))

    def lose_device(self, index: int, at: float | None = None) -> None:
        """GPU `index` falls off the bus (XID 79, then every call fails with GPU_IS_LOST)."""

        def lose() -> None:
            self._emit(index, pynvml.nvmlEventTypeXidCriticalError, 79)
            self._gpus[index].lost = True

        self._gpu_state(index)
        self._schedule(at, lose)

    def recover_device(self, index: int, at: float | None = None) -> None:
        """GPU `index` answers again after a reset; volatile ECC counters start from zero."""

        def recover() -> None:
            state = self._gpus[index]
            state.lost, state.ecc_uncorrected, state.ecc_corrected = False, 0, 0
            state.remap_pending = False  # the reset applies the pending remap

        self._gpu_state(index)
        self._schedule(at, recover)

    def add_ecc_errors(self, index: int, uncorrected: int, at: float | None = None) -> None:
        def add() -> None:
            self._gpus[index].ecc_uncorrected += uncorrected
            self._emit(index, pynvml.nvmlEventTypeDoubleBitEccError, 0)

        self._gpu_state(index)
        self._schedule(at, add)

    def remap_row(self, index: int, failed: bool = False, at: float | None = None) -> None:
        """An uncorrectable memory error on GPU `index` whose row the remapper records for the
        next reset (pending), or cannot (`failed`: spare rows exhausted, sticky in the InfoROM)."""

        def remap() -> None:
            state = self._gpus[index]
            if failed:
                state.remap_failed = True
            else:
                state.remapped_uncorrected += 1
                state.remap_pending = True

        self._gpu_state(index)
        self._schedule(at, remap)

    # --- lookups -----------------------------------------------------------------------------

    def _check_init(self) -> None:
        if not self._initialized:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)
        self._advance()

    def _gpu_state(self, index: int) -> _GpuState:
        if not 0 <= index < len(self._gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[index]

    def _resolve(self, handle: Any) -> tuple[_GpuState, MigInstanceSpec | None, int]:
        """(gpu, MIG instance or None, MIG index) for a device handle; raises like NVML does."""
        self._check_init()
        address = _address(handle)
        if _GPU_BASE <= address < _MIG_BASE:
            state, mig, mig_index = self._gpu_state(address - _GPU_BASE), None, -1
        elif _MIG_BASE <= address < _GI_BASE:
            state = self._gpu_state((address - _MIG_BASE) // 0x100)
            mig_index = (address - _MIG_BASE) % 0x100
            instances = state.spec.mig or ()
            if mig_index >= len(instances):
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            mig = instances[mig_index]
            if not mig.compute:  # a GPU instance alone is no MIG device
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        else:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if state.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return state, mig, mig_index

    def _gpu(self, handle: Any) -> _GpuState:
        state, mig, _ = self._resolve(handle)
        if mig is not None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return state

    @staticmethod
    def _pci(bus_id: str, device_id: int) -> Any:
        # NVML writes an 8-digit domain in busId and a 4-digit one in the legacy field.
        info = pynvml.nvmlPciInfo_t()
        domain, bus, rest = bus_id.split(":")
        info.domain, info.bus = int(domain, 16), int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        info.busId = f"{info.domain:08X}:{info.bus:02X}:{rest.upper()}"
        info.busIdLegacy = f"{info.domain:04X}:{info.bus:02X}:{rest.upper()}"
        info.pciDeviceId = device_id
        return info
