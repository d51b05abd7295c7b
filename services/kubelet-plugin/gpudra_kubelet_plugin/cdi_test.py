from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra_kubelet_plugin.cdi import (
    MAX_LABEL,
    CdiDevice,
    CdiWriter,
    device_nodes,
    request_label,
    validate,
)
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
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2_a.json.tmp", True, id="ours-request"),
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2_a_b.json.tmp", True, id="ours-requests"),
        pytest.param(".k8s.gpu.nvidia.com-claim_.json.tmp", False, id="no-uid"),
        pytest.param(".k8s.gpu.nvidia.com-claim_uid-2_.json.tmp", False, id="no-request"),
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


def test_a_claim_of_one_request_group_has_one_spec_under_the_claims_name(
    writer: CdiWriter,
) -> None:
    devices = [CdiDevice("u-gpu-0", GPU, ("a", "b")), CdiDevice("u-mig", MIG, ("a", "b"))]
    (path,) = writer.write_claim("u", devices)
    assert path == writer.spec_path("u")
    assert json.loads(path.read_text()) == writer.build("u", devices)


def test_each_request_group_has_its_own_spec(writer: CdiWriter) -> None:
    devices = [CdiDevice("u-gpu-0", GPU, ("a",)), CdiDevice("u-mig", MIG, ("b",))]
    paths = writer.write_claim("u", devices, lambda group: [f"N={len(group)}"])
    assert [p.name for p in paths] == [
        "k8s.gpu.nvidia.com-claim_u_a.json",
        "k8s.gpu.nvidia.com-claim_u_b.json",
    ]
    specs = [json.loads(p.read_text()) for p in paths]
    assert [[d["name"] for d in s["devices"]] for s in specs] == [["u-gpu-0"], ["u-mig"]]
    assert [s["containerEdits"]["env"] for s in specs] == [
        ["NVIDIA_VISIBLE_DEVICES=GPU-a", "N=1"],
        ["NVIDIA_VISIBLE_DEVICES=MIG-b", "N=1"],
    ]
    assert writer.spec_paths("u") == paths
    assert writer.claim_uids() == {"u"}
    # Written again as one group: the per-request files go, or CDI would see each name twice.
    assert writer.write_claim("u", [CdiDevice("u-gpu-0", GPU, ("a",))]) == [writer.spec_path("u")]
    assert writer.spec_paths("u") == [writer.spec_path("u")]
    assert writer.remove("u") is True
    assert list(writer.directory.iterdir()) == []


def test_spec_paths_and_claim_uids_keep_claims_apart(writer: CdiWriter) -> None:
    writer.directory.mkdir(parents=True)
    names = [
        "k8s.gpu.nvidia.com-claim_u.json",
        "k8s.gpu.nvidia.com-claim_u_a.json",
        "k8s.gpu.nvidia.com-claim_u-2_a.json",
        "k8s.gpu.nvidia.com-claim_u.2.json",
        "k8s.other.example.com-claim_u_a.json",
        "k8s.gpu.nvidia.com-claim-claim_u_a.json",
    ]
    for name in names:
        (writer.directory / name).write_text("{}")
    assert [p.name for p in writer.spec_paths("u")] == names[:2]
    assert writer.claim_uids() == {"u", "u-2", "u.2"}
    writer.remove("u")
    assert sorted(p.name for p in writer.directory.iterdir()) == sorted(names[2:])


@pytest.mark.parametrize(
    ("requests", "label"),
    [
        pytest.param(("gpu",), "gpu", id="one"),
        pytest.param(("a", "b-2"), "a_b-2", id="two"),
        pytest.param(("x" * 63, "y" * 63), None, id="too-long"),
        pytest.param(("Gpu",), None, id="not-a-dns-label"),
        pytest.param(("a_b",), None, id="no-clash-with-a-and-b"),
    ],
)
def test_request_label(requests: tuple[str, ...], label: str | None) -> None:
    got = request_label(requests)
    if label is not None:
        assert got == label
    else:
        assert got.startswith("requests-")
        assert len(got) <= MAX_LABEL
        assert request_label(requests) == got  # the same group, the same file
        assert got != request_label(("a", "b"))
