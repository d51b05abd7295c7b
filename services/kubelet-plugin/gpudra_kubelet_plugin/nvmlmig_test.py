"""NvmlMigControl against a stand-in for pynvml's MIG-management calls.

gpudra_nvml's simulator does not (yet) create or destroy MIG devices, so this module brings the
smallest pynvml-shaped object that does, with NVML's rules: a GPU instance needs free slices at its
placement, a compute instance fits inside its GPU instance, a GPU instance with compute instances
cannot be destroyed, unknown ids are NVML_ERROR_NOT_FOUND.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
from typing import Any

import pytest

from gpudra_kubelet_plugin.conftest import GPU1, Node, make_claim, node_devices
from gpudra_kubelet_plugin.devices import DeviceInfo, DeviceTable
from gpudra_kubelet_plugin.errors import DeviceControlError, DeviceError
from gpudra_kubelet_plugin.migminors import MigMinors
from gpudra_kubelet_plugin.nvmlmig import NvmlMigControl
from gpudra_kubelet_plugin.state import ClaimRef
from gpudra_nvml.nvcall import Nvml

# GPU instance profile id -> (compute slices, memory slices of a placement), as on an A100-40GB.
GI_PROFILES = {19: (1, 1), 14: (2, 2), 9: (3, 4), 5: (4, 4), 0: (7, 8)}
CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}  # compute instance profile -> slices


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, NOT_FOUND, IN_USE, INSUFFICIENT_RESOURCES = 3, 6, 19, 23


class Placement(ctypes.Structure):
    """pynvml's c_nvmlGpuInstancePlacement_t."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclasses.dataclass
class Gi:
    id: int
    start: int
    size: int  # memory slices
    slices: int  # compute slices
    profile: int = 19
    cis: dict[int, int] = dataclasses.field(default_factory=dict)  # ci id -> slices


@dataclasses.dataclass
class GiInfo:
    id: int
    profileId: int
    placement: Placement


@dataclasses.dataclass
class Info:
    id: int
    sliceCount: int = 0


class FakeMigLib:
    NVMLError = NVMLError
    c_nvmlGpuInstancePlacement_t = Placement

    def __init__(self, gpu_uuid: str, fail_compute: bool = False) -> None:
        self.gpu_uuid = gpu_uuid
        self.gis: dict[int, Gi] = {}
        self.fail_compute = fail_compute

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != self.gpu_uuid:
            raise NVMLError(NOT_FOUND)
        return "gpu"

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, gpu: str, profile: int, ref: Any) -> Gi:
        at = ref._obj  # C takes a pointer: the caller must pass ctypes.byref(placement)
        compute, size = GI_PROFILES[profile]
        if at.size != size:
            raise NVMLError(2)  # INVALID_ARGUMENT: not a placement of this profile
        for gi in self.gis.values():
            if gi.start < at.start + at.size and at.start < gi.start + gi.size:
                raise NVMLError(INSUFFICIENT_RESOURCES)
        gi = Gi(
            id=1 + max(self.gis, default=0),
            start=at.start,
            size=size,
            slices=compute,
            profile=profile,
        )
        self.gis[gi.id] = gi
        return gi

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: Gi, profile: int, eng: int) -> Info:
        if profile not in CI_SLICES or CI_SLICES[profile] > gi.slices:
            raise NVMLError(NOT_SUPPORTED)
        return Info(profile, CI_SLICES[profile])

    def nvmlGpuInstanceCreateComputeInstance(self, gi: Gi, profile: int) -> tuple[Gi, int]:
        if self.fail_compute:
            raise NVMLError(INSUFFICIENT_RESOURCES)
        ci = len(gi.cis)
        gi.cis[ci] = CI_SLICES[profile]
        return (gi, ci)

    def nvmlGpuInstanceGetInfo(self, gi: Gi) -> GiInfo:
        return GiInfo(gi.id, gi.profile, Placement(gi.start, gi.size))

    def nvmlComputeInstanceGetInfo(self, ci: tuple[Gi, int]) -> Info:
        return Info(ci[1])

    def _handles(self) -> list[tuple[int, int]]:
        return sorted((gi.id, ci) for gi in self.gis.values() for ci in gi.cis)

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: str, index: int) -> tuple[int, int]:
        handles = self._handles()
        if index >= len(handles):
            raise NVMLError(NOT_FOUND)
        return handles[index]

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return handle[0]

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[int, int]) -> int:
        return handle[1]

    def nvmlDeviceGetUUID(self, handle: tuple[int, int]) -> str:
        return f"MIG-{handle[0]:08d}-{handle[1]:04d}"

    def nvmlDeviceGetGpuInstanceById(self, gpu: str, gi: int) -> Gi:
        if gi not in self.gis:
            raise NVMLError(NOT_FOUND)
        return self.gis[gi]

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: Gi, ci: int) -> tuple[Gi, int]:
        if ci not in gi.cis:
            raise NVMLError(NOT_FOUND)
        return (gi, ci)

    def nvmlComputeInstanceDestroy(self, ci: tuple[Gi, int]) -> None:
        del ci[0].cis[ci[1]]

    def nvmlGpuInstanceDestroy(self, gi: Gi) -> None:
        if gi.cis:
            raise NVMLError(IN_USE)
        del self.gis[gi.id]


