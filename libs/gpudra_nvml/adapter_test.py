from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpudra_nvml.adapter import sysfs_numa_node, sysfs_pcie_root
from gpudra_nvml.inventory import snapshot
from gpudra_nvml.loader import open_simulator
from gpudrapb.v1 import inventory_pb2 as pb


@dataclass(frozen=True)
class Want:
    gpus: int
    mig: int
    product: str
    architecture: str
    cc: str
    domains: dict[str, int]  # nvlinkDomain -> number of GPUs ("" = no NVLink)
    clique: bool
    driver: str
    cuda: str


PROFILES = [
    pytest.param(
        "dgx-h100",
        Want(
            8,
            0,
            "NVIDIA H100 80GB HBM3",
            "Hopper",
            "9.0",
            {"nvswitch-0": 8},
            False,
            "550.54.15",
            "12.4",
        ),
        id="dgx-h100",
    ),
    pytest.param(
        "hgx-b200",
        Want(
            8, 0, "NVIDIA B200", "Blackwell", "10.0", {"nvswitch-0": 8}, False, "570.124.06", "12.8"
        ),
        id="hgx-b200",
    ),
    pytest.param(
        "a100-mig",
        Want(
            8,
            10,
            "NVIDIA A100-SXM4-80GB",
            "Ampere",
            "8.0",
            {"nvswitch-0": 8},
            False,
            "535.161.08",
            "12.2",
        ),
        id="a100-mig",
    ),
    pytest.param(
        "h100-pcie-pairs",
        Want(
            4,
            0,
            "NVIDIA H100 PCIe",
            "Hopper",
            "9.0",
            {"nvlink-0": 2, "nvlink-1": 2},
            False,
            "550.90.07",
            "12.4",
        ),
        id="h100-pcie-pairs",
    ),
    pytest.param(
        "l4-pcie",
        Want(4, 0, "NVIDIA L4", "Ada Lovelace", "8.9", {"": 4}, False, "550.54.15", "12.4"),
        id="l4-pcie",
    ),
    pytest.param(
        "gb200-nvl72-tray",
        Want(
            4, 0, "NVIDIA GB200", "Blackwell", "10.0", {"nvswitch-0": 4}, True, "570.133.20", "12.8"
        ),
        id="gb200-nvl72-tray",
    ),
]


@pytest.mark.parametrize(("profile", "want"), PROFILES)
def test_discovery_over_every_profile(profile: str, want: Want) -> None:
    opened = open_simulator(profile)
    try:
        found = opened.adapter.discover()
    finally:
        opened.adapter.stop()
    gpus = [d for d in found.devices if d.type == pb.Device.TYPE_GPU]
    migs = [d for d in found.devices if d.type == pb.Device.TYPE_MIG]
    assert (len(gpus), len(migs), found.lost) == (want.gpus, want.mig, [])
    assert [g.name for g in gpus] == [f"gpu-{i}" for i in range(want.gpus)]
    assert {g.product_name for g in gpus} == {want.product}
    assert {g.architecture for g in gpus} == {want.architecture}
    assert {g.cuda_compute_capability for g in gpus} == {want.cc}
    assert {g.brand for g in gpus} == {"Nvidia"}
    domains: dict[str, int] = {}
    for g in gpus:
        domains[g.nvlink_domain] = domains.get(g.nvlink_domain, 0) + 1
    assert domains == want.domains
    assert all(bool(g.clique_id) == want.clique for g in gpus)
    assert (found.versions.driver, found.versions.cuda_driver) == (want.driver, want.cuda)
    assert set(found.versions.vbios) == {g.uuid for g in gpus}
    for g in gpus:
        assert g.pci_bus_id == g.pci_bus_id.lower()
        assert len(g.pci_bus_id) == 12
        assert g.pcie_root.startswith("pci")
        assert g.HasField("numa_node")
        assert g.uuid.startswith("GPU-")
        assert g.memory_bytes > 20 * 2**30
    assert opened.source.kind == pb.InventorySource.KIND_SIMULATOR


def test_gb200_clique_is_cluster_uuid_dot_clique_id() -> None:
    opened = open_simulator("gb200-nvl72-tray")
    found = opened.adapter.discover()
    assert {g.clique_id for g in found.devices} == {"7b3f2c1e-5a4d-4e8f-9c2b-1d0e6f8a9b7c.32766"}


def _by_name(profile: str) -> dict[str, pb.Device]:
    return {d.name: d for d in open_simulator(profile).adapter.discover().devices}


