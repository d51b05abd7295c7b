from __future__ import annotations

import argparse
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpudra_cli.commands import profiles, slices
from gpudra_cli.main import main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpudra")
    sub = parser.add_subparsers(dest="command")
    slices.register(sub)
    profiles.register(sub)
    return parser


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_slices_print_valid_objects(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slices", "--profile", "dgx-h100", "--node", "node-a", "-o", fmt], _parser()) == 0
    out = capsys.readouterr().out
    items: list[Any]
    if fmt == "json":
        doc = json.loads(out)
        assert "SIMULATED" in doc["metadata"]["annotations"]["gpudra.dev/source"]
        items = doc["items"]
    else:
        assert out.startswith("# SIMULATED node (profile dgx-h100)")
        items = list(yaml.safe_load_all(out))
    assert [d["name"] for d in items[0]["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    for obj in items:
        kubernetes_validate.validate(obj, "1.34.0", strict=True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--profile", "nope", "--node", "n"], "unknown profile", id="unknown-profile"),
        pytest.param(["--profile", "l4-pcie", "--node", "Bad_Node"], "node name", id="bad-node"),
        pytest.param(
            ["--profile", "l4-pcie", "--node", "n", "--driver", "Bad_Driver"],
            "driver",
            id="bad-driver",
        ),
    ],
)
def test_slices_user_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["slices", *argv], _parser()) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpudra slices: ")
    assert message in err
    assert "Traceback" not in err


def test_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"], _parser()) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in out]
    assert names == sorted(
        ["a100-mig", "dgx-h100", "gb200-nvl72-tray", "h100-pcie-pairs", "hgx-b200", "l4-pcie"]
    )
    assert any("NVIDIA H100 80GB HBM3" in line for line in out)
