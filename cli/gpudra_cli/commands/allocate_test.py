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


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="nested-too-deep"),
        pytest.param('{"id": ' + "9" * 5000 + "}", id="integer-too-long"),
        pytest.param('{"id": NaN, "claims": []}', id="nan-is-not-json"),
        pytest.param('{"id": "x", "claims": [{"count": Infinity}]}', id="infinity-is-not-json"),
    ],
)
def test_a_line_python_cannot_decode_is_one_error_answer_and_the_stream_goes_on(
    bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{bad}\n{_problem('after', 1)}\n"))
    assert main(["allocate"]) == 0
    out = capsys.readouterr().out
    answers = [json.loads(line, parse_constant=_no_constant) for line in out.splitlines()]
    assert [a["outcome"] for a in answers] == ["error", "allocated"]
    assert answers[0]["id"] is None
    assert "not a JSON document" in answers[0]["error"]
    assert answers[1]["id"] == "after"


def _no_constant(name: str) -> object:
    raise AssertionError(f"the output holds {name}, which is not JSON")


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])  # en_US.UTF-8, C.UTF-8 locales
def test_a_line_that_is_not_utf8_is_one_error_answer_whatever_the_locale(
    errors: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = b'{"id": "bad-\xff", "claims": []}'
    data = f"{_problem('before', 1)}\n".encode() + bad + f"\n{_problem('after', 1)}\n".encode()
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors)
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["allocate"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["id"], a["outcome"]) for a in answers] == [
        ("before", "allocated"),
        (None, "error"),
        ("after", "allocated"),
    ]
    assert "not UTF-8" in answers[1]["error"]