@pytest.mark.parametrize(
    ("gpu", "profiles", "free"),
    [
        # 3g.40gb@0 + 2g.20gb@4 + 1g.10gb@6 leave only slice 7, where no profile may start.
        pytest.param("gpu-0", ["3g.40gb", "2g.20gb", "1g.10gb"], 0, id="mixed-full"),
        pytest.param("gpu-1", ["1g.10gb"] * 7, 0, id="seven-small"),
        # Empty MIG GPU: 7 + 4 + 3 + 2 + 1 + 1 placements of the six A100 profiles.
        pytest.param("gpu-2", [], 18, id="empty-mig"),
    ],
)
def test_a100_mig_devices_and_free_placements(gpu: str, profiles: list[str], free: int) -> None:
    devices = _by_name("a100-mig")
    parent = devices[gpu]
    assert parent.mig_enabled
    assert parent.memory_slices == 8
    children = [d for d in devices.values() if d.parent_uuid == parent.uuid]
    assert sorted(d.mig_profile for d in children) == sorted(profiles)
    assert len(parent.free_placements) == free
    for child in children:
        assert child.uuid.startswith("MIG-")
        assert child.name.startswith(f"{gpu}-mig-")
        assert child.placement.size in (1, 2, 4, 8)
        assert child.nvlink_domain == parent.nvlink_domain


def test_a100_mig_resources_follow_nvidia_table() -> None:
    devices = _by_name("a100-mig")
    three_g = next(d for d in devices.values() if d.mig_profile == "3g.40gb")
    r = three_g.placement.resources
    assert (r.multiprocessors, r.copy_engines, r.decoders) == (42, 3, 2)
    assert (three_g.placement.start, three_g.placement.size) == (0, 4)


def test_whole_gpus_have_mig_disabled() -> None:
    devices = _by_name("a100-mig")
    assert not devices["gpu-4"].mig_enabled
    assert devices["gpu-4"].mig_capable
    assert not _by_name("l4-pcie")["gpu-0"].mig_capable


def test_lost_gpu_is_reported_not_fatal() -> None:
    opened = open_simulator("dgx-h100")
    assert opened.fake is not None
    opened.fake.lose_device(3)
    found = opened.adapter.discover()
    assert found.lost == [3]
    assert [d.index for d in found.devices] == [0, 1, 2, 4, 5, 6, 7]
    # The remaining seven still form one NVSwitch island.
    assert {d.nvlink_domain for d in found.devices} == {"nvswitch-0"}
    opened.fake.recover_device(3)
    assert opened.adapter.discover().lost == []


@pytest.mark.parametrize(
    ("profile", "index", "busy"),
    [
        pytest.param("dgx-h100", 7, False, id="idle-but-allocated"),
        pytest.param("l4-pcie", 0, True, id="constant-busy"),
    ],
)
def test_utilization_patterns(profile: str, index: int, busy: bool) -> None:
    samples = {s.device_name: s for s in open_simulator(profile).adapter.utilization()}
    sample = samples[f"gpu-{index}"]
    assert (sample.gpu_percent > 0) == busy
    assert 0 < sample.memory_used_bytes <= sample.memory_total_bytes


def test_sysfs_pcie_root(tmp_path: Path) -> None:
    target = tmp_path / "devices" / "pci0000:15" / "0000:15:01.0" / "0000:1b:00.0"
    target.mkdir(parents=True)
    link_dir = tmp_path / "bus" / "pci" / "devices"
    link_dir.mkdir(parents=True)
    (link_dir / "0000:1b:00.0").symlink_to(target)
    assert sysfs_pcie_root("0000:1b:00.0", str(tmp_path)) == "pci0000:15"
    assert sysfs_pcie_root("0000:99:00.0", str(tmp_path)) == ""