def nvml_table() -> DeviceTable:
    # The conftest node, with NVML profile ids on its placements (3g.40gb is id 9, 4g.40gb id 5).
    ids = {"3g.40gb": 9, "4g.40gb": 5}
    return DeviceTable(
        dataclasses.replace(d, profile_id=ids.get(d.profile)) if not d.uuid else d
        for d in node_devices()
    )


async def test_create_and_destroy() -> None:
    lib = FakeMigLib(GPU1)
    table = nvml_table()
    control = NvmlMigControl(Nvml(lib), table, MigMinors())
    created = await control.create_mig(await table.device("gpu-1-mig-3g-40gb-4"))
    assert created.uuid == "MIG-00000001-0000"
    assert (created.gi_id, created.ci_id) == (1, 0)
    assert (created.gi_cap, created.ci_cap) == (MigMinors().minor(1, 1), MigMinors().minor(1, 1, 0))
    assert lib.gis[1].start == 4
    assert lib.gis[1].cis == {0: 3}  # one compute instance spanning the 3-slice GPU instance
    assert await table.device("gpu-1-mig-3g-40gb-4") == created
    assert await control.create_mig(created) == created  # already there
    await control.destroy_mig(created)
    assert lib.gis == {}
    assert not (await table.device("gpu-1-mig-3g-40gb-4")).exists
    await control.destroy_mig(created)  # gone already: fine


@pytest.mark.parametrize(
    ("lib", "name", "message"),
    [
        pytest.param(
            FakeMigLib(GPU1), "gpu-1-mig-4g-40gb-0", "cannot create GPU instance", id="no-room"
        ),
        pytest.param(
            FakeMigLib(GPU1, fail_compute=True),
            "gpu-1-mig-3g-40gb-4",
            "cannot create MIG device",
            id="compute-instance-fails",
        ),
        pytest.param(
            FakeMigLib("GPU-other"), "gpu-1-mig-3g-40gb-4", "nvmlDeviceGetHandleByUUID", id="gpu"
        ),
    ],
)
async def test_failed_creates_leave_nothing(lib: FakeMigLib, name: str, message: str) -> None:
    if name == "gpu-1-mig-4g-40gb-0":
        lib.gis[7] = Gi(
            id=7, start=0, size=1, slices=1, cis={0: 1}
        )  # the existing 1g.10gb at slice 0
    before = dict(lib.gis)
    table = nvml_table()
    with pytest.raises(DeviceControlError, match=message):
        await NvmlMigControl(Nvml(lib), table, MigMinors()).create_mig(await table.device(name))
    assert lib.gis == before
    assert not (await table.device(name)).exists


async def test_a_placement_without_profile_id_is_refused() -> None:
    table = DeviceTable([DeviceInfo("p", "mig", "", 1, GPU1, "1g.10gb", 0, 1)])
    with pytest.raises(DeviceControlError, match="no GPU instance profile id"):
        await NvmlMigControl(Nvml(FakeMigLib(GPU1)), table, MigMinors()).create_mig(
            await table.device("p")
        )


