from __future__ import annotations

import io
import json
import sys

import pytest

from gpudra_cli.main import main

SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-1-gpu"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-1",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(2)
        ],
    },
}
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
}


def _claim(name: str, count: int) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }


def _problem(pid: str, count: int) -> str:
    doc = {
        "id": pid,
        "node": {"name": "node-1"},
        "classes": [CLASS],
        "slices": [SLICE],
        "claims": [_claim(pid, count)],
    }
    return json.dumps(doc)


@pytest.mark.parametrize("policy", ["first-fit", "topology"])
def test_answers_every_line_in_order_and_exits_zero(
    policy: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [_problem("fits", 2), "{not json", _problem("too-big", 3)]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["allocate", "--policy", policy]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["outcome"] for a in answers] == ["allocated", "error", "unschedulable"]
    assert answers[0]["id"] == "fits"
    devices = answers[0]["results"][0]["devices"]["results"]
    assert sorted(d["device"] for d in devices) == ["gpu-0", "gpu-1"]
    assert answers[2]["id"] == "too-big"
