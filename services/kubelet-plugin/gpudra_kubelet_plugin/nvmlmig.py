"""Dynamic MIG on real GPUs: create and destroy MIG devices through NVML.

A MIG device already at exactly the placement (made by another plugin instance during a rolling
update) is adopted on create and found on destroy, whatever this instance's table says.
Create: the GPU by UUID → a GPU instance of the placement's profile at exactly its start slice
(`nvmlDeviceCreateGpuInstanceWithPlacement`, so the allocator's choice of slices is honoured) → one
compute instance spanning the whole GPU instance (the largest compute-instance profile it offers) →
the new MIG device's UUID found among the GPU's MIG handles by its GI/CI ids. A failure after the
GPU instance exists destroys it again, so a failed create leaves no half device.
Destroy: the MIG device with the UUID recorded at creation (its ids are looked up anew, since NVML
reuses them after a reconfiguration), compute instance, then GPU instance; already gone is success.
NVML calls block, so they run in a worker thread; callers (`DeviceState`) serialize them.

Needs MIG mode on, root and NVML >= R470. Results are recorded in the `DeviceTable` that the plugin
looks devices up in.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
from typing import Any

from gpudra_kubelet_plugin.devices import DeviceInfo, DeviceTable
from gpudra_kubelet_plugin.errors import DeviceControlError
from gpudra_kubelet_plugin.migminors import MigMinors
from gpudra_nvml import NvmlError
from gpudra_nvml.nvcall import Nvml, text

log = logging.getLogger(__name__)

#: NVML_COMPUTE_INSTANCE_PROFILE_* values (1, 2, 3, 4, 7, 8, 6 slices, and 1 slice rev1).
COMPUTE_PROFILES = range(8)
SHARED_ENGINES = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


class NvmlMigControl:
    """`DeviceControl` over an initialized NVML library (see the module docstring)."""

    def __init__(self, nvml: Nvml, table: DeviceTable, minors: MigMinors) -> None:
        self._nvml = nvml
        self._table = table
        self._minors = minors

    async def create_mig(self, placement: DeviceInfo) -> DeviceInfo:
        current = await self._table.device(placement.name)
        if current.exists:
            return current
        created = await asyncio.to_thread(self._find_or_create, current)
        self._table.replace(created)
        return created

    async def refresh(self, device: DeviceInfo) -> DeviceInfo:
        if device.kind != "mig" or not device.exists:
            return device
        if await asyncio.to_thread(self._locate, device) is not None:
            return device
        # Destroyed behind this instance's back (the other pod of a rolling update, or by hand):
        # its ids may be another device's now, so a spec must not be built from them.
        log.warning("MIG device %s (%s) is gone; forgetting it", device.name, device.uuid)
        self._table.forget(device.uuid)
        return await self._table.device(device.name)

    async def destroy_mig(self, device: DeviceInfo) -> None:
        target = device if device.uuid else await self._table.device(device.name)
        if not target.exists:
            # Another plugin instance (rolling update) may have created it after this one
            # discovered the GPUs: ask NVML, not the table.
            found = await asyncio.to_thread(self._find, target)
            if found is None:
                return
            target = found
        # By UUID, not by the ids recorded with it: NVML reuses GPU and compute instance ids, so
        # after a reconfiguration they may belong to a device of another claim or profile.
        located = await asyncio.to_thread(self._locate, target)
        if located is None:
            log.info("MIG device %s (%s) is gone already", target.name, target.uuid)
        else:
            await asyncio.to_thread(self._destroy, located)
        self._table.forget(target.uuid)

    def _find_or_create(self, placement: DeviceInfo) -> DeviceInfo:
        return self._find(placement) or self._create(placement)

    def _find(self, placement: DeviceInfo) -> DeviceInfo | None:
        """The MIG device that already occupies exactly `placement` (same profile), if any."""
        nvml = self._nvml
        try:
            gpu = nvml.call("nvmlDeviceGetHandleByUUID", placement.parent_uuid)
            for index in range(int(nvml.call("nvmlDeviceGetMaxMigDeviceCount", gpu))):
                handle = nvml.optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu, index)
                if handle is None:
                    continue
                gi_id = int(nvml.call("nvmlDeviceGetGpuInstanceId", handle))
                info = nvml.call(
                    "nvmlGpuInstanceGetInfo", nvml.call("nvmlDeviceGetGpuInstanceById", gpu, gi_id)
                )
                if (int(info.profileId), int(info.placement.start)) == (
                    placement.profile_id,
                    placement.placement_start,
                ):
                    ci_id = int(nvml.call("nvmlDeviceGetComputeInstanceId", handle))
                    return self._described(
                        placement, text(nvml.call("nvmlDeviceGetUUID", handle)), gi_id, ci_id
                    )
        except NvmlError as exc:
            raise DeviceControlError(
                f"cannot inspect MIG devices for {placement.name}: {exc}"
            ) from exc
        return None

    def _locate(self, device: DeviceInfo) -> DeviceInfo | None:
        """`device` with the ids the MIG device of its UUID has now; None when none has it."""
        nvml = self._nvml
        try:
            gpu = nvml.call("nvmlDeviceGetHandleByUUID", device.parent_uuid)
            for index in range(int(nvml.call("nvmlDeviceGetMaxMigDeviceCount", gpu))):
                handle = nvml.optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu, index)
                if (
                    handle is not None
                    and text(nvml.call("nvmlDeviceGetUUID", handle)) == device.uuid
                ):
                    return dataclasses.replace(
                        device,
                        gi_id=int(nvml.call("nvmlDeviceGetGpuInstanceId", handle)),
                        ci_id=int(nvml.call("nvmlDeviceGetComputeInstanceId", handle)),
                    )
        except NvmlError as exc:
            raise DeviceControlError(
                f"cannot inspect MIG devices for {device.name}: {exc}"
            ) from exc
        return None

    def _described(self, placement: DeviceInfo, uuid: str, gi_id: int, ci_id: int) -> DeviceInfo:
        return dataclasses.replace(
            placement,
            uuid=uuid,
            gi_id=gi_id,
            ci_id=ci_id,
            gi_cap=self._minors.minor(placement.minor, gi_id),
            ci_cap=self._minors.minor(placement.minor, gi_id, ci_id),
        )

    def _create(self, placement: DeviceInfo) -> DeviceInfo:
        if placement.profile_id is None:
            raise DeviceControlError(f"{placement.name}: no GPU instance profile id to create it")
        call = self._nvml.call
        try:
            gpu = call("nvmlDeviceGetHandleByUUID", placement.parent_uuid)
            where = self._nvml.const("c_nvmlGpuInstancePlacement_t")()
            where.start, where.size = placement.placement_start, placement.placement_size
            # pynvml hands the placement to C as given, and C takes a pointer: pass it by reference.
            gi = call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                gpu,
                placement.profile_id,
                ctypes.byref(where),
            )
        except NvmlError as exc:
            raise DeviceControlError(
                f"cannot create GPU instance for {placement.name}: {exc}"
            ) from exc
        try:
            ci = call("nvmlGpuInstanceCreateComputeInstance", gi, self._whole_instance_profile(gi))
            gi_id = int(call("nvmlGpuInstanceGetInfo", gi).id)
            ci_id = int(call("nvmlComputeInstanceGetInfo", ci).id)
            uuid = self._mig_uuid(gpu, gi_id, ci_id)
        except (NvmlError, DeviceControlError) as exc:
            try:
                call("nvmlGpuInstanceDestroy", gi)
            except NvmlError as cleanup:
                log.error("%s: leaving a GPU instance behind: %s", placement.name, cleanup)
            raise DeviceControlError(f"cannot create MIG device {placement.name}: {exc}") from exc
        log.info("created MIG device %s (%s, gi %d ci %d)", placement.name, uuid, gi_id, ci_id)
        return self._described(placement, uuid, gi_id, ci_id)

    def _whole_instance_profile(self, gi: Any) -> int:
        best: tuple[int, int] | None = None
        for profile in COMPUTE_PROFILES:
            info = self._nvml.optional(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, profile, SHARED_ENGINES
            )
            if info is not None and (best is None or int(info.sliceCount) > best[0]):
                best = (int(info.sliceCount), int(info.id))
        if best is None:
            raise DeviceControlError("the GPU instance offers no compute instance profile")
        return best[1]

    def _mig_uuid(self, gpu: Any, gi_id: int, ci_id: int) -> str:
        call = self._nvml.call
        for index in range(int(call("nvmlDeviceGetMaxMigDeviceCount", gpu))):
            handle = self._nvml.optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu, index)
            if handle is None:
                continue
            ids = (
                int(call("nvmlDeviceGetGpuInstanceId", handle)),
                int(call("nvmlDeviceGetComputeInstanceId", handle)),
            )
            if ids == (gi_id, ci_id):
                return text(call("nvmlDeviceGetUUID", handle))
        raise DeviceControlError(f"no MIG device handle for gi {gi_id} ci {ci_id}")

    def _destroy(self, device: DeviceInfo) -> None:
        if device.gi_id is None or device.ci_id is None:
            raise DeviceControlError(f"{device.name}: GPU/compute instance ids unknown")
        nvml = self._nvml
        try:
            gpu = nvml.call("nvmlDeviceGetHandleByUUID", device.parent_uuid)
            gi = nvml.optional("nvmlDeviceGetGpuInstanceById", gpu, device.gi_id)
            if gi is None:
                return  # already gone (destroyed by hand, or a reboot)
            ci = nvml.optional("nvmlGpuInstanceGetComputeInstanceById", gi, device.ci_id)
            if ci is not None:
                nvml.call("nvmlComputeInstanceDestroy", ci)
            nvml.call("nvmlGpuInstanceDestroy", gi)
        except NvmlError as exc:
            raise DeviceControlError(f"cannot destroy MIG device {device.name}: {exc}") from exc
        log.info("destroyed MIG device %s", device.name)
