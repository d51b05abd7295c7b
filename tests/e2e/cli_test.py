"""End to end: `gpudra up` on a one-node simulated fleet (4 L4 GPUs), then the kubectl-like
commands against it (apply, get, describe, explain, drift, top, delete), then Ctrl-C.

Checks what a person sees: claims land and are listed, an unschedulable claim explains itself in
`describe` and `explain`, deleting a claim frees its device for the next one, errors are one line,
and `up` stops every service and removes its state file on SIGINT.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudra_cli.commands import apply, delete, describe, drift, explain, get, top, up

cli = importlib.import_module("gpudra_cli.main")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUNNER = (
    "import argparse, importlib, sys\n"
    "from gpudra_cli.commands import up\n"
    "cli = importlib.import_module('gpudra_cli.main')\n"
    "parser = argparse.ArgumentParser(prog='gpudra')\n"
    "up.register(parser.add_subparsers(dest='command'))\n"
    "sys.exit(cli.main(sys.argv[1:], parser=parser))\n"
)
CLAIMS = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: first}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 3}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: too-many}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}]
"""
SECOND = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: second}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 4}}]
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudra")
    sub = p.add_subparsers(dest="command")
    for module in (apply, delete, describe, drift, explain, get, top, up):
        module.register(sub)
    return p


class Gpudra:
    """`up` runs as its own process; the other commands run in this process (each is a fresh
    `asyncio.run`), which keeps the test fast without changing what they do."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str] | None = None) -> None:
        self.tmp = tmp
        self.state = tmp / "state.json"
        self.capsys = capsys

    def up_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-c", RUNNER, "up", "--state-file", str(self.state), *args]

    def __call__(self, *args: str, ok: bool = True) -> str:
        assert self.capsys is not None
        self.capsys.readouterr()
        code = cli.main([*args, "--state-file", str(self.state)], parser=parser())
        out, err = self.capsys.readouterr()
        if ok:
            assert code == 0, f"gpudra {' '.join(args)}:\n{err[-3000:]}"
            return out
        assert code == 1, (out, err)
        return err


@pytest.fixture(scope="module")
def gpudra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpudra]:
    tmp = tmp_path_factory.mktemp("cli")
    g = Gpudra(tmp)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    log = (tmp / "up.log").open("w")
    # A short run directory: kubelet sockets below it must fit in sun_path (107 bytes).
    run_dir = Path(tempfile.mkdtemp(prefix="gpudra-e2e-cli-", dir="/tmp"))
    process = subprocess.Popen(
        g.up_argv("--fleet", "l4-pcie=1", "--store-dir", str(run_dir)),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while not g.state.exists():
            assert process.poll() is None, (tmp / "up.log").read_text()
            assert time.monotonic() < deadline, (tmp / "up.log").read_text()
            time.sleep(0.2)
        yield g
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        finally:
            log.close()
        assert code == 0, (tmp / "up.log").read_text()
        assert not g.state.exists()
        leftovers = subprocess.run(
            ["pgrep", "-f", str(run_dir)], capture_output=True, text=True
        ).stdout
        assert leftovers == "", f"processes left behind: {leftovers}"
        shutil.rmtree(run_dir, ignore_errors=True)


def claims_json(gpudra: Gpudra) -> dict[str, dict[str, Any]]:
    doc = json.loads(gpudra("get", "claims", "-o", "json"))
    return {c["metadata"]["name"]: c for c in doc["items"]}


def test_the_cli_session(gpudra: Gpudra, capsys: pytest.CaptureFixture[str]) -> None:
    gpudra.capsys = capsys
    manifests = gpudra.tmp / "claims.yaml"
    manifests.write_text(CLAIMS, encoding="utf-8")
    out = gpudra("apply", "-f", str(manifests), "--wait", "--timeout", "30")
    assert "resourceclaim/first created" in out
    assert "resourceclaim/too-many created" in out
    assert "unschedulable" in out
    objs = claims_json(gpudra)
    first = objs["first"]["status"]["allocation"]["devices"]["results"]
    assert len(first) == 3
    assert len({r["pool"] for r in first}) == 1

    devices = gpudra("get", "devices", "-o", "wide")
    assert devices.count("default/first") == 3

    described = gpudra("describe", "claim", "too-many")
    assert "State:        unschedulable" in described
    assert "Why not:" in described
    assert "unschedulable:" in described.split("Events:")[1]
    explained = gpudra("explain", "claim", "too-many")
    assert "It does not fit now" in explained
    assert "request gpu: wants 9" in explained

    assert "fleet majority" in gpudra("drift")

    # A 4-GPU claim waits until deleting `first` frees its GPUs.
    second = gpudra.tmp / "second.yaml"
    second.write_text(SECOND, encoding="utf-8")
    assert "unschedulable" in gpudra("apply", "-f", str(second), "--wait", "--timeout", "30")
    assert 'resourceclaim "first" deleted' in gpudra("delete", "claim", "first")
    deadline = time.monotonic() + 30
    objs = claims_json(gpudra)
    while "allocation" not in objs["second"].get("status", {}) and time.monotonic() < deadline:
        time.sleep(0.5)
        objs = claims_json(gpudra)
    assert "first" not in objs
    assert len(objs["second"]["status"]["allocation"]["devices"]["results"]) == 4

    err = gpudra("describe", "claim", "nope", ok=False)
    assert err == "gpudra describe: claim default/nope not found\n"
    assert "already running" in gpudra("up", "--fleet", "small", ok=False)
    # Node-agents sample every second; a loaded CI machine can delay a sample past a short window.
    assert "GPU %" in gpudra("top", "--seconds", "5")
