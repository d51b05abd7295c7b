from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from gpudra_nvml import open_simulator, profile_names
from gpudra_slices.attributes import quantity, semver
from gpudra_slices.builder import SliceOptions, build_slices, placement_device_name
from gpudra_slices.errors import InvalidInventoryError
from gpudrapb.v1 import inventory_pb2 as pb

KUBERNETES_VERSIONS = ["1.34.0", "1.35.0"]


def _inventory(profile: str, node: str = "gpu-node-1", generation: int = 7) -> pb.NodeInventory:
    found = open_simulator(profile).adapter.discover()
    return pb.NodeInventory(
        node=node, generation=generation, versions=found.versions, devices=found.devices
    )


def _devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


@pytest.mark.parametrize("profile", profile_names())
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_profile_validates_against_kubernetes_schema(profile: str, version: str) -> None:
    for obj in build_slices(_inventory(profile)):
        kubernetes_validate.validate(obj, version, strict=True)


def test_schema_check_is_strict() -> None:
    obj = build_slices(_inventory("l4-pcie"))[0]
    obj["spec"]["devices"][0]["gpuCount"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.34.0", strict=True)


@pytest.mark.parametrize("profile", profile_names())
def test_pool_is_honest_and_complete(profile: str) -> None:
    inventory = _inventory(profile)
    slices = build_slices(inventory)
    pools = [s["spec"]["pool"] for s in slices]
    assert all(
        p == {"name": "gpu-node-1", "generation": 7, "resourceSliceCount": len(slices)}
        for p in pools
    )
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
    for s in slices:
        spec = s["spec"]
        assert spec["nodeName"] == "gpu-node-1"
        assert ("devices" in spec) != ("sharedCounters" in spec)  # never both (Kubernetes 1.35)
        assert len(spec.get("devices", [])) <= 128
        assert len(spec.get("sharedCounters", [])) <= 8
        assert sum(len(c["counters"]) for c in spec.get("sharedCounters", [])) <= 32
    counter_sets = {
        c["name"]: c["counters"] for s in slices for c in s["spec"].get("sharedCounters", [])
    }
    for dev in _devices(slices).values():
        for use in dev.get("consumesCounters", []):
            assert set(use["counters"]) <= set(counter_sets[use["counterSet"]])
        assert len(dev["attributes"]) + len(dev["capacity"]) <= 32
    assert json.dumps(slices) == json.dumps(build_slices(inventory))  # deterministic


def test_gpudra_api_accepts_every_slice() -> None:
    api = pytest.importorskip("gpudra_api.resourceslice")
    for profile in profile_names():
        for obj in build_slices(_inventory(profile)):
            api.parse_resource_slice(obj)


@pytest.mark.parametrize(
    ("profile", "device", "expected"),
    [
        pytest.param(
            "dgx-h100",
            "gpu-3",
            {"nvlinkDomain": "nvswitch-0", "productName": "NVIDIA H100 80GB HBM3"},
            id="dgx",
        ),
        pytest.param("h100-pcie-pairs", "gpu-2", {"nvlinkDomain": "nvlink-1"}, id="pairs"),
        pytest.param(
            "gb200-nvl72-tray",
            "gpu-0",
            {"cliqueID": "7b3f2c1e-5a4d-4e8f-9c2b-1d0e6f8a9b7c.32766"},
            id="clique",
        ),
        pytest.param(
            "l4-pcie",
            "gpu-1",
            {"architecture": "Ada Lovelace", "resource.kubernetes.io/pcieRoot": "pci0000:37"},
            id="l4",
        ),
        pytest.param(
            "hgx-b200",
            "gpu-0",
            {"driverVersion": "570.124.6", "cudaComputeCapability": "10.0.0"},
            id="semver",
        ),
    ],
)
def test_attributes(profile: str, device: str, expected: dict[str, str]) -> None:
    attrs = _devices(build_slices(_inventory(profile)))[device]["attributes"]
    got = {k: next(iter(attrs[k].values())) for k in expected}
    assert got == expected


def test_pcie_only_gpus_have_no_nvlink_domain() -> None:
    for dev in _devices(build_slices(_inventory("l4-pcie"))).values():
        assert "nvlinkDomain" not in dev["attributes"]
        assert "cliqueID" not in dev["attributes"]


def _slices_of(dev: dict[str, Any]) -> tuple[str, set[str]]:
    (use,) = dev["consumesCounters"]
    return use["counterSet"], set(use["counters"])


def _ranges(inventory: pb.NodeInventory) -> dict[str, tuple[str, set[int]]]:
    """Device name -> (parent GPU, memory slices), straight from the inventory."""
    out: dict[str, tuple[str, set[int]]] = {}
    names = {d.uuid: d.name for d in inventory.devices if d.type == pb.Device.TYPE_GPU}
    for d in inventory.devices:
        if d.type == pb.Device.TYPE_MIG:
            used = set(range(d.placement.start, d.placement.start + d.placement.size))
            out[d.name] = (d.parent_uuid, used)
            # Its placement name too (dynamic MIG: what a claim allocated before it existed
            # names; DEVICES.md).
            profile = d.placement.profile.replace(".", "-")
            out[f"{names[d.parent_uuid]}-mig-{profile}-{d.placement.start}"] = (d.parent_uuid, used)
        for p in d.free_placements:
            name = f"{d.name}-mig-{p.profile.replace('.', '-')}-{p.start}"  # as DEVICES.md says
            out[name] = (d.uuid, set(range(p.start, p.start + p.size)))
    return out


def test_mig_devices_and_placements_share_counters_exactly_when_they_overlap() -> None:
    inventory = _inventory("a100-mig")
    devices = _devices(build_slices(inventory))
    mig = {n: d for n, d in devices.items() if d["attributes"]["type"]["string"] == "mig"}
    assert "gpu-0" not in devices  # MIG mode: the whole GPU is not allocatable
    assert devices["gpu-4"]["attributes"]["type"]["string"] == "gpu"
    made = [n for n, d in mig.items() if "uuid" in d["attributes"]]
    existing = [n for n in made if n.split("-")[3].isdigit()]  # gpu-<i>-mig-<gi>-<ci>
    twins = sorted(set(made) - set(existing))  # the same devices under their placement names
    placements = [n for n, d in mig.items() if "uuid" not in d["attributes"]]
    assert len(existing) == len(twins) == 10
    assert "gpu-0-mig-3g-40gb-0" in twins
    assert len(placements) == 36  # GPUs 2 and 3: 18 placements each
    assert "gpu-2-mig-7g-80gb-0" in placements
    assert devices["gpu-2-mig-3g-40gb-4"]["capacity"]["multiprocessors"] == {"value": "42"}
    ranges = _ranges(inventory)
    assert set(ranges) == set(mig)
    for a in mig:
        for b in mig:
            if a >= b:
                continue
            set_a, used_a = _slices_of(mig[a])
            set_b, used_b = _slices_of(mig[b])
            conflict = set_a == set_b and bool(used_a & used_b)
            (parent_a, slices_a), (parent_b, slices_b) = ranges[a], ranges[b]
            assert conflict == (parent_a == parent_b and bool(slices_a & slices_b)), (a, b)
            if a in existing and b in existing:
                assert not conflict
            if (
                a in twins
                and b in existing
                and mig[a]["attributes"]["uuid"] == mig[b]["attributes"]["uuid"]
            ):
                assert conflict, (a, b)  # one device: never allocated twice


def test_dynamic_mig_can_be_switched_off() -> None:
    devices = _devices(build_slices(_inventory("a100-mig"), SliceOptions(dynamic_mig=False)))
    assert all("uuid" in d["attributes"] for d in devices.values())


def _many_gpus(n: int, unhealthy: bool = False) -> pb.NodeInventory:
    base = _inventory("l4-pcie").devices[0]
    inventory = pb.NodeInventory(node="big", generation=1)
    inventory.versions.driver, inventory.versions.cuda_driver = "550.54.15", "12.4"
    for i in range(n):
        d = inventory.devices.add()
        d.CopyFrom(base)
        d.name, d.index, d.uuid = f"gpu-{i}", i, f"GPU-{i:08d}"
        if unhealthy:
            d.health.add(kind=pb.HealthCondition.KIND_XID, code=79, message="XID 79")
    return inventory


@pytest.mark.parametrize(
    ("gpus", "unhealthy", "sizes"),
    [
        pytest.param(128, False, [128], id="exactly-one-slice"),
        pytest.param(300, False, [128, 128, 44], id="three-slices"),
        pytest.param(130, True, [64, 64, 2], id="tainted-devices-64-per-slice"),
        pytest.param(0, False, [0], id="empty-pool-still-published"),
    ],
)
def test_devices_are_split_across_slices(gpus: int, unhealthy: bool, sizes: list[int]) -> None:
    slices = build_slices(_many_gpus(gpus, unhealthy))
    assert [len(s["spec"].get("devices", [])) for s in slices] == sizes
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(sizes)}
    for obj in slices:
        kubernetes_validate.validate(obj, "1.35.0", strict=True)