class _Unprivileged:
    """The simulator as an unprivileged process sees it: GPU-instance queries are refused."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        if name in ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo"):

            def refuse(*args: Any) -> Any:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

            return refuse
        return getattr(self._lib, name)


def test_mig_without_gpu_instance_privileges_is_conservative() -> None:
    opened = open_simulator("a100-mig")
    opened.adapter.nvml.lib = _Unprivileged(opened.fake)
    devices = {d.name: d for d in opened.adapter.discover().devices}
    gpu0 = [d for d in devices.values() if d.parent_uuid == devices["gpu-0"].uuid]
    assert sorted(d.mig_profile for d in gpu0) == ["1g.10gb", "2g.20gb", "3g.40gb"]  # by resources
    assert {d.placement.size for d in gpu0} == {0}  # placement unknown
    assert len(devices["gpu-0"].free_placements) == 0
    assert len(devices["gpu-2"].free_placements) == 18  # no MIG devices there: unaffected


class _OldDriver:
    """A driver from before nvmlDeviceGetGpuFabricInfoV: only the original fabric call exists."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlDeviceGetGpuFabricInfoV":
            raise AttributeError(name)
        if name == "nvmlDeviceGetGpuFabricInfo":
            return self._lib.nvmlDeviceGetGpuFabricInfoV  # fills the same fields by name
        return getattr(self._lib, name)


def test_clique_from_the_original_fabric_call() -> None:
    opened = open_simulator("gb200-nvl72-tray")
    opened.adapter.nvml.lib = _OldDriver(opened.fake)
    cliques = {d.clique_id for d in opened.adapter.discover().devices}
    assert cliques == {"7b3f2c1e-5a4d-4e8f-9c2b-1d0e6f8a9b7c.32766"}


class _LinksDown:
    """The simulator with every NVLink of some GPUs inactive (a bridge pulled, links trained down)."""

    def __init__(self, lib: Any, down: set[int]) -> None:
        self._lib, self._down = lib, down

    def __getattr__(self, name: str) -> Any:
        if name != "nvmlDeviceGetNvLinkState":
            return getattr(self._lib, name)

        def state(handle: Any, link: int) -> int:
            active = int(self._lib.nvmlDeviceGetNvLinkState(handle, link))
            return 0 if self._lib.nvmlDeviceGetIndex(handle) in self._down else active

        return state


@pytest.mark.parametrize(
    ("profile", "down", "domains"),
    [
        pytest.param(
            "h100-pcie-pairs", {0, 1}, ["", "", "nvlink-0", "nvlink-0"], id="one-bridge-down"
        ),
        # GPU 0 reports its links down, GPU 1 still sees its side up: the pair stays one island.
        pytest.param(
            "h100-pcie-pairs", {0}, ["nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1"], id="one-sided"
        ),
        pytest.param(
            "dgx-h100", {3}, ["nvswitch-0"] * 3 + [""] + ["nvswitch-0"] * 4, id="gpu-off-nvswitch"
        ),
    ],
)
def test_nvlink_domains_follow_link_state(profile: str, down: set[int], domains: list[str]) -> None:
    opened = open_simulator(profile)
    opened.adapter.nvml.lib = _LinksDown(opened.fake, down)
    assert [d.nvlink_domain for d in opened.adapter.discover().devices] == domains


def test_partner_of_a_lost_gpu_keeps_a_bridge_domain() -> None:
    opened = open_simulator("h100-pcie-pairs")
    assert opened.fake is not None
    opened.fake.lose_device(0)
    found = opened.adapter.discover()
    assert found.lost == [0]
    assert [d.nvlink_domain for d in found.devices] == ["nvlink-0", "nvlink-1", "nvlink-1"]


class _FailsOn:
    """The simulator with one NVML function failing with `code` on one GPU (by index)."""

    def __init__(self, lib: Any, function: str, index: int, code: int) -> None:
        self._lib, self._function, self._index, self._code = lib, function, index, code

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name != self._function:
            return real

        def call(handle: Any, *args: Any) -> Any:
            if self._lib.nvmlDeviceGetIndex(handle) == self._index:
                raise pynvml.NVMLError(self._code)
            return real(handle, *args)

        return call


def test_gpu_lost_while_its_mig_devices_are_read_is_only_reported_lost() -> None:
    opened = open_simulator("a100-mig")
    before = snapshot(opened.adapter.discover(), "n1", opened.source)
    opened.adapter.nvml.lib = _FailsOn(
        opened.fake, "nvmlDeviceGetMaxMigDeviceCount", 0, pynvml.NVML_ERROR_GPU_IS_LOST
    )
    found = opened.adapter.discover()
    assert found.lost == [0]
    assert 0 not in {d.index for d in found.devices}
    # The agent keeps the last description of the lost GPU, once: no duplicate GPU or counter set.
    after = snapshot(found, "n1", opened.source, before)
    names = [d.name for d in after.devices]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(d.name for d in before.devices)


