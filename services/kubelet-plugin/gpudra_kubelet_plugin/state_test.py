"""Prepare and unprepare, through the fake kubelet or `DeviceState` directly: GPU, MIG and shared
claims, per-claim errors, idempotence, crash and reboot recovery, rollback."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from gpudra_kubelet_plugin.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    ClaimRecord,
    MigIdentity,
)
from gpudra_kubelet_plugin.claimsource import MemoryClaimSource
from gpudra_kubelet_plugin.conftest import (
    DRIVER,
    GPU0,
    GPU1,
    KIND,
    MIG_STATIC,
    NODE,
    Node,
    Running,
    make_claim,
    node_devices,
    read_spec,
    read_specs,
    ref,
    serving,
    sharing_config,
)
from gpudra_kubelet_plugin.devices import DeviceInfo, DeviceTable
from gpudra_kubelet_plugin.errors import CdiError, DeviceControlError, DeviceError
from gpudra_kubelet_plugin.fakekubelet import ClaimName
from gpudra_kubelet_plugin.migminors import MigMinors
from gpudra_kubelet_plugin.nodedevices import discovered_devices
from gpudra_kubelet_plugin.state import ClaimRef
from gpudra_nvml import open_simulator


@pytest.mark.parametrize(
    ("results", "configs", "nodes", "env"),
    [
        pytest.param(
            [("gpu", "gpu-0")],
            [],
            {"gpu-0": ["/dev/nvidia0"]},
            [[f"NVIDIA_VISIBLE_DEVICES={GPU0}"]],
            id="whole-gpu",
        ),
        pytest.param(
            [("a", "gpu-0"), ("b", "gpu-1")],
            [],
            {"gpu-0": ["/dev/nvidia0"], "gpu-1": ["/dev/nvidia1"]},
            # One spec per request: a container naming request a must not see b's GPU.
            [[f"NVIDIA_VISIBLE_DEVICES={GPU0}"], [f"NVIDIA_VISIBLE_DEVICES={GPU1}"]],
            id="two-gpus",
        ),
        pytest.param(
            [("mig", "gpu-1-mig-1-0")],
            [],
            {
                "gpu-1-mig-1-0": [
                    "/dev/nvidia1",
                    "/dev/nvidia-caps/nvidia-cap21",
                    "/dev/nvidia-caps/nvidia-cap22",
                ]
            },
            [[f"NVIDIA_VISIBLE_DEVICES={MIG_STATIC}"]],
            id="static-mig",
        ),
        pytest.param(
            [("gpu", "gpu-0")],
            [
                sharing_config(
                    {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
                )
            ],
            {"gpu-0": ["/dev/nvidia0"]},
            [[f"NVIDIA_VISIBLE_DEVICES={GPU0}", "GPUDRA_TIME_SLICE_INTERVAL=Long"]],
            id="time-sliced",
        ),
        pytest.param(
            [("gpu", "gpu-0")],
            [
                sharing_config(
                    {
                        "strategy": "MPS",
                        "mpsConfig": {
                            "defaultActiveThreadPercentage": 50,
                            "defaultPinnedDeviceMemoryLimit": "10Gi",
                        },
                    }
                )
            ],
            {"gpu-0": ["/dev/nvidia0"]},
            [
                [
                    f"NVIDIA_VISIBLE_DEVICES={GPU0}",
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
                    f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={GPU0}=10240M",
                ]
            ],
            id="mps",
        ),
    ],
)
async def test_prepare_and_unprepare(
    node: Node,
    running: Running,
    results: list[tuple[str, str]],
    configs: list[dict[str, Any]],
    nodes: dict[str, list[str]],
    env: list[list[str]],
) -> None:
    _, kubelet = running
    claim = make_claim("c", "uid-1", results, configs)
    node.claims.put(claim)
    response = await kubelet.prepare([ref(claim)])
    answer = response.claims["uid-1"]
    assert answer.error == ""
    assert [(list(d.request_names), d.pool_name, d.device_name) for d in answer.devices] == [
        ([request], NODE, device) for request, device in results
    ]
    assert [list(d.cdi_device_ids) for d in answer.devices] == [
        [f"{KIND}=uid-1-{device}"] for _, device in results
    ]
    specs = read_specs(node, "uid-1")
    assert [spec["kind"] for spec in specs] == [KIND] * len(env)
    assert {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]]
        for spec in specs
        for d in spec["devices"]
    } == {f"uid-1-{k}": v for k, v in nodes.items()}
    for spec in specs:
        assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
        ]
    assert [spec["containerEdits"]["env"] for spec in specs] == env
    unprepared = await kubelet.unprepare([ref(claim)])
    assert unprepared.claims["uid-1"].error == ""
    assert node.cdi.spec_paths("uid-1") == []
    assert list(node.settings.cdi_dir.iterdir()) == []


async def test_dynamic_mig_is_created_at_prepare_and_destroyed_at_unprepare(
    node: Node, running: Running
) -> None:
    _, kubelet = running
    claim = make_claim("m", "uid-m", [("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    answer = (await kubelet.prepare([ref(claim)])).claims["uid-m"]
    assert answer.error == ""
    created = await node.table.device("gpu-1-mig-3g-40gb-4")
    assert created.exists
    assert created.uuid.startswith("MIG-")
    spec = read_spec(node, "uid-m")
    assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={created.uuid}"]
    assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{created.gi_cap}",
        f"/dev/nvidia-caps/nvidia-cap{created.ci_cap}",
    ]
    assert (await kubelet.unprepare([ref(claim)])).claims["uid-m"].error == ""
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert not node.cdi.spec_path("uid-m").exists()


async def test_failed_dynamic_mig_leaves_nothing_behind(node: Node, running: Running) -> None:
    _, kubelet = running
    # 4g.40gb at slice 0 overlaps the existing 1g.10gb: NVML (and the simulator) refuse it.
    claim = make_claim("m", "uid-x", [("gpu", "gpu-0"), ("mig", "gpu-1-mig-4g-40gb-0")])
    node.claims.put(claim)
    answer = (await kubelet.prepare([ref(claim)])).claims["uid-x"]
    assert "overlaps MIG device gpu-1-mig-1-0" in answer.error
    assert list(node.settings.cdi_dir.glob("*")) == []
    assert node.checkpoint().load().claims == {}


async def test_consumable_capacity_share_id_is_answered(node: Node, running: Running) -> None:
    _, kubelet = running
    result = {"request": "r", "driver": DRIVER, "pool": NODE, "device": "gpu-0", "shareID": "s1"}
    claim = make_claim("s", "uid-s", [result])
    node.claims.put(claim)
    device = (await kubelet.prepare([ref(claim)])).claims["uid-s"].devices[0]
    assert device.HasField("share_id")
    assert device.share_id == "s1"
    assert list(device.cdi_device_ids) == [f"{KIND}=uid-s-gpu-0-s1"]
    beta = (await kubelet.prepare_v1beta1([ref(claim)])).claims["uid-s"]
    assert list(beta.devices[0].cdi_device_ids) == [f"{KIND}=uid-s-gpu-0-s1"]


async def test_prepare_is_idempotent_and_answers_from_the_checkpoint(
    node: Node, running: Running
) -> None:
    _, kubelet = running
    claim = make_claim("c", "uid-1", [("gpu", "gpu-0")])
    node.claims.put(claim)
    first = await kubelet.prepare([ref(claim)])
    spec_before = node.cdi.spec_path("uid-1").read_bytes()
    node.claims.delete("default", "c")  # a repeated prepare must not need the store
    second = await kubelet.prepare([ref(claim)])
    assert first == second
    assert node.cdi.spec_path("uid-1").read_bytes() == spec_before
    both = await asyncio.gather(*(kubelet.prepare([ref(claim)]) for _ in range(5)))
    assert all(b == first for b in both)


async def test_concurrent_prepares_of_one_claim_create_its_mig_device_once(node: Node) -> None:
    state = node.state()
    await state.start()
    claim = make_claim("m", "uid-m", [("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    answers = await asyncio.gather(
        *(state.prepare(ClaimRef("uid-m", "default", "m")) for _ in range(4))
    )
    assert len(set(answers)) == 1
    assert state.records["uid-m"].mig_devices == ("gpu-1-mig-3g-40gb-4",)


async def test_errors_are_per_claim(node: Node, running: Running) -> None:
    _, kubelet = running
    good = make_claim("good", "uid-good", [("gpu", "gpu-0")])
    recreated = make_claim("recreated", "uid-new", [("gpu", "gpu-1")])
    elsewhere = make_claim(
        "elsewhere",
        "uid-else",
        [{"request": "gpu", "driver": DRIVER, "pool": "node-b", "device": "gpu-0"}],
    )
    bad_config = make_claim(
        "badcfg", "uid-cfg", [("gpu", "gpu-1")], [sharing_config({"strategy": "Magic"})]
    )
    unknown_device = make_claim("nodev", "uid-nodev", [("gpu", "gpu-9")])
    for claim in (good, recreated, elsewhere, bad_config, unknown_device):
        node.claims.put(claim)
    names = [
        ref(good),
        ClaimName("uid-old", "default", "recreated"),
        ClaimName("uid-missing", "default", "missing"),
        ref(elsewhere),
        ref(bad_config),
        ref(unknown_device),
    ]
    response = await kubelet.prepare(names)
    errors = {uid: answer.error for uid, answer in response.claims.items()}
    assert errors["uid-good"] == ""
    assert "has UID uid-new, kubelet asked for uid-old" in errors["uid-old"]
    assert "claim default/missing not found" in errors["uid-missing"]
    assert f"no devices of driver {DRIVER} on node {NODE}" in errors["uid-else"]
    assert "sharing.strategy must be TimeSlicing or MPS" in errors["uid-cfg"]
    assert "no device 'gpu-9' on this node" in errors["uid-nodev"]
    assert len(response.claims["uid-good"].devices) == 1
    assert node.cdi.claim_uids() == {"uid-good"}
    assert set(node.checkpoint().load().claims) == {"uid-good"}


async def test_unprepare_of_an_unknown_claim_succeeds(running: Running) -> None:
    _, kubelet = running
    response = await kubelet.unprepare([ClaimName("uid-never", "default", "never")])
    assert response.claims["uid-never"].error == ""


async def test_v1beta1_kubelet(node: Node, running: Running) -> None:
    _, kubelet = running
    claim = make_claim("c", "uid-b", [("gpu", "gpu-0")])
    node.claims.put(claim)
    answer = (await kubelet.prepare_v1beta1([ref(claim)])).claims["uid-b"]
    assert answer.error == ""
    assert list(answer.devices[0].cdi_device_ids) == [f"{KIND}=uid-b-gpu-0"]
    assert (await kubelet.unprepare_v1beta1([ref(claim)])).claims["uid-b"].error == ""
    assert not node.cdi.spec_path("uid-b").exists()


class Crash(BaseException):
    """The process dies: nothing in the plugin catches this."""


class CrashBeforeCompleted(Checkpoint):
    def save(self, claims: Mapping[str, ClaimRecord]) -> None:
        if any(r.state == PREPARE_COMPLETED for r in claims.values()):
            raise Crash
        super().save(claims)


@pytest.mark.parametrize("then", ["prepare", "unprepare"])
async def test_crash_between_started_and_completed_then_restart(node: Node, then: str) -> None:
    claim = make_claim("m", "uid-c", [("gpu", "gpu-0"), ("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    crashing = await node.plugin(
        node.state(CrashBeforeCompleted(node.settings.checkpoint_path, node.settings.boot_id_file))
    )
    await crashing.state.start()
    with pytest.raises(Crash):
        await crashing.state.prepare(ClaimRef("uid-c", "default", "m"))
    # The crash left everything half done: specs written, MIG created, checkpoint says started.
    assert node.cdi.spec_paths("uid-c")
    assert (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert node.checkpoint().load().claims["uid-c"].state == PREPARE_STARTED

    plugin = await node.plugin()  # the restarted plugin
    async with serving(node, plugin) as kubelet:
        if then == "prepare":
            answer = (await kubelet.prepare([ref(claim)])).claims["uid-c"]
            assert answer.error == ""
            assert node.cdi.claim_uids() == {"uid-c"}
            assert node.checkpoint().load().claims["uid-c"].state == PREPARE_COMPLETED
            created = await node.table.device("gpu-1-mig-3g-40gb-4")
            assert [spec["containerEdits"]["env"] for spec in read_specs(node, "uid-c")] == [
                [f"NVIDIA_VISIBLE_DEVICES={GPU0}"],
                [f"NVIDIA_VISIBLE_DEVICES={created.uuid}"],
            ]
        else:
            assert (await kubelet.unprepare([ref(claim)])).claims["uid-c"].error == ""
            assert node.cdi.claim_uids() == set()
            assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
            assert node.checkpoint().load().claims == {}


async def test_boot_id_change_invalidates_the_checkpoint(node: Node) -> None:
    claim = make_claim("c", "uid-1", [("gpu", "gpu-0")])
    node.claims.put(claim)
    state = node.state()
    await state.start()
    await state.prepare(ClaimRef("uid-1", "default", "c"))
    assert node.cdi.claim_uids() == {"uid-1"}
    node.reboot("boot-2")
    after = node.state()
    await after.start()
    assert after.records == {}
    assert node.cdi.claim_uids() == set()
    assert node.checkpoint().load().claims == {}
    # The kubelet prepares again after a reboot: the claim is prepared afresh.
    devices = await after.prepare(ClaimRef("uid-1", "default", "c"))
    assert devices[0].device_name == "gpu-0"
    assert after.records["uid-1"].state == PREPARE_COMPLETED


class FlakyControl(DeviceTable):
    """Creates MIG devices, but refuses to destroy them until told otherwise."""

    refuse_destroy = True

    async def destroy_mig(self, device: DeviceInfo) -> None:
        if self.refuse_destroy:
            raise DeviceControlError(f"NVML busy destroying {device.name}")
        await super().destroy_mig(device)


async def test_a_failed_rollback_keeps_the_original_error_and_is_retried(node: Node) -> None:
    node.table = FlakyControl(node_devices())
    # Configs and devices are checked before any side effect, so fail after the MIG device is
    # created: a MIG device without capability minors makes the CDI step fail.
    claim = make_claim("m", "uid-f", [("mig", "gpu-1-mig-3g-40gb-4"), ("bad", "gpu-1-mig-nocaps")])
    node.table._devices["gpu-1-mig-nocaps"] = DeviceInfo(
        "gpu-1-mig-nocaps", "mig", "MIG-nocaps", 2, "GPU-other", "1g.10gb", 0, 1
    )
    node.claims.put(claim)
    state = node.state()
    await state.start()
    ref_ = ClaimRef("uid-f", "default", "m")
    with pytest.raises(CdiError, match="no GI/CI capability minors"):
        await state.prepare(ref_)
    assert state.records["uid-f"].state == PREPARE_STARTED  # rollback could not finish
    assert (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    node.table.refuse_destroy = False
    await state.unprepare(ref_)
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert state.records == {}
    assert node.cdi.claim_uids() == set()


async def test_a_claim_without_name_is_that_claims_error(node: Node, running: Running) -> None:
    _, kubelet = running
    good = make_claim("good", "uid-good", [("gpu", "gpu-0")])
    node.claims.put(good)
    response = await kubelet.prepare([ref(good), ClaimName("uid-anon", "default", "")])
    assert response.claims["uid-good"].error == ""
    assert "without uid or name" in response.claims["uid-anon"].error


class GatedClaims(MemoryClaimSource):
    """A claim store whose reads hang until `gate` is set, as reads do while the API server is
    unreachable and each request runs into its timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = 0

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        return await super().get(namespace, name)