def test_health_becomes_taints_and_mig_children_inherit() -> None:
    inventory = _inventory("a100-mig")
    gpu0 = next(d for d in inventory.devices if d.name == "gpu-0")
    gpu0.health.add(kind=pb.HealthCondition.KIND_XID, code=48, message="XID 48").since.FromSeconds(
        1_700_000_000
    )
    gpu4 = next(d for d in inventory.devices if d.name == "gpu-4")
    gpu4.health.add(kind=pb.HealthCondition.KIND_LOST, message="lost")
    devices = _devices(build_slices(inventory))
    child = next(d for n, d in devices.items() if n.startswith("gpu-0-mig-"))
    assert child["taints"] == [
        {
            "key": "gpu.nvidia.com/xid",
            "value": "48",
            "effect": "NoSchedule",
            "timeAdded": "2023-11-14T22:13:20Z",
        }
    ]
    assert devices["gpu-4"]["taints"] == [
        {"key": "gpu.nvidia.com/lost", "value": "0", "effect": "NoExecute"}
    ]
    assert "taints" not in devices["gpu-5"]


def test_driver_name_is_configurable() -> None:
    slices = build_slices(_inventory("l4-pcie"), SliceOptions(driver="gpu.example.com"))
    assert {s["spec"]["driver"] for s in slices} == {"gpu.example.com"}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda inv: setattr(inv, "node", "Node_1"), "node name", id="bad-node"),
        pytest.param(
            lambda inv: setattr(inv.devices[0], "name", "GPU 0"),
            "device 'GPU 0'",
            id="bad-device-name",
        ),
        pytest.param(
            lambda inv: setattr(inv.versions, "driver", "r550"), "driver version", id="bad-version"
        ),
        pytest.param(
            lambda inv: setattr(inv.devices[1], "name", "gpu-0"), "duplicate", id="duplicate-device"
        ),
        pytest.param(
            lambda inv: setattr(inv.devices[0], "product_name", "x" * 65),
            "longer than 64",
            id="long-string",
        ),
    ],
)
def test_bad_inventory_is_a_clear_error(mutate: Any, message: str) -> None:
    inventory = _inventory("l4-pcie")
    mutate(inventory)
    with pytest.raises(InvalidInventoryError, match=message):
        build_slices(inventory)


