from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudra_kubelet_plugin.cdi import CdiDevice, CdiWriter
from gpudra_kubelet_plugin.cdibase import load_base_edits, merge_edits
from gpudra_kubelet_plugin.devices import DeviceInfo
from gpudra_kubelet_plugin.errors import CdiError

# The shape `nvidia-ctk cdi generate` writes (abridged): common edits at the top, one device per GPU.
NVIDIA_YAML = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options: [ro, nosuid, nodev, bind]
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
"""


def test_claim_specs_carry_the_drivers_files(tmp_path: Path) -> None:
    path = tmp_path / "nvidia.yaml"
    path.write_text(NVIDIA_YAML)
    base = load_base_edits(path)
    assert "env" not in base  # only NVIDIA_VISIBLE_DEVICES=void was there
    writer = CdiWriter(tmp_path / "cdi", "gpu.nvidia.com", base)
    spec = writer.build("u", [CdiDevice("u-gpu-0", DeviceInfo("gpu-0", "gpu", "GPU-a", 0))])
    edits = spec["containerEdits"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=GPU-a"]  # the base's "void" is dropped
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    assert edits["hooks"][0]["args"][1] == "update-ldcache"
    assert edits["mounts"][0]["hostPath"].endswith("libcuda.so.550.54.15")
    writer.write("u", spec)  # valid against the schema, hooks and mounts included


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("missing.yaml", None, "cannot read base CDI spec", id="missing"),
        pytest.param("bad.json", "{", "cannot read base CDI spec", id="bad-json"),
        pytest.param("bad.yaml", "a: [", "cannot read base CDI spec", id="bad-yaml"),
        pytest.param("empty.yaml", "kind: x\n", "no top-level containerEdits", id="no-edits"),
        pytest.param(
            "odd.json",
            json.dumps({"containerEdits": {"mounts": {"a": 1}}}),
            "must be lists",
            id="not-list",
        ),
    ],
)
def test_bad_base_specs(tmp_path: Path, name: str, content: str | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(CdiError, match=message):
        load_base_edits(path)


def test_merge_keeps_ours_first_and_drops_duplicates() -> None:
    ours = {"deviceNodes": [{"path": "/dev/a"}], "env": ["A=1"]}
    base = {"deviceNodes": [{"path": "/dev/a"}, {"path": "/dev/b"}], "env": ["A=1", "B=2"]}
    assert merge_edits(ours, base) == {
        "deviceNodes": [{"path": "/dev/a"}, {"path": "/dev/b"}],
        "env": ["A=1", "B=2"],
    }
    assert ours == {"deviceNodes": [{"path": "/dev/a"}], "env": ["A=1"]}  # not modified