@pytest.mark.parametrize(
    ("function", "code"),
    [
        pytest.param(
            "nvmlDeviceGetMaxMigDeviceCount", pynvml.NVML_ERROR_NOT_SUPPORTED, id="mig-unsupported"
        ),
        pytest.param(
            "nvmlDeviceGetMaxMigDeviceCount", pynvml.NVML_ERROR_UNKNOWN, id="mig-unknown-error"
        ),
        pytest.param("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, id="gpu-query-error"),
    ],
)
def test_an_nvml_error_on_one_gpu_does_not_lose_the_others(function: str, code: int) -> None:
    opened = open_simulator("a100-mig")
    before = snapshot(opened.adapter.discover(), "n1", opened.source)
    opened.adapter.nvml.lib = _FailsOn(opened.fake, function, 1, code)
    found = opened.adapter.discover()
    assert sorted({d.index for d in found.devices}) == [0, 2, 3, 4, 5, 6, 7]
    assert list(found.failed) == [1]
    assert function in found.failed[1]
    # GPU 1 keeps its last description (with its MIG devices) until it answers again.
    after = snapshot(found, "n1", opened.source, before)
    assert [d.name for d in after.devices] == [d.name for d in before.devices]
    opened.adapter.nvml.lib = opened.fake
    assert opened.adapter.discover().failed == {}


@pytest.mark.parametrize(
    ("function", "code", "domains", "lost"),
    [
        pytest.param(
            "nvmlDeviceGetNvLinkState",
            pynvml.NVML_ERROR_UNKNOWN,
            ["nvswitch-0"] * 3 + [""] + ["nvswitch-0"] * 4,
            [],
            id="link-state-unreadable",
        ),
        pytest.param(
            "nvmlDeviceGetNvLinkRemotePciInfo",
            pynvml.NVML_ERROR_UNKNOWN,
            ["nvswitch-0"] * 3 + [""] + ["nvswitch-0"] * 4,
            [],
            id="remote-end-unreadable",
        ),
        pytest.param(
            "nvmlDeviceGetNvLinkState",
            pynvml.NVML_ERROR_GPU_IS_LOST,
            ["nvswitch-0"] * 7,
            [3],
            id="lost-while-links-read",
        ),
    ],
)
def test_an_nvlink_query_failing_on_one_gpu_does_not_fail_discovery(
    function: str, code: int, domains: list[str], lost: list[int]
) -> None:
    # A link whose state cannot be read counts as inactive (no NVLink domain claimed for it).
    opened = open_simulator("dgx-h100")
    opened.adapter.nvml.lib = _FailsOn(opened.fake, function, 3, code)
    found = opened.adapter.discover()
    assert [d.nvlink_domain for d in found.devices] == domains
    assert found.lost == lost


def test_one_gpu_failing_its_utilisation_query_leaves_the_others_sampled() -> None:
    opened = open_simulator("dgx-h100")
    opened.adapter.nvml.lib = _FailsOn(
        opened.fake, "nvmlDeviceGetUtilizationRates", 2, pynvml.NVML_ERROR_UNKNOWN
    )
    sampled = [s.device_name for s in opened.adapter.utilization()]
    assert sampled == [f"gpu-{i}" for i in range(8) if i != 2]


class _HandleRefused:
    """The simulator with `nvmlDeviceGetHandleByIndex` failing with `code` for one GPU index, as
    NVML documents it may (INSUFFICIENT_POWER, NO_PERMISSION, IRQ_ISSUE, UNKNOWN)."""

    def __init__(self, lib: Any, index: int, code: int) -> None:
        self._lib, self._index, self._code = lib, index, code

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name != "nvmlDeviceGetHandleByIndex":
            return real

        def call(index: int) -> Any:
            if index == self._index:
                raise pynvml.NVMLError(self._code)
            return real(index)

        return call


@pytest.mark.parametrize(
    ("code", "lost"),
    [
        # Unusable GPUs are lost (the health monitor marks them); other refusals are failures.
        pytest.param(pynvml.NVML_ERROR_INSUFFICIENT_POWER, True, id="power-cable"),
        pytest.param(pynvml.NVML_ERROR_IRQ_ISSUE, True, id="irq-issue"),
        pytest.param(pynvml.NVML_ERROR_NO_PERMISSION, False, id="no-permission"),
        pytest.param(pynvml.NVML_ERROR_UNKNOWN, False, id="unknown"),
    ],
)
def test_a_gpu_whose_handle_is_refused_does_not_fail_the_node(code: int, lost: bool) -> None:
    opened = open_simulator("dgx-h100")
    before = snapshot(opened.adapter.discover(), "n1", opened.source)
    opened.adapter.nvml.lib = _HandleRefused(opened.fake, 5, code)
    handles, _ = opened.adapter.handles()
    assert sorted(handles) == [0, 1, 2, 3, 4, 6, 7]
    found = opened.adapter.discover()
    assert [d.index for d in found.devices] == [0, 1, 2, 3, 4, 6, 7]
    if lost:
        assert (found.failed, found.lost) == ({}, [5])
    else:
        assert (list(found.failed), found.lost) == ([5], [])
        assert "nvmlDeviceGetHandleByIndex" in found.failed[5]
    # Its last description is kept, as for any GPU lost or whose description failed.
    after = snapshot(found, "n1", opened.source, before)
    assert [d.name for d in after.devices] == [d.name for d in before.devices]
    sampled = [s.device_name for s in opened.adapter.utilization()]
    assert sampled == [f"gpu-{i}" for i in range(8) if i != 5]


class _NumaNodeId:
    """nvmlDeviceGetNumaNodeId as real NVML answers it: NOT_SUPPORTED where GPUs are not NUMA
    nodes themselves (every x86 server), else the NUMA node of the GPU's own memory (Grace)."""

    def __init__(self, lib: Any, answer: int | None) -> None:
        self._lib, self._answer = lib, answer

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if name != "nvmlDeviceGetNumaNodeId":
            return real

        def numa(handle: Any) -> int:
            if self._answer is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self._answer

        return numa


@pytest.mark.parametrize(
    ("profile", "answer"),
    [
        pytest.param("dgx-h100", None, id="x86-not-a-numa-node"),
        # GB200: the GPU's HBM is its own NUMA node; the CPU (Grace) node is what jobs pin to.
        pytest.param("gb200-nvl72-tray", 12, id="grace-gpu-memory-node"),
    ],
)
def test_numa_node_is_the_cpu_affinity_not_nvml_numa_id(profile: str, answer: int | None) -> None:
    opened = open_simulator(profile)
    assert opened.fake is not None
    want = [g.numa_node for g in opened.fake.profile.gpus]
    opened.adapter.nvml.lib = _NumaNodeId(opened.fake, answer)
    gpus = [d for d in opened.adapter.discover().devices if d.type == pb.Device.TYPE_GPU]
    assert [g.numa_node if g.HasField("numa_node") else None for g in gpus] == want


@pytest.mark.parametrize(
    ("content", "want"),
    [
        pytest.param("1\n", 1, id="node-1"),
        pytest.param("-1\n", None, id="unknown"),
        pytest.param(None, None, id="no-such-device"),
        pytest.param("garbage", None, id="unreadable"),
    ],
)
def test_sysfs_numa_node(tmp_path: Path, content: str | None, want: int | None) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:1b:00.0"
    device.mkdir(parents=True)
    if content is not None:
        (device / "numa_node").write_text(content)
    assert sysfs_numa_node("0000:1b:00.0", str(tmp_path)) == want


def test_a_gpu_instance_without_compute_instance_holds_its_slices() -> None:
    # Left by `nvidia-smi mig -cgi` without -C, or a destroy whose GPU-instance step failed: no
    # MIG device, but its slices are taken; offering them makes every create there fail.
    opened = open_simulator("a100-mig")
    assert opened.fake is not None
    opened.fake.create_gpu_instance(2, "3g.40gb", 4)
    devices = {d.name: d for d in opened.adapter.discover().devices}
    gpu2 = devices["gpu-2"]
    assert not [d for d in devices.values() if d.parent_uuid == gpu2.uuid]
    free = {(p.profile, p.start) for p in gpu2.free_placements}
    assert all(p.start + p.size <= 4 for p in gpu2.free_placements)
    assert ("3g.40gb", 0) in free
    assert ("3g.40gb", 4) not in free


class _LinksAbsent:
    """The simulator with some link indexes answering NOT_SUPPORTED on every GPU, as NVML does for
    links a SKU has disabled: the links a GPU has are not numbered from 0 without gaps."""

    def __init__(self, lib: Any, absent: set[int]) -> None:
        self._lib, self._absent = lib, absent

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._lib, name)
        if not name.startswith("nvmlDeviceGetNvLink"):
            return real

        def call(handle: Any, link: int) -> Any:
            if link in self._absent:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return real(handle, link)

        return call


