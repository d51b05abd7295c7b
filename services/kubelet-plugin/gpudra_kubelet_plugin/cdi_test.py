from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra_kubelet_plugin.cdi import CdiDevice, CdiWriter, device_nodes, validate
from gpudra_kubelet_plugin.devices import DeviceInfo
from gpudra_kubelet_plugin.errors import CdiError

GPU = DeviceInfo("gpu-0", "gpu", "GPU-a", 0)
MIG = DeviceInfo("gpu-1-mig-1-0", "mig", "MIG-b", 1, "GPU-p", "1g.10gb", 0, 1, 30, 31)


@pytest.fixture
def writer(tmp_path: Path) -> CdiWriter:
    return CdiWriter(tmp_path / "cdi", "gpu.nvidia.com")


def valid_spec(writer: CdiWriter) -> dict[str, Any]:
    return writer.build(
        "uid-1", [CdiDevice("uid-1-gpu-0", GPU), CdiDevice("uid-1-mig", MIG)], ["A=1"]
    )


def test_build(writer: CdiWriter) -> None:
    spec = valid_spec(writer)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=GPU-a,MIG-b", "A=1"]
    assert writer.qualified("uid-1-gpu-0") == "k8s.gpu.nvidia.com/claim=uid-1-gpu-0"
    assert writer.device_name("u", "gpu-0", "s") == "u-gpu-0-s"


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        pytest.param(GPU, ["/dev/nvidia0"], id="gpu"),
        pytest.param(
            MIG,
            ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"],
            id="mig",
        ),
    ],
)
def test_device_nodes(info: DeviceInfo, expected: list[str]) -> None:
    assert device_nodes(info) == expected


@pytest.mark.parametrize(
    ("info", "message"),
    [
        pytest.param(
            DeviceInfo("p", "mig", "", 1, "GPU-p", "1g.10gb", 0, 1),
            "does not exist",
            id="placement",
        ),
        pytest.param(
            DeviceInfo("m", "mig", "MIG-x", 1, "GPU-p"), "no GI/CI capability", id="no-caps"
        ),
    ],
)
def test_device_nodes_errors(info: DeviceInfo, message: str) -> None:
    with pytest.raises(CdiError, match=message):
        device_nodes(info)


def _broken(edit: str) -> Any:
    def apply(spec: dict[str, Any]) -> None:
        if edit == "kind":
            spec["kind"] = "no-slash"
        elif edit == "relative-node":
            spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "dev/nvidia0"
        elif edit == "env":
            spec["containerEdits"]["env"].append("=nokey")
        elif edit == "no-devices":
            spec["devices"] = []
        elif edit == "device-name":
            spec["devices"][0]["name"] = "-bad/name"
        elif edit == "unknown-field":
            spec["containerEdits"]["sysctl"] = {}

    return apply


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        pytest.param("kind", "kind", id="kind"),
        pytest.param(
            "relative-node", "devices/0/containerEdits/deviceNodes/0/path", id="relative-node"
        ),
        pytest.param("env", "containerEdits/env/2", id="env"),
        pytest.param("no-devices", "devices", id="no-devices"),
        pytest.param("device-name", "devices/0/name", id="device-name"),
        pytest.param("unknown-field", "containerEdits", id="unknown-field"),
    ],
)
def test_schema_rejects(writer: CdiWriter, edit: str, where: str) -> None:
    spec = copy.deepcopy(valid_spec(writer))
    _broken(edit)(spec)
    with pytest.raises(CdiError, match=f"invalid CDI spec at {where}:"):
        validate(spec)
    with pytest.raises(CdiError):
        writer.write("uid-1", spec)
    assert not writer.spec_path("uid-1").exists()


def test_write_and_remove(writer: CdiWriter) -> None:
    path = writer.write("uid-1", valid_spec(writer))
    assert path == writer.directory / "k8s.gpu.nvidia.com-claim_uid-1.json"
    assert json.loads(path.read_text()) == valid_spec(writer)
    assert sorted(p.name for p in writer.directory.iterdir()) == [path.name]  # no temp left
    (writer.directory / "other-vendor.json").write_text("{}")
    assert writer.claim_uids() == {"uid-1"}
    assert writer.remove("uid-1") is True
    assert writer.remove("uid-1") is False
    assert writer.claim_uids() == set()


def test_remove_cleans_a_temp_left_by_a_crash(writer: CdiWriter) -> None:
    writer.directory.mkdir(parents=True)
    temp = writer.directory / ".k8s.gpu.nvidia.com-claim_uid-2.json.tmp"
    temp.write_text("{partial")
    assert writer.claim_uids() == set()  # CDI runtimes and we ignore dot-temps
    writer.remove("uid-2")
    assert not temp.exists()


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2.json.tmp", True, id="ours"),
        pytest.param(
            ".k8s.gpu.nvidia.com-claim_0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab.json.tmp",
            True,
            id="ours-uuid",
        ),
        pytest.param(".k8s.other.example.com-claim_uid-2.json.tmp", False, id="other-driver"),
        pytest.param(".k8s.gpu.nvidia.com.x-claim_uid-2.json.tmp", False, id="longer-driver"),
        pytest.param(
            ".k8s.gpu.nvidia.com-claim-claim_uid-2.json.tmp", False, id="driver-named-claim"
        ),
        pytest.param(".k8s.gpu.nvidia.com-claim_.json.tmp", False, id="no-uid"),
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2.yaml.tmp", False, id="other-suffix"),
        pytest.param("k8s.gpu.nvidia.com-claim_uid-2.json.tmp", False, id="not-a-dot-file"),
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2.json", False, id="not-a-temp"),
        pytest.param("spec.123456.tmp", False, id="cdi-library-temp"),
        pytest.param(".nvidia.yaml.tmp", False, id="nvidia-ctk-temp"),
    ],
)
def test_remove_temps_takes_only_this_drivers_temps(
    writer: CdiWriter, name: str, ours: bool
) -> None:
    writer.directory.mkdir(parents=True)
    path = writer.directory / name
    path.write_text("{partial")
    assert writer.remove_temps() == ([path.name] if ours else [])
    assert path.exists() is not ours


def test_remove_temps_without_a_directory(writer: CdiWriter) -> None:
    assert writer.remove_temps() == []