async def test_a_hanging_claim_read_holds_up_no_other_claim(node: Node) -> None:
    claims = GatedClaims()
    node.claims = claims
    ready = make_claim("ready", "uid-ready", [("gpu", "gpu-0")])
    slow = [make_claim(f"slow{i}", f"uid-slow{i}", [("gpu", "gpu-1")]) for i in range(2)]
    for claim in (ready, *slow):
        claims.put(claim)
    state = node.state()
    await state.start()
    claims.gate.set()
    ready_ref = ClaimRef("uid-ready", "default", "ready")
    first = await state.prepare(ready_ref)
    claims.gate.clear()
    pending = [
        asyncio.create_task(state.prepare(ClaimRef(f"uid-slow{i}", "default", f"slow{i}")))
        for i in range(2)
    ]
    try:
        # Both reads are in flight together: one slow read does not queue the next behind it.
        async with asyncio.timeout(10):
            while claims.waiting < 2:
                await asyncio.sleep(0.01)
        # Neither a repeated prepare (answered from the checkpoint) nor an unprepare needs the
        # store: they finish while the reads hang.
        assert await asyncio.wait_for(state.prepare(ready_ref), 10) == first
        await asyncio.wait_for(state.unprepare(ready_ref), 10)
        assert not node.cdi.spec_path("uid-ready").exists()
        claims.gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*pending), 10)
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    assert [a[0].device_name for a in answers] == ["gpu-1", "gpu-1"]
    assert set(node.checkpoint().load().claims) == {"uid-slow0", "uid-slow1"}