async def test_prepare_and_unprepare_a_dynamic_mig_claim_through_nvml(node: Node) -> None:
    lib = FakeMigLib(GPU1)
    node.table = nvml_table()
    state = node.state()
    state._control = NvmlMigControl(Nvml(lib), node.table, MigMinors())
    await state.start()
    node.claims.put(make_claim("m", "uid-n", [("mig", "gpu-1-mig-3g-40gb-4")]))
    ref = ClaimRef("uid-n", "default", "m")
    (device,) = await state.prepare(ref)
    spec: dict[str, Any] = json.loads(node.cdi.spec_path("uid-n").read_text())
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(1, 1)}",
        f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(1, 1, 0)}",
    ]
    assert "NVIDIA_VISIBLE_DEVICES=MIG-00000001-0000" in spec["containerEdits"]["env"]
    await state.unprepare(ref)
    assert lib.gis == {}


async def test_an_instance_made_by_another_plugin_is_adopted_and_destroyed() -> None:
    lib = FakeMigLib(GPU1)
    other = NvmlMigControl(Nvml(lib), nvml_table(), MigMinors())  # the other pod
    made = await other.create_mig(await other._table.device("gpu-1-mig-3g-40gb-4"))
    mine_table = nvml_table()  # discovered before the other pod created it
    mine = NvmlMigControl(Nvml(lib), mine_table, MigMinors())
    adopted = await mine.create_mig(await mine_table.device("gpu-1-mig-3g-40gb-4"))
    assert adopted == made
    assert len(lib.gis) == 1  # not created twice
    stale = nvml_table()
    await NvmlMigControl(Nvml(lib), stale, MigMinors()).destroy_mig(
        await stale.device("gpu-1-mig-3g-40gb-4")
    )
    assert lib.gis == {}


class FreshUuidLib(FakeMigLib):
    """As NVML does, every new MIG device gets a new UUID, also where it reuses the GPU and
    compute instance ids of a device destroyed before it."""

    def __init__(self, gpu_uuid: str) -> None:
        super().__init__(gpu_uuid)
        self.made = 0
        self.serial: dict[int, int] = {}  # GPU instance id -> creation number

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, gpu: str, profile: int, ref: Any) -> Gi:
        gi = super().nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile, ref)
        self.made += 1
        self.serial[gi.id] = self.made
        return gi

    def nvmlDeviceGetUUID(self, handle: tuple[int, int]) -> str:
        return f"MIG-{self.serial[handle[0]]:08d}-{handle[0]:04d}-{handle[1]:04d}"

    def make(self, profile: int, start: int) -> Gi:
        """What an operator's `nvidia-smi mig -cgi <profile> -C` does."""
        compute, size = GI_PROFILES[profile]
        gi = self.nvmlDeviceCreateGpuInstanceWithPlacement(
            "gpu", profile, ctypes.byref(Placement(start, size))
        )
        gi.cis[0] = compute
        return gi


def nvml_state(node: Node, lib: FakeMigLib) -> Any:
    """A `DeviceState` of the conftest node over `lib`, with a table discovered now."""
    node.table = nvml_table()
    state = node.state()
    state._lookup = node.table
    state._control = NvmlMigControl(Nvml(lib), node.table, MigMinors())
    return state


async def test_unprepare_destroys_the_device_its_claim_made_not_one_that_reuses_its_ids(
    node: Node,
) -> None:
    lib = FreshUuidLib(GPU1)
    state = nvml_state(node, lib)
    await state.start()
    node.claims.put(make_claim("m", "uid-a", [("mig", "gpu-1-mig-3g-40gb-4")]))
    ref = ClaimRef("uid-a", "default", "m")
    (device,) = await state.prepare(ref)
    made = lib.gis[1]
    # The layout is changed under the plugin: the claim's device goes, and a 4g.40gb that NVML
    # gives the same GPU and compute instance ids comes.
    del made.cis[0]
    lib.nvmlGpuInstanceDestroy(made)
    other = lib.make(5, 0)
    assert (other.id, list(other.cis)) == (1, [0])
    await state.unprepare(ref)
    assert lib.gis == {1: other}  # not the claim's device: left alone
    assert state.records == {}


