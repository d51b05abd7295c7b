from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra_cli.commands import apply, delete, demo, describe, drift, explain, get, top, up

cli = importlib.import_module("gpudra_cli.main")
COMMANDS = (apply, delete, demo, describe, drift, explain, get, top, up)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudra")
    sub = p.add_subparsers(dest="command")
    for module in COMMANDS:
        module.register(sub)
    return p


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["get", "claims"], id="get"),
        pytest.param(["describe", "claim", "x"], id="describe"),
        pytest.param(["explain", "claim", "x"], id="explain"),
        pytest.param(["delete", "claim", "x"], id="delete"),
        pytest.param(["top"], id="top"),
        pytest.param(["drift"], id="drift"),
        pytest.param(["apply", "-f", "{examples}"], id="apply"),
    ],
)
def test_without_a_running_system_each_command_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    examples = Path(__file__).resolve().parents[3] / "examples"
    argv = [a.format(examples=examples) for a in argv]
    code = cli.main([*argv, "--state-file", str(tmp_path / "none.json")], parser=parser())
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert "no running gpudra found" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["get", "pods"], "unknown kind 'pods'", id="get-unknown-kind"),
        pytest.param(["delete", "pods", "x"], "only claims can be deleted", id="delete-pods"),
        pytest.param(["delete", "claim"], "name the claims to delete", id="delete-nothing"),
        pytest.param(["describe", "node", "x"], "only claims", id="describe-node"),
        pytest.param(["demo", "--fleet", "nope"], "unknown fleet 'nope'", id="demo-bad-fleet"),
        pytest.param(["up", "--fleet", "x=1"], "unknown simulator profile 'x'", id="up-bad-fleet"),
        pytest.param(["apply", "-f", "/nonexistent.yaml"], "no such file", id="apply-missing"),
    ],
)
def test_bad_input_is_one_readable_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = cli.main([*argv, "--state-file", str(tmp_path / "none.json")], parser=parser())
    err = capsys.readouterr().err
    assert code == 1
    assert message in err
    assert err.count("\n") == 1, err


def test_claim_cells_and_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    from gpudra_cli.standalone.results import rows
    from gpudra_cli.standalone.testdata import SLICES, claim

    objs: list[dict[str, Any]] = [claim("a", [("node-a", "gpu-0"), ("node-a", "gpu-1")])]
    (cells,) = (get.claim_cells(r) for r in rows(objs, SLICES))
    assert (cells["STATE"], cells["NODE"], cells["DEVICES"], cells["NVLINK"]) == (
        "allocated",
        "node-a",
        "gpu-0,gpu-1",
        "nvswitch-0",
    )
    get.emit("json", objs, [cells], get.CLAIM_COLUMNS)
    assert json.loads(capsys.readouterr().out)["items"] == objs
    get.emit("table", [], [], get.CLAIM_COLUMNS)
    assert capsys.readouterr().out == "No resources found.\n"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param({}, "", id="no-consumers"),
        pytest.param(
            {
                "reservedFor": [
                    {"resource": "pods", "name": "p1", "uid": "u1"},
                    {"resource": "pods", "name": "p2", "uid": "u2"},
                ]
            },
            "p1,p2",
            id="two-pods",
        ),
    ],
)
def test_consumers_cell(status: dict[str, Any], expected: str) -> None:
    assert get.consumers_cell({"metadata": {"name": "c"}, "status": status}) == expected
