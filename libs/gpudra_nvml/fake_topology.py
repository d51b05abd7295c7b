"""The simulator's MIG, NVLink and fabric functions (see `gpudra_nvml.fake`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pynvml

from gpudra_nvml.fake_base import (
    _GI_BASE,
    _GPU_BASE,
    _MIG_BASE,
    FakeBase,
    _address,
    _GpuState,
    _handle,
    _raise,
    _target,
)
from gpudra_nvml.profiles import MigInstanceSpec


class FakeTopology(FakeBase):
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
        # MIG devices are the GPU instances that have a compute instance, numbered densely.
        devices = [i for i, m in enumerate(state.spec.mig) if m.compute]
        if not 0 <= index < len(devices):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return _handle(pynvml.c_nvmlDevice_t, _MIG_BASE + state.spec.index * 0x100 + devices[index])

    def create_mig_device(self, index: int, profile: str, start: int) -> None:
        """What `nvidia-smi mig -cgi <profile> -C` does on GPU `index` at memory slice `start`: one
        GPU instance with one compute instance spanning it, numbered after the existing ones. For
        tests of readers that must see a layout changed after they started (an operator, another
        process). Refused as NVML refuses: MIG off, unknown profile or placement, overlap."""
        self._create_gpu_instance(index, profile, start, compute=True)

    def create_gpu_instance(self, index: int, profile: str, start: int) -> None:
        """What `nvidia-smi mig -cgi <profile>` (without `-C`) does: a GPU instance holding its
        memory slices but no compute instance, so no MIG device. Refused like `create_mig_device`.
        """
        self._create_gpu_instance(index, profile, start, compute=False)

    def _create_gpu_instance(self, index: int, profile: str, start: int, compute: bool) -> None:
        state = self._gpu_state(index)
        instances = state.spec.mig
        if instances is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        spec = next((p for p in self.profile.model.mig_profiles if p.name == profile), None)
        if spec is None or start not in spec.placements:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        taken = {k for m in instances for k in range(m.start, m.start + m.profile.size)}
        if taken & set(range(start, start + spec.size)) or len(instances) >= 7:
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        made = MigInstanceSpec(spec, start, compute)
        state.spec = dataclasses.replace(state.spec, mig=(*instances, made))

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

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, instances_ref: Any, count_ref: Any
    ) -> int:
        """The GPU instances of one profile, with or without compute instances."""
        state = self._gpu(handle)
        if state.spec.mig is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not any(p.profile_id == profile_id for p in self.profile.model.mig_profiles):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        array, count = _target(instances_ref), _target(count_ref)
        found = [i + 1 for i, m in enumerate(state.spec.mig) if m.profile.profile_id == profile_id]
        for k, gi_id in enumerate(found):
            address = _GI_BASE + state.spec.index * 0x100 + gi_id
            array[k] = _handle(pynvml.c_nvmlGpuInstance_t, address)
        count.value = len(found)
        return int(pynvml.NVML_SUCCESS)

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