@pytest.mark.parametrize(
    ("profile", "absent", "domains"),
    [
        pytest.param("dgx-h100", {0}, ["nvswitch-0"] * 8, id="first-link-disabled"),
        pytest.param("dgx-h100", {0, 1, 2, 5}, ["nvswitch-0"] * 8, id="gaps"),
        pytest.param(
            "h100-pcie-pairs",
            {0, 1},
            ["nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1"],
            id="bridge-on-later-links",
        ),
        # Every index up to NVML's maximum answering NOT_SUPPORTED: no NVLink at all.
        pytest.param("dgx-h100", set(range(64)), [""] * 8, id="none"),
    ],
)
def test_nvlink_scan_reads_every_link_index(
    profile: str, absent: set[int], domains: list[str]
) -> None:
    opened = open_simulator(profile)
    opened.adapter.nvml.lib = _LinksAbsent(opened.fake, absent)
    assert [d.nvlink_domain for d in opened.adapter.discover().devices] == domains


@pytest.mark.parametrize(
    ("profile", "function", "field"),
    [
        pytest.param("dgx-h100", "nvmlDeviceGetVbiosVersion", "vbios_version", id="vbios"),
        pytest.param("dgx-h100", "nvmlDeviceGetArchitecture", "architecture", id="architecture"),
        pytest.param("gb200-nvl72-tray", "nvmlDeviceGetGpuFabricInfoV", "clique_id", id="clique"),
    ],
)
def test_a_broken_optional_attribute_leaves_the_gpu_described_without_it(
    profile: str, function: str, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    opened = open_simulator(profile)
    healthy = {d.name: d for d in opened.adapter.discover().devices}
    assert getattr(healthy["gpu-1"], field)
    opened.adapter.nvml.lib = _FailsOn(opened.fake, function, 1, pynvml.NVML_ERROR_UNKNOWN)
    with caplog.at_level("WARNING", logger="gpudra_nvml.adapter"):
        for _ in range(3):
            found = opened.adapter.discover()
    assert (found.failed, found.lost) == ({}, [])
    devices = {d.name: d for d in found.devices}
    assert list(devices) == list(healthy)
    assert getattr(devices["gpu-1"], field) == ""
    assert getattr(devices["gpu-2"], field) == getattr(healthy["gpu-2"], field)
    # Every other field of the GPU is as before.
    devices["gpu-1"].ClearField(field)  # type: ignore[arg-type]
    healthy["gpu-1"].ClearField(field)  # type: ignore[arg-type]
    assert devices["gpu-1"] == healthy["gpu-1"]
    warnings = [r.getMessage() for r in caplog.records if function in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, not at every discovery
    assert "gpu-1" in warnings[0]


class _NvmlVersionBroken:
    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        if name != "nvmlSystemGetNVMLVersion":
            return getattr(self._lib, name)

        def call() -> str:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

        return call


def test_a_broken_nvml_version_leaves_every_gpu_described() -> None:
    opened = open_simulator("l4-pcie")
    opened.adapter.nvml.lib = _NvmlVersionBroken(opened.fake)
    found = opened.adapter.discover()
    assert found.versions.nvml == ""
    assert found.versions.driver == "550.54.15"
    assert len(found.devices) == 4


def test_a_gpu_without_memory_of_its_own_is_described_without_memory() -> None:
    # GB10-class unified memory (DGX Spark): nvmlDeviceGetMemoryInfo answers NOT_SUPPORTED, as
    # nvidia-smi's "Memory-Usage: Not Supported" shows; the GPU uses the host's memory.
    opened = open_simulator("l4-pcie")
    healthy = {d.name: d for d in opened.adapter.discover().devices}
    opened.adapter.nvml.lib = _FailsOn(
        opened.fake, "nvmlDeviceGetMemoryInfo", 1, pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    found = opened.adapter.discover()
    assert (found.failed, found.lost) == ({}, [])
    devices = {d.name: d for d in found.devices}
    assert list(devices) == list(healthy)
    assert devices["gpu-1"].memory_bytes == 0  # none: see inventory.proto
    assert devices["gpu-1"].uuid == healthy["gpu-1"].uuid
    assert devices["gpu-2"].memory_bytes == healthy["gpu-2"].memory_bytes
    samples = {s.device_name: s for s in opened.adapter.utilization()}
    assert list(samples) == [f"gpu-{i}" for i in range(4)]
    assert (samples["gpu-1"].memory_total_bytes, samples["gpu-1"].memory_used_bytes) == (0, 0)
    assert samples["gpu-1"].gpu_percent == samples["gpu-0"].gpu_percent  # constant-busy profile