def test_two_mig_gpus_of_one_name_are_rejected() -> None:
    # MIG-mode GPUs are no devices themselves, but each names a counter set: two of one name
    # would publish a slice the API (and gpudra_api) refuses, with ambiguous counter references.
    inventory = _inventory("a100-mig")
    gpu1 = next(d for d in inventory.devices if d.name == "gpu-1")
    gpu1.name = "gpu-0"
    for d in inventory.devices:
        if d.parent_uuid == gpu1.uuid:
            d.name = d.name.replace("gpu-1-", "gpu-9-")
    with pytest.raises(InvalidInventoryError, match="duplicate"):
        build_slices(inventory)


def test_orphan_mig_device_is_rejected() -> None:
    inventory = _inventory("a100-mig")
    del inventory.devices[0]  # gpu-0, the parent of the next devices
    with pytest.raises(InvalidInventoryError, match="parent"):
        build_slices(inventory)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param("550.54.15", "550.54.15", id="plain"),
        pytest.param("570.124.06", "570.124.6", id="leading-zero"),
        pytest.param("12.4", "12.4.0", id="two-parts"),
        pytest.param("9.0", "9.0.0", id="compute-capability"),
    ],
)
def test_semver(raw: str, want: str) -> None:
    assert semver(raw, "v") == want


