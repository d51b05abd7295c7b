"""A fake NVML library: the `pynvml` function surface gpudra's adapter uses, served from a profile.

`FakeNvml(profile)` is a drop-in for the `pynvml` module as far as `gpudra_nvml.adapter` is
concerned: the same function names and argument conventions, pynvml's own ctypes structs as return
values (filled the way libnvidia-ml fills them), handles that are real `c_nvmlDevice_t` pointers
(never dereferenced), and failures raised as pynvml's real `NVMLError_*` classes. Constants, struct
types and exception classes are pynvml's own, looked up on the real module.

It is a simulator, not hardware: nothing it returns describes a real GPU. Faults are scheduled in
seconds since the fake was created, on an injectable clock (tests drive a manual clock):
`inject_xid`, `lose_device`, `recover_device`, `add_ecc_errors`.

Assumption (documented, not verified on hardware here): possible MIG placements are reported only
for GPUs whose MIG mode is enabled; on others the call fails with NVML_ERROR_NOT_SUPPORTED.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import math
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


@dataclass
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    queue: deque[tuple[int, int, int]] = field(default_factory=deque)  # (gpu, type, data)


class FakeNvml:
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

        self._gpu_state(index)
        self._schedule(at, recover)

    def add_ecc_errors(self, index: int, uncorrected: int, at: float | None = None) -> None:
        def add() -> None:
            self._gpus[index].ecc_uncorrected += uncorrected
            self._emit(index, pynvml.nvmlEventTypeDoubleBitEccError, 0)

        self._gpu_state(index)
        self._schedule(at, add)

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

    # --- system ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        if not self._initialized:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.profile.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        return self.profile.cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return self.profile.nvml_version

    # --- devices -----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._check_init()
        if self._gpu_state(index).lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return _handle(pynvml.c_nvmlDevice_t, _GPU_BASE + index)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle).spec.index

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._gpu(handle).spec.index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        state, mig, mig_index = self._resolve(handle)
        if mig is None:
            return state.spec.uuid
        return "MIG-" + state.spec.uuid.removeprefix("GPU-")[:-4] + f"{mig_index:04x}"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        state, mig, _ = self._resolve(handle)
        name = self.profile.model.name
        return name if mig is None else f"{name} MIG {mig.profile.name}"

    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        self._resolve(handle)
        return int(getattr(pynvml, "NVML_BRAND_" + self.profile.model.brand))

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        self._resolve(handle)
        return int(getattr(pynvml, "NVML_DEVICE_ARCH_" + self.profile.model.architecture))

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        self._resolve(handle)
        return self.profile.model.compute_capability

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        state, _, _ = self._resolve(handle)
        return self._pci(state.spec.bus_id, self.profile.model.pci_device_id)

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

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        state, mig, _ = self._resolve(handle)
        total = (self.profile.model.memory_mib if mig is None else mig.profile.memory_mib) * _MIB
        used = min(total, self.profile.utilization_for(state.spec.index).memory_used_mib * _MIB)
        if mig is not None:
            used = min(total, used // max(1, len(state.spec.mig or ())))
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = total, used, total - used
        return memory

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        self._gpu(handle)
        return self.profile.model.vbios

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        numa = self._gpu(handle).spec.numa_node
        if numa is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(numa)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        state = self._gpu(handle)
        pattern = self.profile.utilization_for(state.spec.index)
        util = pynvml.c_nvmlUtilization_t()
        if pattern.pattern == "sine":
            phase = math.sin(2 * math.pi * self.elapsed() / pattern.period_s + state.spec.index)
            level = round(pattern.low + (pattern.high - pattern.low) * (phase + 1) / 2)
            util.gpu, util.memory = level, level // 2
        elif pattern.pattern == "constant":
            util.gpu, util.memory = pattern.gpu, pattern.memory
        else:  # idle-allocated: memory held, nothing running
            util.gpu, util.memory = 0, 0
        return util

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        state = self._gpu(handle)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return state.ecc_uncorrected
        return state.ecc_corrected

    # --- MIG ---------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        state = self._gpu(handle)
        if not self.profile.model.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if state.spec.mig is not None else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        state = self._gpu(handle)
        return 7 if state.spec.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        state = self._gpu(handle)
        if state.spec.mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < len(state.spec.mig or ()):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return _handle(pynvml.c_nvmlDevice_t, _MIG_BASE + state.spec.index * 0x100 + index)

    def _gi_id(self, state: _GpuState, mig_index: int) -> int:
        # NVML numbers GPU instances from 1 in creation order on real GPUs; the profile's order.
        return mig_index + 1

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        state, mig, mig_index = self._resolve(handle)
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gi_id(state, mig_index)

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        _, mig, _ = self._resolve(handle)
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 0

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        state, mig, _ = self._resolve(handle)
        attrs = pynvml.c_nvmlDeviceAttributes()
        model = self.profile.model
        if mig is None:
            attrs.multiprocessorCount, attrs.memorySizeMB = model.multiprocessors, model.memory_mib
            attrs.gpuInstanceSliceCount = attrs.computeInstanceSliceCount = 7
            return attrs
        p = mig.profile
        attrs.multiprocessorCount, attrs.memorySizeMB = p.multiprocessors, p.memory_mib
        attrs.sharedCopyEngineCount, attrs.sharedDecoderCount = p.copy_engines, p.decoders
        attrs.sharedEncoderCount, attrs.sharedJpegCount = p.encoders, p.jpeg_engines
        attrs.sharedOfaCount = p.ofa_engines
        slices = int(p.name.split("g.")[0])
        attrs.gpuInstanceSliceCount = attrs.computeInstanceSliceCount = slices
        return attrs

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gpu_instance_id: int) -> Any:
        state = self._gpu(handle)
        if not 1 <= gpu_instance_id <= len(state.spec.mig or ()):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        address = _GI_BASE + state.spec.index * 0x100 + gpu_instance_id
        return _handle(pynvml.c_nvmlGpuInstance_t, address)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: Any) -> Any:
        self._check_init()
        address = _address(gpu_instance) - _GI_BASE
        state = self._gpu_state(address // 0x100)
        instances = state.spec.mig or ()
        gi_id = address % 0x100
        if not 1 <= gi_id <= len(instances):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mig = instances[gi_id - 1]
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = _handle(pynvml.c_nvmlDevice_t, _GPU_BASE + state.spec.index)
        info.id, info.profileId = gi_id, mig.profile.profile_id
        info.placement.start, info.placement.size = mig.start, mig.profile.size
        return info

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> Any:
        state = self._gpu(handle)
        if state.spec.mig is None and not self.profile.model.mig_profiles:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in self.profile.model.mig_profiles:
            if p.nvml_index == profile:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id, info.sliceCount, info.instanceCount = (
                    p.profile_id,
                    p.size,
                    len(p.placements),
                )
                info.multiprocessorCount, info.copyEngineCount = p.multiprocessors, p.copy_engines
                info.decoderCount, info.encoderCount = p.decoders, p.encoders
                info.jpegCount, info.ofaCount = p.jpeg_engines, p.ofa_engines
                info.memorySizeMB, info.name = p.memory_mib, f"MIG {p.name}"
                return info
        _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profile_id: int, placements_ref: Any, count_ref: Any
    ) -> int:
        state = self._gpu(handle)
        if state.spec.mig is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        profile = next(
            (p for p in self.profile.model.mig_profiles if p.profile_id == profile_id), None
        )
        if profile is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        count = _target(count_ref)
        if placements_ref is None:
            count.value = len(profile.placements)
            return int(pynvml.NVML_SUCCESS)
        if count.value < len(profile.placements):
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        array = _target(placements_ref)
        for i, start in enumerate(profile.placements):
            array[i].start, array[i].size = start, profile.size
        count.value = len(profile.placements)
        return int(pynvml.NVML_SUCCESS)

    # --- NVLink and fabric ---------------------------------------------------------------------

    def _link(self, handle: Any, link: int) -> Any:
        state = self._gpu(handle)
        links = self.profile.links.get(state.spec.index, ())
        if not links:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        self._link(handle, link)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        spec = self._link(handle, link)
        if spec.remote_is_switch:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        return self._pci(self._link(handle, link).remote_bus_id, 0)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info_ref: Any) -> int:
        self._gpu(handle)
        fabric = self.profile.fabric
        if fabric is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = _target(info_ref)
        info.state, info.status = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS
        info.cliqueId = fabric.clique_id
        raw = bytes.fromhex(fabric.cluster_uuid.replace("-", ""))
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        return int(pynvml.NVML_SUCCESS)

    # --- events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._check_init()
        set_id = next(self._set_ids)
        self._sets[set_id] = _EventSet()
        return _handle(pynvml.c_nvmlEventSet_t, _SET_BASE + set_id)

    def _event_set(self, event_set: Any) -> _EventSet:
        es = self._sets.get(_address(event_set) - _SET_BASE)
        if es is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._gpu(handle)
        return int(
            pynvml.nvmlEventTypeXidCriticalError
            | pynvml.nvmlEventTypeDoubleBitEccError
            | pynvml.nvmlEventTypeSingleBitEccError
        )

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        state = self._gpu(handle)
        es = self._event_set(event_set)
        es.registered[state.spec.index] = es.registered.get(state.spec.index, 0) | event_types

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        """Deliver the next due event; with none due, wait for the clock (real time only)."""
        self._check_init()
        es = self._event_set(event_set)
        if not es.queue and timeout_ms > 0 and self._clock is time.monotonic and self._faults:
            wait = min(timeout_ms / 1000, max(0.0, self._faults[0][0] - self.elapsed()))
            time.sleep(wait)
            self._advance()
        if not es.queue:
            _raise(pynvml.NVML_ERROR_TIMEOUT)
        index, event_type, data = es.queue.popleft()
        event = pynvml.c_nvmlEventData_t()
        event.device = _handle(pynvml.c_nvmlDevice_t, _GPU_BASE + index)
        event.eventType, event.eventData = event_type, data
        event.gpuInstanceId = event.computeInstanceId = 0xFFFFFFFF
        return event

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._event_set(event_set)
        del self._sets[_address(event_set) - _SET_BASE]
