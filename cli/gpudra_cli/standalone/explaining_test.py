from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpudra_cli.standalone.errors import ManifestError
from gpudra_cli.standalone.explaining import explain, load_classes, problem
from gpudra_cli.standalone.testdata import SLICES, claim

GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.driver == "gpu.nvidia.com" && '
                    'device.attributes["gpu.nvidia.com"].type == "gpu"'
                }
            }
        ]
    },
}


def wants(name: str, count: int) -> dict[str, object]:
    obj = claim(name)
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
    return obj


def test_problem_holds_the_other_claims_devices_not_its_own() -> None:
    mine = claim("mine", [("node-a", "gpu-1")])
    other = claim("other", [("node-a", "gpu-0")])
    doc = problem(mine, [mine, other], SLICES, [GPU_CLASS])
    assert doc["allocatedDevices"] == [
        {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"}
    ]
    assert "status" not in doc["claims"][0]
    assert "status" in mine  # the caller's claim is not changed


@pytest.mark.parametrize(
    ("count", "held", "expected"),
    [
        pytest.param(1, [], ["it fits on node-a: node-a/gpu-0"], id="fits"),
        pytest.param(
            1, [("node-a", "gpu-0")], ["it fits on node-a: node-a/gpu-1"], id="skips-held"
        ),
        pytest.param(
            2,
            [("node-a", "gpu-0")],
            ["It does not fit now", "request gpu: wants 2", "allocated 1"],
            id="does-not-fit",
        ),
    ],
)
def test_explain(count: int, held: list[tuple[str, str]], expected: list[str]) -> None:
    others = [claim("other", held)] if held else []
    text = "\n".join(explain(wants("mine", count), others, SLICES, [GPU_CLASS]))
    for part in expected:
        assert part in text, text


def test_load_classes(tmp_path: Path) -> None:
    path = tmp_path / "classes.yaml"
    path.write_text(yaml.safe_dump_all([GPU_CLASS, {"kind": "ConfigMap"}]), encoding="utf-8")
    assert load_classes(path) == [GPU_CLASS]
    path.write_text("kind: ConfigMap\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="no DeviceClass"):
        load_classes(path)
    with pytest.raises(ManifestError, match="cannot read"):
        load_classes(tmp_path / "missing.yaml")