@pytest.mark.parametrize(
    ("n", "want"),
    [
        pytest.param(80 << 30, "80Gi", id="gi"),
        pytest.param(81559 << 20, "81559Mi", id="mi"),
        pytest.param(1000, "1000", id="bytes"),
        pytest.param(0, "0", id="zero"),
    ],
)
def test_quantity(n: int, want: str) -> None:
    assert quantity(n) == want


def test_mig_device_with_unknown_placement_claims_the_whole_gpu() -> None:
    inventory = _inventory("a100-mig")
    for d in inventory.devices:
        if d.type == pb.Device.TYPE_MIG:
            d.placement.start, d.placement.size = 0, 0
    devices = _devices(build_slices(inventory))
    child = next(d for n, d in devices.items() if n.startswith("gpu-0-mig-"))
    assert _slices_of(child) == ("gpu-0-slices", {f"memory-slice-{k}" for k in range(8)})


@pytest.mark.parametrize(
    ("profile", "start", "want"),
    [
        pytest.param("3g.40gb", 4, "gpu-2-mig-3g-40gb-4", id="plain"),
        pytest.param("1g.10gb+me", 6, "gpu-2-mig-1g-10gb-me-6", id="media-extension"),
    ],
)
def test_placement_device_name(profile: str, start: int, want: str) -> None:
    assert placement_device_name("gpu-2", profile, start) == want


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_a_gpu_without_memory_of_its_own_has_no_memory_capacity(version: str) -> None:
    # Unified memory (GB10): NVML reports no memory of the GPU's own (memory_bytes 0). Publishing
    # 0 would let `memory <= 24Gi` match it by accident; with no capacity no selector on memory
    # can match it (an unguarded one fails with "no such key", as on NVIDIA's driver's slices).
    inventory = _inventory("l4-pcie")
    inventory.devices[1].memory_bytes = 0
    slices = build_slices(inventory)
    for obj in slices:
        kubernetes_validate.validate(obj, version, strict=True)
    devices = _devices(slices)
    assert "memory" not in devices["gpu-1"].get("capacity", {})
    assert devices["gpu-0"]["capacity"]["memory"] == {"value": "23034Mi"}


@pytest.mark.parametrize(
    ("kind", "taint"),
    [
        # DCGM isolates both (DCGM_ERROR_ISOLATE). Pending: running work is unaffected (NVIDIA's
        # memory error management guide) and the reset that applies the remap clears it.
        pytest.param(
            pb.HealthCondition.KIND_ROW_REMAP_PENDING,
            {"key": "gpu.nvidia.com/row-remap-pending", "value": "1", "effect": "NoSchedule"},
            id="pending",
        ),
        # Failed: spare rows exhausted, the GPU is due for replacement (NVIDIA's RMA policy).
        pytest.param(
            pb.HealthCondition.KIND_ROW_REMAP_FAILED,
            {"key": "gpu.nvidia.com/row-remap-failed", "value": "1", "effect": "NoExecute"},
            id="failed",
        ),
    ],
)
def test_row_remap_conditions_become_their_own_taints(kind: int, taint: dict[str, str]) -> None:
    inventory = _inventory("l4-pcie")
    inventory.devices[2].health.add(kind=kind, code=1)
    slices = build_slices(inventory)
    assert _devices(slices)["gpu-2"]["taints"] == [taint]
    for obj in slices:
        kubernetes_validate.validate(obj, "1.34.0", strict=True)