@pytest.mark.parametrize("interrupted", [False, True], ids=["completed", "prepare-started"])
async def test_unprepare_succeeds_when_a_recorded_mig_device_is_gone_from_the_node(
    node: Node, interrupted: bool
) -> None:
    claim = make_claim("m", "uid-g", [("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    before = node.state(
        CrashBeforeCompleted(node.settings.checkpoint_path, node.settings.boot_id_file)
        if interrupted
        else None
    )
    await before.start()
    if interrupted:
        with pytest.raises(Crash):
            await before.prepare(ClaimRef("uid-g", "default", "m"))
    else:
        await before.prepare(ClaimRef("uid-g", "default", "m"))
    # The plugin restarts and discovers a node without that MIG device (its GPU fell off the
    # bus, or the MIG layout was changed by hand): there is nothing left to destroy, and the
    # kubelet's unprepare must not fail for ever on it.
    node.table = DeviceTable(d for d in node_devices() if d.name != "gpu-1-mig-3g-40gb-4")
    after = node.state()
    await after.start()
    await after.unprepare(ClaimRef("uid-g", "default", "m"))
    assert after.records == {}
    assert node.cdi.claim_uids() == set()
    assert node.checkpoint().load().claims == {}


class CrashOnDestroy(DeviceTable):
    """Dies (as on SIGKILL during a rollout) while destroying a MIG device."""

    async def destroy_mig(self, device: DeviceInfo) -> None:
        raise Crash


async def test_a_crash_mid_unprepare_never_leaves_a_completed_claim_without_its_spec(
    node: Node,
) -> None:
    claim = make_claim("m", "uid-u", [("gpu", "gpu-0"), ("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    claim_ref = ClaimRef("uid-u", "default", "m")
    crashing = CrashOnDestroy(node_devices())
    node.table = crashing
    state = node.state()
    await state.start()
    await state.prepare(claim_ref)
    with pytest.raises(Crash):
        await state.unprepare(claim_ref)
    assert node.cdi.spec_paths("uid-u") == []  # the specs went before the crash
    # The restarted plugin is asked to prepare the claim again: its answer must name CDI devices
    # that exist, not the stored answer of a spec already removed.
    node.table = DeviceTable(await crashing.devices())  # the node as the crash left it
    after = node.state()
    await after.start()
    devices = await after.prepare(claim_ref)
    assert node.cdi.spec_paths("uid-u")
    spec_names = {d["name"] for spec in read_specs(node, "uid-u") for d in spec["devices"]}
    assert {i.split("=", 1)[1] for d in devices for i in d.cdi_device_ids} <= spec_names
    assert after.records["uid-u"].state == PREPARE_COMPLETED
    # And unprepare after the restart cleans up everything, MIG device included.
    await after.unprepare(claim_ref)
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert node.checkpoint().load().claims == {}


class ThreadedMig(DeviceTable):
    """Dynamic MIG as `NvmlMigControl` does it: the device is made in a worker thread (into
    `hardware`, the GPU's own state), then recorded in the table the plugin looks devices up in.
    The thread waits for `go`."""

    def __init__(self) -> None:
        super().__init__(node_devices())
        self.hardware: set[str] = set()
        self.go = threading.Event()
        self.creating = asyncio.Event()

    def _make(self, name: str) -> None:
        self.go.wait(10)
        self.hardware.add(name)

    async def create_mig(self, placement: DeviceInfo) -> DeviceInfo:
        self.creating.set()
        await asyncio.to_thread(self._make, placement.name)
        return await super().create_mig(placement)

    async def destroy_mig(self, device: DeviceInfo) -> None:
        self.hardware.discard(device.name)
        await super().destroy_mig(device)


async def test_a_prepare_cancelled_while_a_mig_device_is_made_leaks_no_device(node: Node) -> None:
    control = ThreadedMig()
    node.table = control
    claim = make_claim("m", "uid-k", [("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    claim_ref = ClaimRef("uid-k", "default", "m")
    state = node.state()
    await state.start()
    # The kubelet's deadline passes while NVML is creating the device: gRPC cancels the call, but
    # a worker thread cannot be stopped and the device appears all the same.
    preparing = asyncio.create_task(state.prepare(claim_ref))
    await asyncio.wait_for(control.creating.wait(), 10)
    preparing.cancel()
    await asyncio.sleep(0.05)
    control.go.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(preparing, 10)
    async with asyncio.timeout(10):
        while not control.hardware:
            await asyncio.sleep(0.01)
    # The pod is deleted instead of retried: unprepare must destroy what the prepare made.
    await state.unprepare(claim_ref)
    assert control.hardware == set()
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists
    assert state.records == {}


async def test_start_removes_this_drivers_temp_specs_left_by_a_crash(node: Node) -> None:
    # A crash between writing a spec's temp and renaming it leaves the temp behind; the claim may
    # be recorded PrepareStarted, or not at all (the operator moved a corrupt checkpoint away).
    claim = make_claim("c", "uid-1", [("gpu", "gpu-0")])
    node.claims.put(claim)
    state = node.state()
    await state.start()
    await state.prepare(ClaimRef("uid-1", "default", "c"))
    await state._save("uid-2", ClaimRecord(PREPARE_STARTED, "default", "c2"))
    cdi_dir = node.settings.cdi_dir
    ours = [cdi_dir / f".k8s.{DRIVER}-claim_{uid}.json.tmp" for uid in ("uid-2", "uid-3")]
    others = [
        cdi_dir / ".k8s.other.example.com-claim_uid-2.json.tmp",  # another driver's
        cdi_dir / "spec.123456.tmp",  # the CDI library's temp name
        cdi_dir / ".nvidia.yaml.tmp",
        cdi_dir / "nvidia.yaml",
    ]
    for path in ours + others:
        path.write_text("{partial")
    after = node.state()
    await after.start()
    assert [p for p in ours if p.exists()] == []
    assert [p for p in others if not p.exists()] == []
    assert node.cdi.claim_uids() == {"uid-1"}  # the completed claim's spec is kept
    assert after.records.keys() == {"uid-1", "uid-2"}


async def test_the_checkpoint_records_the_uuid_of_a_mig_device_it_creates(node: Node) -> None:
    claim = make_claim("m", "uid-i", [("gpu", "gpu-0"), ("mig", "gpu-1-mig-3g-40gb-4")])
    node.claims.put(claim)
    state = node.state()
    await state.start()
    await state.prepare(ClaimRef("uid-i", "default", "m"))
    made = await node.table.device("gpu-1-mig-3g-40gb-4")
    record = node.checkpoint().load().claims["uid-i"]
    assert record.mig_devices == ("gpu-1-mig-3g-40gb-4",)
    assert record.created == {"gpu-1-mig-3g-40gb-4": MigIdentity(made.uuid, GPU1)}
    await state.unprepare(ClaimRef("uid-i", "default", "m"))
    assert not (await node.table.device("gpu-1-mig-3g-40gb-4")).exists


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("gpu-1-mig-3g-40gb-4", id="its-placement"),
        pytest.param("gpu-1-mig-7-0", id="its-instance-ids"),
    ],
)
async def test_a_mig_device_two_claims_hold_goes_with_the_last_of_them(
    node: Node, name: str
) -> None:
    # Claim A's device is prepared; A is deallocated before the kubelet unprepares it, and the
    # allocator gives the device to claim B: under the placement name, or, after the node-agent
    # published it, under its instance ids (a plugin restarted since discovered both names).
    placement = "gpu-1-mig-3g-40gb-4"
    node.claims.put(make_claim("a", "uid-a", [("mig", placement)]))
    state = node.state()
    await state.start()
    await state.prepare(ClaimRef("uid-a", "default", "a"))
    made = await node.table.device(placement)
    node.table = DeviceTable(
        [*await node.table.devices(), dataclasses.replace(made, name="gpu-1-mig-7-0", by_ids=True)]
    )
    state = node.state()
    await state.start()
    node.claims.put(make_claim("b", "uid-b", [("mig", name)]))
    (device,) = await state.prepare(ClaimRef("uid-b", "default", "b"))
    assert read_spec(node, "uid-b")["containerEdits"]["env"] == [
        f"NVIDIA_VISIBLE_DEVICES={made.uuid}"
    ]
    await state.unprepare(ClaimRef("uid-a", "default", "a"))
    assert (await node.table.device(name)).uuid == made.uuid  # B still holds it
    await state.unprepare(ClaimRef("uid-b", "default", "b"))
    assert not (await node.table.device(placement)).exists
    assert "gpu-1-mig-7-0" not in [d.name for d in await node.table.devices()]


def operator_made_device(gpu: int, profile: str, start: int) -> Any:
    """The MIG device NVML reports once `profile` is made at `start` on a fresh a100-mig node."""
    other = open_simulator("a100-mig")
    try:
        assert other.fake is not None
        other.fake.create_mig_device(gpu, profile, start)
        (made,) = (d for d in other.adapter.discover().devices if d.name == f"gpu-{gpu}-mig-1-0")
        return made
    finally:
        other.adapter.stop()


async def test_a_mig_device_made_after_the_start_is_prepared_without_a_restart(node: Node) -> None:
    # An operator makes a MIG device with nvidia-smi after the plugin started; the node-agent
    # publishes it under its instance ids and the allocator gives that name to a claim.
    opened = open_simulator("a100-mig")
    assert opened.fake is not None
    devices = discovered_devices(opened, MigMinors())
    assert isinstance(devices.lookup, DeviceTable)  # the simulator's: a table that re-reads
    state = dataclasses.replace(node, table=devices.lookup).state()
    changed: list[list[str]] = []

    async def listener(infos: list[DeviceInfo]) -> None:
        changed.append([d.name for d in infos])

    state.on_devices_changed(listener)
    try:
        await state.start()
        opened.fake.create_mig_device(2, "3g.40gb", 4)
        made = operator_made_device(2, "3g.40gb", 4)
        node.claims.put(make_claim("op", "uid-op", [("mig", "gpu-2-mig-1-0")]))
        (device,) = await state.prepare(ClaimRef("uid-op", "default", "op"))
        assert device.device_name == "gpu-2-mig-1-0"
        spec = read_spec(node, "uid-op")
        assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={made.uuid}"]
        assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == [
            f"/dev/nvidia{made.minor}",
            f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(made.minor, 1)}",
            f"/dev/nvidia-caps/nvidia-cap{MigMinors().minor(made.minor, 1, 0)}",
        ]
        assert "gpu-2-mig-1-0" in changed[-1]  # health reaches the new name too
        assert state.records["uid-op"].mig_devices == ()  # the operator's, not the plugin's
        await state.unprepare(ClaimRef("uid-op", "default", "op"))
        assert (await devices.lookup.device("gpu-2-mig-1-0")).uuid == made.uuid
        # Its placement name, free at the start, now denotes it, as after a restart.
        assert (await devices.lookup.device("gpu-2-mig-3g-40gb-4")).uuid == made.uuid
    finally:
        devices.close()


async def test_a_name_unknown_after_one_reread_is_that_claims_error(node: Node) -> None:
    reads: list[int] = []

    def discover() -> list[DeviceInfo]:
        reads.append(1)
        return node_devices()

    node.table = DeviceTable(node_devices(), discover)
    state = node.state()
    await state.start()
    node.claims.put(make_claim("known", "uid-k", [("gpu", "gpu-0")]))
    await state.prepare(ClaimRef("uid-k", "default", "known"))
    assert reads == []  # names the table has are not read again
    node.claims.put(make_claim("gone", "uid-g", [("gpu", "gpu-0"), ("gpu", "gpu-9")]))
    with pytest.raises(DeviceError, match="no device 'gpu-9' on this node"):
        await state.prepare(ClaimRef("uid-g", "default", "gone"))
    assert reads == [1]
    assert set(state.records) == {"uid-k"}
    assert not node.cdi.spec_path("uid-g").exists()
