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


async def _store_claim(nats_url: str, name: str) -> None:
    from gpudra_bus import ensure_buckets, ensure_streams
    from gpudra_cli.standalone.client import Client
    from gpudra_cli.standalone.testdata import claim

    client = await Client.open(nats_url)
    try:
        await ensure_streams(client.nc.jetstream())
        await ensure_buckets(client.nc.jetstream())
        await client.create_claim(claim(name))
    finally:
        await client.close()


def _running(tmp_path: Path, nats_url: str) -> Path:
    """A state file naming this process and the test NATS: a running system to the CLI."""
    import os

    from gpudra_cli.standalone import state

    path = tmp_path / "state.json"
    running = state.State(nats_url=nats_url, run_dir=str(tmp_path), pid=os.getpid(), fleet="t")
    state.save(running, path)
    return path


@pytest.mark.parametrize("output", ["table", "json"])
def test_get_of_a_claim_that_does_not_exist_is_an_error(
    tmp_path: Path, nats_url: str, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    import asyncio
    import uuid

    present, missing = f"here-{uuid.uuid4().hex[:8]}", f"gone-{uuid.uuid4().hex[:8]}"
    asyncio.run(_store_claim(nats_url, present))
    path = _running(tmp_path, nats_url)
    argv = ["get", "claims", present, missing, "-o", output, "--state-file", str(path)]
    code = cli.main(argv, parser=parser())
    out, err = capsys.readouterr()
    assert code == 1
    assert present in out  # what exists is still shown, as kubectl shows it
    assert err == f"gpudra get: claim default/{missing} not found\n"
    if output == "json":
        assert [c["metadata"]["name"] for c in json.loads(out)["items"]] == [present]


def test_get_with_names_of_another_kind_is_an_error(
    tmp_path: Path, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import uuid

    asyncio.run(_store_claim(nats_url, f"any-{uuid.uuid4().hex[:8]}"))
    path = _running(tmp_path, nats_url)
    code = cli.main(["get", "nodes", "no-such-node", "--state-file", str(path)], parser=parser())
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert "names select claims only" in err
    assert err.count("\n") == 1, err


def test_delete_goes_on_past_a_claim_that_is_gone(
    tmp_path: Path, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `delete -f examples/` after one claim was deleted by hand must still delete the others.
    import asyncio
    import uuid

    first, gone, last = (f"{n}-{uuid.uuid4().hex[:8]}" for n in ("first", "gone", "last"))
    for name in (first, last):
        asyncio.run(_store_claim(nats_url, name))
    path = _running(tmp_path, nats_url)
    argv = ["delete", "claim", first, gone, last, "--state-file", str(path)]
    code = cli.main(argv, parser=parser())
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines() == [
        f'resourceclaim "{first}" deleted',
        f'resourceclaim "{last}" deleted',
    ]
    assert err == f"gpudra delete: claim default/{gone} not found\n"
    assert cli.main(["get", "claims", first, "--state-file", str(path)], parser=parser()) == 1
    assert cli.main(["get", "claims", last, "--state-file", str(path)], parser=parser()) == 1


def test_describe_goes_on_past_a_claim_that_is_gone(
    tmp_path: Path, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import uuid

    gone, present = f"gone-{uuid.uuid4().hex[:8]}", f"here-{uuid.uuid4().hex[:8]}"
    asyncio.run(_store_claim(nats_url, present))
    path = _running(tmp_path, nats_url)
    argv = ["describe", "claim", gone, present, "--state-file", str(path)]
    code = cli.main(argv, parser=parser())
    out, err = capsys.readouterr()
    assert code == 1
    assert f"Name:         {present}" in out
    assert err == f"gpudra describe: claim default/{gone} not found\n"


def test_apply_wait_that_times_out_says_so_and_fails(
    tmp_path: Path, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No allocator runs here: the claim is never decided. Exit 0 with a "pending" row would read
    # as success to a script, or to a person who does not look at the row.
    import asyncio
    import uuid

    name = f"undecided-{uuid.uuid4().hex[:8]}"
    asyncio.run(_store_claim(nats_url, f"layout-{uuid.uuid4().hex[:8]}"))  # streams and buckets
    manifest = tmp_path / "claim.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        f"metadata: {{name: {name}}}\n"
        "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}\n",
        encoding="utf-8",
    )
    path = _running(tmp_path, nats_url)
    argv = ["apply", "-f", str(manifest), "--wait", "--timeout", "1", "--state-file", str(path)]
    code = cli.main(argv, parser=parser())
    out, err = capsys.readouterr()
    assert code == 1
    assert f"resourceclaim/{name} created" in out
    assert "pending" in out  # the table is still shown
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpudra apply: no decision on 1 of 1 claims after 1 s"), err
    assert f"default/{name}" in last