async def test_a_device_made_by_the_old_plugin_instance_is_destroyed_by_the_new_one(
    node: Node,
) -> None:
    lib = FreshUuidLib(GPU1)
    new = nvml_state(node, lib)  # the new pod discovers the GPUs first ...
    new_table = node.table
    old = nvml_state(node, lib)  # ... and the old one still serves while it starts
    await old.start()
    await new.start()
    node.claims.put(make_claim("m", "uid-r", [("mig", "gpu-1-mig-3g-40gb-4")]))
    ref = ClaimRef("uid-r", "default", "m")
    await old.prepare(ref)
    assert not (await new_table.device("gpu-1-mig-3g-40gb-4")).exists  # the new one's view
    await new.unprepare(ref)
    assert lib.gis == {}
    assert new.records == {}


async def test_a_spec_never_names_a_device_the_table_only_remembers(node: Node) -> None:
    lib = FreshUuidLib(GPU1)
    old = nvml_state(node, lib)
    old_table = node.table
    await old.start()
    node.claims.put(make_claim("a", "uid-a", [("mig", "gpu-1-mig-3g-40gb-4")]))
    await old.prepare(ClaimRef("uid-a", "default", "a"))
    remembered = await old_table.device("gpu-1-mig-3g-40gb-4")
    # The new plugin pod unprepares the claim, then makes a 4g.40gb for another claim, which
    # NVML gives the ids the 3g.40gb had. The old pod's table still has the 3g.40gb.
    new = nvml_state(node, lib)
    await new.start()
    await new.unprepare(ClaimRef("uid-a", "default", "a"))
    node.claims.put(make_claim("b", "uid-b", [("mig", "gpu-1-mig-4g-40gb-0")]))
    await new.prepare(ClaimRef("uid-b", "default", "b"))
    assert (lib.gis[1].id, lib.gis[1].profile) == (1, 5)
    assert (await old_table.device("gpu-1-mig-3g-40gb-4")) == remembered
    # The allocator gives the free 3g.40gb placement to a third claim; the old pod prepares it.
    node.claims.put(make_claim("d", "uid-d", [("mig", "gpu-1-mig-3g-40gb-4")]))
    await old.prepare(ClaimRef("uid-d", "default", "d"))
    spec: dict[str, Any] = json.loads(node.cdi.spec_path("uid-d").read_text())
    (visible,) = (e for e in spec["containerEdits"]["env"] if e.startswith("NVIDIA_VISIBLE"))
    caps = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]][1:]
    existing = {lib.nvmlDeviceGetUUID((gi.id, 0)): gi for gi in lib.gis.values()}
    made = existing.get(visible.removeprefix("NVIDIA_VISIBLE_DEVICES="))
    assert made is not None, f"{visible}: no such device (the spec names a remembered one)"
    assert (made.profile, made.start) == (9, 4)  # a 3g.40gb, made anew at its placement
    assert caps == [
        f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(1, made.id)}",
        f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(1, made.id, 0)}",
    ]
    await old.unprepare(ClaimRef("uid-d", "default", "d"))
    assert [gi.profile for gi in lib.gis.values()] == [5]  # the other claim's device stays


async def test_a_gone_device_named_by_its_ids_fails_its_claim_not_its_spec(node: Node) -> None:
    lib = FreshUuidLib(GPU1)
    first = lib.make(19, 0)  # an operator's 1g.10gb, there when the plugin started
    state = nvml_state(node, lib)
    uuid = lib.nvmlDeviceGetUUID((first.id, 0))
    static = await node.table.device("gpu-1-mig-1-0")
    node.table._devices[static.name] = dataclasses.replace(
        static, uuid=uuid, gi_id=first.id, ci_id=0, by_ids=True
    )
    await state.start()
    # Reconfigured by hand: a 2g.20gb takes the GPU instance id of the 1g.10gb.
    del first.cis[0]
    lib.nvmlGpuInstanceDestroy(first)
    assert lib.make(14, 0).id == first.id
    node.claims.put(make_claim("s", "uid-s", [("mig", "gpu-1-mig-1-0")]))
    with pytest.raises(DeviceError, match="no device 'gpu-1-mig-1-0'"):
        await state.prepare(ClaimRef("uid-s", "default", "s"))
    assert not node.cdi.spec_path("uid-s").exists()
    assert state.records == {}
