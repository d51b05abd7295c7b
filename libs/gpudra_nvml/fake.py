"""A fake NVML library: the `pynvml` function surface gpudra's adapter uses, served from a profile.

`FakeNvml(profile)` is a drop-in for the `pynvml` module as far as `gpudra_nvml.adapter` is
concerned: the same function names and argument conventions, pynvml's own ctypes structs as return
values (filled the way libnvidia-ml fills them), handles that are real `c_nvmlDevice_t` pointers
(never dereferenced), and failures raised as pynvml's real `NVMLError_*` classes. Constants, struct
types and exception classes are pynvml's own, looked up on the real module.

It is a simulator, not hardware: nothing it returns describes a real GPU. Faults are scheduled in
seconds since the fake was created, on an injectable clock (tests drive a manual clock):
`inject_xid`, `lose_device`, `recover_device`, `add_ecc_errors`, `remap_row`; `create_mig_device` changes the
MIG layout at once, as an operator with nvidia-smi would.

Assumption (documented, not verified on hardware here): possible MIG placements are reported only
for GPUs whose MIG mode is enabled; on others the call fails with NVML_ERROR_NOT_SUPPORTED.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pynvml

from gpudra_nvml.fake_base import _GPU_BASE, _MIB, _SET_BASE, _address, _EventSet, _handle, _raise
from gpudra_nvml.fake_topology import FakeTopology

#: Architectures without a row remapper (it came with Ampere; they retire pages instead).
_NO_ROW_REMAPPER = frozenset({"KEPLER", "MAXWELL", "PASCAL", "VOLTA", "TURING"})


class FakeNvml(FakeTopology):
    """The simulator library object; see the module docstring."""

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
        # NVML answers only where the GPU's memory is a NUMA node of its own (Grace platforms),
        # and then with that node, which no profile models. A profile's `numaNode` is the CPU
        # affinity the kernel reports in sysfs; the loader serves it in sysfs' place.
        self._gpu(handle)
        _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

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

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        """(corrected, uncorrected, pending, failure) as pynvml returns them. NOT_SUPPORTED before
        Ampere and, as NVML documents, on a MIG-enabled GPU with MIG instances."""
        state = self._gpu(handle)
        if self.profile.model.architecture in _NO_ROW_REMAPPER or state.spec.mig:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 0, state.remapped_uncorrected, int(state.remap_pending), int(state.remap_failed)

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
